"""The command line's contracts: the version and -h, the tool's version in every JSON, exit codes (4: vLLM would
refuse the deployment), -o naming the format, JSON that keeps every key, the measured memory block in the JSON,
and a schema whose closed sets are exactly what plan takes."""

import importlib.metadata
import json

import pytest
import yaml
from jsonschema import Draft202012Validator

from conftest import LOGS, RECIPES, ROOT, SEED, run
from dsa_kvcalc import verify
from dsa_kvcalc.keys import RecipeError, flatten_keys
from dsa_kvcalc.recipe import load

H200 = RECIPES / "deepseek-v3.2-8xh200-tp8.yaml"


def stdout_json(*args) -> dict:
    result = run(*args)
    assert result.exit_code in (0, 4), result.output
    return json.loads(result.stdout)


def test_version_and_short_help():
    version = importlib.metadata.version("dsa-kvcalc")  # the installed package's metadata
    assert run("--version").output == f"dsa-kvcalc {version}\n"
    assert run("-h").output == run("--help").output and "Exit codes: 0 done" in run("-h").output
    assert run("plan", "-h").output == run("plan", "--help").output


def test_every_json_names_the_tool_version(tmp_path):
    tool = {"name": "dsa-kvcalc", "version": importlib.metadata.version("dsa-kvcalc")}
    log = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
    for args in (["plan", SEED, "-f", "json"], ["models", "-f", "json"], ["gpus", "-f", "json"],
                 ["fit", SEED, "-f", "json"], ["calibrate", log, "--set", "gpu=RTX PRO 6000", "-f", "json"],
                 ["recommend", SEED, "--target-concurrency", 256, "--min-kv-tokens", 8_000_000, "-f", "json"]):
        assert stdout_json(*args)["tool"] == tool, args


@pytest.mark.parametrize("sets, verdict", [
    # main reserves the decode worst case: 4,096 x 6 rows x 1,049,088 columns x 6 B = 154.7 GB, more than the
    # B200's 173 GiB leave after the weights: no KV cache at all.
    (["vllm-version=main", "max-num-seqs=4096"], "no memory is left for the KV cache"),
    # vLLM refuses max-num-seqs above max-num-batched-tokens (the seed's recipe batches 8,192)
    (["max-num-seqs=8193"], "max-num-seqs 8,193 is above max-num-batched-tokens 8,192"),
    # 1 MB of KV cache cannot hold one request of 1M tokens (its pages alone are 1,048,576 / 128 compressed blocks)
    (["kv-cache-memory-bytes=1000000"], "one request of max-model-len 1,048,576 needs "),
])
def test_a_deployment_vllm_would_refuse_exits_4_with_the_verdict(sets, verdict):
    result = run("plan", SEED, *(a for s in sets for a in ("--set", s)), "-f", "json")
    assert result.exit_code == 4, result.output
    refused = json.loads(result.stdout)["backends"][0]["refused"]  # auto, the recipe's backend
    assert refused.startswith(verdict)
    assert result.stderr == \
        f"error: {json.loads(result.stdout)['backends'][0]['engine_label']} would refuse to start this deployment: " \
        f"{refused}\n"


def test_a_deployment_that_starts_exits_0():
    result = run("plan", SEED, "-f", "json")
    assert result.exit_code == 0 and all(b["refused"] is None for b in json.loads(result.stdout)["backends"]
                                         if b["available"])


@pytest.mark.parametrize("name, starts", [("plan.json", "{"), ("plan.md", "- vLLM 0.33.0 starts."), ("plan.csv", "backend,"),
                                          ("plan.sh", "# "), ("plan.yaml", "# "), ("plan.txt", "vLLM 0.33.0 starts.")])
def test_the_output_suffix_names_the_format(tmp_path, name, starts):
    out = tmp_path / name
    assert run("plan", SEED, "-o", out).exit_code == 0
    text = out.read_text()
    assert text.startswith(starts), text[:200]
    if name == "plan.sh":
        assert "vllm serve deepseek-ai/DeepSeek-V4.1-Flash" in text
    if name == "plan.yaml":
        assert yaml.safe_load(text)["model"] == "deepseek-ai/DeepSeek-V4.1-Flash"
    assert run("plan", SEED, "-o", tmp_path / "forced.json", "-f", "csv").exit_code == 0
    assert (tmp_path / "forced.json").read_text().startswith("backend,")  # --format wins


def test_an_unavailable_backend_keeps_every_key_with_null():
    data = stdout_json("plan", SEED, "-f", "json")
    aiter = flatten_keys(next(b for b in data["backends"] if b["backend"] == "aiter"))
    auto = flatten_keys(data["backends"][0])
    assert set(aiter) == set(auto) and aiter["available"] is False
    assert {k: v for k, v in aiter.items() if v is not None} == {
        "backend": "aiter", "engine_label": "vLLM 0.33.0", "available": False, "selected": False,
        "reason": "needs gfx942/gfx950; B200 is sm100"}


def test_the_json_recipe_holds_the_measured_memory_block():
    memory = stdout_json("plan", SEED, "-f", "json")["recipe"]["memory"]
    # The seed recipe's block, in bytes: 18.40 GiB = 19,756,849,561.6 B, rounded; the bytes as written.
    written = yaml.safe_load(SEED.read_text())["memory"]
    assert memory == {"weights_bytes": None, "peak_activation_bytes": written["peak_activation_bytes"],
                      "non_torch_bytes": None, "cudagraph_bytes": {"auto": 19_756_849_562, "deep_select": 13_303_661_199},
                      "indexer_headroom_bytes": written["indexer_headroom_bytes"],
                      "unprofiled_bytes": written["unprofiled_bytes"], "gpu": "B200", "rest": "peak_activation"}
    assert stdout_json("plan", H200, "-f", "json")["recipe"]["memory"] == dict.fromkeys(memory)


