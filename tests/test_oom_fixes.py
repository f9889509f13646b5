"""What a user can deploy from an at-risk plan: the serve line says the risk or applies a fix, recommend and fit never
hand out a value at the edge, and plan's own seqs fix is fit's answer. The verdicts are re-planned with --set here, as
a user would check them, not read back from the fix."""

import json

import pytest

from conftest import SEED, fails, run
from dsa_kvcalc import planning
from dsa_kvcalc.recipe import load_recipe


def test_a_serve_line_of_an_at_risk_plan_carries_the_verdict_and_warns_on_stderr():
    result = run("plan", SEED, "--format", "serve")
    assert result.exit_code == 0
    assert result.stdout.startswith("# WARNING: this deployment runs out of memory above 129 concurrent decodes")
    assert "--max-num-seqs 256" in result.stdout
    assert result.stderr.startswith("warning: this deployment runs out of memory above 129")
    config = run("plan", SEED, "--format", "vllm-config")
    assert config.stdout.startswith("# WARNING:") and "max-num-seqs: 256" in config.stdout


def test_each_fix_writes_a_deployment_that_plans_safe():
    for name, flag in (("seqs", "--max-num-seqs"), ("budget", "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB="),
                       ("deep_select", "--sparse-indexer-topk-backend"), ("kv", "--kv-cache-memory-bytes")):
        result = run("plan", SEED, "--format", "serve", "--fix", name)
        assert result.exit_code == 0 and "WARNING" not in result.stdout and not result.stderr, (name, result.output)
        assert flag in result.stdout, (name, result.stdout)
        fixed = json.loads(run("plan", SEED, "--fix", name, "--format", "json").stdout)["summary"]["oom"]
        assert not fixed["at_risk"] and fixed["fixes"] == [], name


def test_fix_is_refused_where_there_is_nothing_to_fix():
    fails(run("plan", SEED, "--set", "sparse-indexer-topk-backend=deep_select", "--fix", "seqs"),
          "error: --fix seqs:", "no OOM risk")


def test_plans_seqs_fix_is_fits_largest_safe_max_num_seqs_and_one_more_is_at_risk():
    fix = next(f for f in json.loads(run("plan", SEED, "-f", "json").stdout)["summary"]["oom"]["fixes"]
               if f["name"] == "seqs")
    answers = json.loads(run("fit", SEED, "--format", "json", "--backend", "auto").stdout)["answers"]
    safe = next(a for a in answers if a["question"] == "max-num-seqs")
    assert safe["largest"] == fix["value"] and not safe["oom"]["at_risk"]
    assert "OOM risk" in safe["one_more"]
    one_more = planning.plan(load_recipe(SEED, [f"max-num-seqs={fix['value'] + 1}"])).backend("auto")
    assert one_more.oom.at_risk


def test_recommend_serves_a_pick_plan_calls_safe():
    result = run("recommend", SEED, "--target-concurrency", 64, "--min-kv-tokens", 1_000_000, "--format", "serve")
    assert result.exit_code == 0 and "WARNING" not in result.stdout
    seqs = int(result.stdout.split("--max-num-seqs ")[1].split()[0])
    backend = result.stdout.split("--sparse-indexer-topk-backend ")[1].split()[0]
    picked = planning.plan(load_recipe(SEED, [f"max-num-seqs={seqs}", f"sparse-indexer-topk-backend={backend}"]))
    assert not picked.backend(backend).oom.at_risk
    above = planning.plan(load_recipe(SEED, [f"max-num-seqs={seqs + 1}", f"sparse-indexer-topk-backend={backend}"]))
    assert above.backend(backend).oom.at_risk or above.backend(backend).kv_cache_tokens < 1_000_000


def test_main_with_62860_stays_at_risk_where_the_room_is_below_the_indexer_headroom():
    """#62860 reserves the decode logits (9.0 GiB for the seed), but the reservation raises the peak, and so frees
    KV for the step, only by what it adds beyond the indexer headroom (2.88 GiB measured): the step then holds the
    logits only where the room without the reservation covers that headroom. At utilisation 0.995 it does not:
    total x 0.005 = 957,512,418 B - 1,351,223,296 B of KV-init buffers + 514,121,565 B of credit = 120,410,687 B,
    less than 3,091,880,448 B."""
    fixed = planning.plan(load_recipe(SEED, ["vllm-version=main", "gpu-memory-utilization=0.995"])).backend("auto")
    assert fixed.release.reserves_decode_logits and fixed.reserved_bytes == 9_668_395_008
    rise = fixed.peak_activation_bytes - planning.plan(load_recipe(
        SEED, ["vllm-version=main", "gpu-memory-utilization=0.995"])).memory.base_peak.bytes
    assert rise == 9_668_395_008 - 3_091_880_448
    assert fixed.oom.room_bytes - rise < 3_091_880_448 and fixed.oom.at_risk
    at_097 = planning.plan(load_recipe(SEED, ["vllm-version=main"])).backend("auto")
    assert not at_097.oom.at_risk  # 4,907,972,772 B of room before the rise covers the headroom


@pytest.mark.parametrize("sets", [[], ["vllm-version=main", "gpu-memory-utilization=0.995"]],
                         ids=["seed", "main-at-0.995"])
def test_plans_budget_and_kv_fixes_are_the_edge_one_mib_or_byte_short_is_at_risk(sets):
    # the budget fix is the smallest VLLM_SPARSE_INDEXER_MAX_LOGITS_MB that plans safe, the kv fix the largest
    # --kv-cache-memory-bytes: each re-planned with --set as a user would, one step short of it is at risk. On main
    # (#62860) the reservation has already raised the peak, which the budget must count once only.
    plan = json.loads(run("plan", SEED, "-f", "json", *[arg for s in sets for arg in ("--set", s)]).stdout)
    fixes = {f["name"]: f for f in plan["summary"]["oom"]["fixes"]}
    for name, past in (("budget", -1), ("kv", 1)):
        key, value = fixes[name]["key"], fixes[name]["value"]
        assert not planning.plan(load_recipe(SEED, [*sets, f"{key}={value}"])).backend("auto").oom.at_risk, name
        assert planning.plan(load_recipe(SEED, [*sets, f"{key}={value + past}"])).backend("auto").oom.at_risk, name
