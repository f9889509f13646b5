"""compare: each column is plan's own answer for its recipe, read from plan's JSON at that point, and the rules that
differ are VLLM_RULES' changes between the columns' releases. The three questions of issue 27 in one command
each: the 0.31.0 -> 0.33.0 upgrade of the seed's recipe (vLLM 0.30.0 has no indexer_sparse_logits, which the seed
gives, and refuses it), H200 or B200, TP8 or DEP8."""

import json
import re

import pytest

from conftest import RECIPES, SEED, fails, run
from dsa_kvcalc.engine import VLLM_RULES, parsed

V32_H200 = RECIPES / "deepseek-v3.2-8xh200-tp8.yaml"
V32_B200 = RECIPES / "deepseek-v3.2-8xb200-tp8.yaml"
ANSWER_KEYS = ("kv_cache_tokens", "max_concurrency", "oom_above_decodes", "safe_decodes", "compared", "reserved_bytes",
               "cudagraph_bytes", "weights_bytes", "kv_cache_bytes")


def compared(*args) -> dict:
    result = run("compare", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    return {row["key"]: row for row in data["rows"]} | {"columns": data["columns"], "rules": data["rules_changed"]}


def plan_json(recipe, *sets) -> dict:
    result = run("plan", recipe, *(a for s in sets for a in ("--set", s)), "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def as_plan_says(plan: dict) -> dict:
    """The figures compare must show for one column, read from plan's JSON: its summary and the answered backend."""
    s = plan["summary"]
    b = next(b for b in plan["backends"] if b["backend"] == s["backend"])
    oom = s["oom"]
    return {"kv_cache_tokens": s["kv_cache_tokens"], "max_concurrency": s["max_concurrency"],
            "oom_above_decodes": oom["max_decodes"] if oom["at_risk"] else False,
            "safe_decodes": oom["safe_decodes"] if oom["at_risk"] else None,
            "compared": None if s["compared"] is None else {
                key: s["compared"][key] for key in ("backend", "kv_cache_tokens", "kv_cache_tokens_vs_answered")},
            "reserved_bytes": b["reserved_bytes"], "cudagraph_bytes": b["cudagraph_bytes"],
            "weights_bytes": plan["memory"]["weights_bytes"], "kv_cache_bytes": b["kv_cache_bytes"]}


def check_columns(rows: dict, plans: list[dict]):
    for key in ANSWER_KEYS:
        expected = [as_plan_says(plan)[key] for plan in plans]
        if key == "compared":
            expected = [e or {"backend": "deep_select", "unavailable": p["summary"]["deep_select_unavailable"]}
                        if p["summary"]["deep_select_unavailable"] else e for e, p in zip(expected, plans)]
        assert rows[key]["values"] == expected, key
        assert rows[key]["differs"] == (len({json.dumps(e) for e in expected}) > 1), key


def test_the_upgrade_of_the_seeds_recipe_from_0_31_to_0_33():
    rows = compared(SEED, "--across", "vllm-version=0.31.0,0.33.0")
    plans = [plan_json(SEED, f"vllm-version={v}") for v in ("0.31.0", "0.33.0")]
    check_columns(rows, plans)
    # vLLM PR #62860's table: main (0.33.0's rules) logs 41,050,274 tokens for auto
    assert rows["kv_cache_tokens"]["values"][1] == 41_050_274
    assert [c["label"] for c in rows["columns"]] == ["0.31.0", "0.33.0"]
    assert rows["recipe.deepgemm"]["values"] == ["2.6", "2.8"]  # the release's DeepGEMM: BF16 logits from 0.33.0
    # the rules: exactly those whose values VLLM_RULES gives differently at the two releases, with every change
    # after 0.31.0 up to 0.33.0 and its source
    old, new = parsed("0.31.0"), parsed("0.33.0")
    changed = {name: rule for name, rule in VLLM_RULES.items() if rule.at(old)[0] != rule.at(new)[0]}
    assert [r["rule"] for r in rows["rules"]] == list(changed)
    for r in rows["rules"]:
        rule = changed[r["rule"]]
        assert [(c["release"], c["source"]) for c in r["changes"]] == [
            (c.release, c.source) for c in rule.changes if old < parsed(c.release) <= new]
    deepgemm = next(r for r in rows["rules"] if r["rule"] == "default_deepgemm")
    assert (deepgemm["oldest"], deepgemm["changes"][0]["value"], deepgemm["changes"][0]["release"]) == ("2.6", "2.8",
                                                                                                         "0.33.0")


def test_the_upgrades_table_shows_what_differs_and_cites_the_rules():
    text = " ".join(run("compare", SEED, "--across", "vllm-version=0.31.0,0.33.0").stdout.split())
    plans = [plan_json(SEED, f"vllm-version={v}")["summary"] for v in ("0.31.0", "0.33.0")]
    assert (f"KV tokens/rank │ {plans[0]['kv_cache_tokens']:,} │ {plans[1]['kv_cache_tokens']:,}" in text)
    assert (f"OOM │ >{plans[0]['oom']['max_decodes']:,} decodes │ >{plans[1]['oom']['max_decodes']:,} decodes"
            in text)
    assert "default_deepgemm: 2.6 -> 2.8 in 0.33.0 (vllm==0.33.0 vllm/utils/deep_gemm.py" in text
    assert re.search(r"the same in every column: answered for auto; reservation BUDGET; reserved GiB 0\.50", text)


def test_h200_or_b200_differ_in_the_default_batch_and_deep_select():
    rows = compared(V32_H200, "--across", "gpu=H200,B200")
    check_columns(rows, [plan_json(V32_H200, f"gpu={gpu}") for gpu in ("H200", "B200")])
    # vLLM's default batch: 16,384 tokens from 160 GiB of GPU memory (B200: 178.35 GiB), else 8,192 (vllm==0.33.0
    # vllm/engine/arg_utils.py:2961-2963); deep_select needs SM100
    assert rows["recipe.max-num-batched-tokens"]["values"] == [8192, 16384]
    assert rows["compared"]["values"][0]["unavailable"] and rows["compared"]["values"][1]["backend"] == "deep_select"
    assert rows["rules"] == []  # one release


def test_tp8_or_dep8_counts_a_kv_cache_an_engine():
    rows = compared(V32_B200, "--across", "tensor-parallel-size=8,1", "--across", "data-parallel-size=1,8",
                    "--across", "enable-expert-parallel=false,true")
    sets = [["tensor-parallel-size=8", "data-parallel-size=1", "enable-expert-parallel=false"],
            ["tensor-parallel-size=1", "data-parallel-size=8", "enable-expert-parallel=true"]]
    plans = [plan_json(V32_B200, *s) for s in sets]
    check_columns(rows, plans)
    # DEP8 is 8 engines, each with its KV cache; TP8 one
    tokens = rows["kv_cache_tokens"]["values"]
    assert rows["deployment_kv_cache_tokens"]["values"] == [tokens[0], 8 * tokens[1]]
    assert [c["label"] for c in rows["columns"]] == ["8, 1, false", "1, 8, true"]


def test_two_recipes_side_by_side():
    rows = compared(V32_B200, RECIPES / "glm-5-8xb200-tp8.yaml")
    check_columns(rows, [plan_json(V32_B200), plan_json(RECIPES / "glm-5-8xb200-tp8.yaml")])
    assert [c["label"] for c in rows["columns"]] == ["deepseek-v3.2-8xb200-tp8", "glm-5-8xb200-tp8"]
    assert "deployment_kv_cache_tokens" not in rows  # no column is data parallel


def test_a_column_vllm_refuses_says_why_and_exits_4():
    result = run("compare", V32_B200, "--across", "tensor-parallel-size=3,8")
    assert result.exit_code == 4
    assert result.stderr == ("error: 3: tensor-parallel-size: 3 does not divide deepseek-ai/DeepSeek-V3.2's 128 "
                             "attention heads (vLLM would refuse to start)\n")
    text = " ".join(result.stdout.split())
    assert "vLLM starts │ no [1] │ yes" in text and "[1] 3: tensor-parallel-size: 3 does not divide" in text


@pytest.mark.parametrize("args, key", [
    ([V32_B200], "recipes"),
    ([V32_B200, V32_H200, "--across", "gpu=H200,B200"], "--across"),
    ([V32_B200, "--across", "gpu=H200,B200", "--across", "tensor-parallel-size=8"], "--across"),
    ([V32_B200, "--across", "max-num-sqs=1,2"], "--across max-num-sqs=1,2"),
])
def test_bad_input_is_one_line(args, key):
    fails(run("compare", *args), f"{key}: ")


def test_markdown_is_a_table_and_json_names_the_keys_across():
    text = run("compare", SEED, "--across", "vllm-version=0.31.0,0.33.0", "--format", "markdown").stdout
    lines = text.splitlines()
    assert "| vllm-version | 0.31.0 | 0.33.0 |" in lines and "|---|---|---|" in lines
    assert any(line.startswith("- vLLM rule default_deepgemm: 2.6 -> 2.8 in 0.33.0") for line in lines)
    data = json.loads(run("compare", SEED, "--across", "vllm-version=0.31.0,0.33.0", "-f", "json").stdout)
    assert data["across"] == "vllm-version" and data["tool"]["name"] == "dsa-kvcalc"