BASE = {"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 4, "enable-expert-parallel": True}
CLOSED = {  # each key's accepted values, and spellings around them
    "kv-cache-dtype": ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "fp9", "FP8", "Fp8", ""],
    "sparse-indexer-topk-backend": ["auto", "deep_select", "flashinfer", "deepselect", "DEEP_SELECT", "deep-select"],
    "compilation-config.cudagraph_mode": ["NONE", "FULL", "FULL_AND_PIECEWISE", "FULLL", "full", "Piecewise"],
    "engine": ["vllm", "deepinfer", "VLLM", "sglang"],
    "attention-backend": ["FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "flashmla_sparse", "FLASH_ATTN"],
    "deepgemm": ["2.8", "2.8.2", "v2.6.1", "2.1", "2.7", "3.0", "2.8x", 2.8, 2.6, 2.7],
    "memory.rest": ["weights", "peak_activation", "non_torch", "cudagraph", "Weights"],
}


def with_value(key: str, value) -> dict:
    raw = dict(BASE)
    top, _, inner = key.partition(".")
    if key == "memory.rest":
        raw["memory"] = {"weights_gib": 80, "peak_activation_gib": 30, "non_torch_gib": 2, "rest": value}
    elif inner:
        raw[top] = {inner: value}
    else:
        raw[key] = value
    return raw


@pytest.mark.parametrize("key", CLOSED)
def test_the_schema_takes_exactly_what_plan_takes(key):
    validator = Draft202012Validator(json.loads(run("schema").output))
    for value in CLOSED[key]:
        raw = with_value(key, value)
        try:
            load(raw)
            plan_takes = True
        except RecipeError as error:
            plan_takes = not error.key.startswith(key.split(".")[0])
        assert validator.is_valid(raw) == plan_takes, (key, value)


def test_a_memory_term_in_gib_and_in_bytes_is_refused_by_both():
    validator = Draft202012Validator(json.loads(run("schema").output))
    raw = BASE | {"memory": {"weights_gib": 80, "weights_bytes": 80 << 30}}
    assert not validator.is_valid(raw)
    with pytest.raises(RecipeError, match="given twice, in GiB and in bytes"):
        load(raw)
    assert validator.is_valid(BASE | {"memory": {"weights_gib": 80, "non_torch_bytes": 1 << 30}})


def test_recommend_json_holds_the_tables_pick():
    data = stdout_json("recommend", SEED, "--target-concurrency", 256, "--min-kv-tokens", 8_000_000, "-f", "json")
    text = " ".join(run("recommend", SEED, "--target-concurrency", 256, "--min-kv-tokens", 8_000_000).output.split())
    pick = data["recommended"]
    assert pick["backend"] == "deep_select" and f"Recommended: max-num-seqs {pick['max_num_seqs']}," in text
    assert data["targets"] == {"concurrency": 256, "kv_cache_tokens": 8_000_000}


def test_the_usage_doc_gives_verifys_install_line():
    line = verify.INSTALL.split("in the checkout: ")[1].replace("pip install", ".venv/bin/pip install")
    assert line in (ROOT / "docs" / "usage.md").read_text()


V32 = RECIPES / "deepseek-v3.2-8xb200-tp8.yaml"
V4 = RECIPES / "deepseek-v4-flash-4xh200-dep4.yaml"


@pytest.mark.parametrize("recipe, sets, key, why", [
    # DeepSeek-V3.2 has 128 attention heads: TP3 does not divide them (vllm==0.33.0 vllm/config/model.py:1557-1564)
    (V32, ["tensor-parallel-size=3"], "tensor-parallel-size", "does not divide deepseek-ai/DeepSeek-V3.2's 128"),
    # DeepSeek-V4's FlashMLA attention on SM90 stores fp8_ds_mla and takes fp8 only (vllm==0.33.0
    # vllm/models/deepseek_v4/attention.py:107-117)
    (V4, ["kv-cache-dtype=bfloat16"], "kv-cache-dtype", "takes fp8 only"),
    # compilation-config.max_cudagraph_capture_size 0 with graphs on (vllm==0.33.0 vllm/config/vllm.py:2551-2626)
    (V32, ["compilation-config.max_cudagraph_capture_size=0"], "compilation-config.max_cudagraph_capture_size",
     "captures no CUDA graph"),
], ids=["heads", "v4-cache-dtype", "capture-size-0"])
@pytest.mark.parametrize("command", ["plan", "fit"])
def test_every_refusal_vllm_would_make_exits_4_in_one_line(command, recipe, sets, key, why):
    result = run(command, recipe, *(a for s in sets for a in ("--set", s)))
    assert result.exit_code == 4, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {key}: ")
    assert why in result.stderr


def test_a_refusal_found_while_sweeping_is_its_points_row():
    result = run("sweep", V32, "--vary", "tensor-parallel-size=3,8", "--format", "jsonl")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.exit_code == 0 and "does not divide" in rows[0]["error"] and "error" not in rows[1]
