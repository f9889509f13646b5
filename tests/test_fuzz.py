"""Thousands of generated recipes, valid and broken: each ends in a plan or one clean error, never a traceback."""

import re

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dsa_kvcalc import capacity, report
from dsa_kvcalc.cli import app
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load

junk = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**13), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(-5, 5000), max_size=4),
                 st.dictionaries(st.text(max_size=8), st.integers(-3, 10), max_size=3))
sizes = st.one_of(st.integers(-2, 2_000_000), st.sampled_from(["128k", "1M", "1m", "auto", "2.5K", "64K", "-1"]))
good = {
    "model": st.sampled_from(["DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2-Exp", "GLM-5", "zai-org/GLM-5-FP8",
                              "deepseek-v4-flash", "DeepSeek-V4-Pro", "DeepSeek-V4.1-Flash", "GLM-5.3-Flash",
                              "GLM-5.3", "Qwen3"]),
    "gpu": st.sampled_from(["H100", "h200", "B200", "GB200", "B300", "MI300X", "MI355X", "A100"]),
    "max-num-seqs": st.integers(-1, 4096),
    "max-model-len": sizes,
    "max-num-batched-tokens": sizes,
    "speculative-config": st.one_of(
        st.fixed_dictionaries({"num_speculative_tokens": st.integers(-1, 8)},
                              optional={"method": st.sampled_from(["mtp", "ngram", "deepseek_mtp"])}),
        st.just('{"num_speculative_tokens": 2}'), st.just("{broken")),
    "tensor-parallel-size": st.sampled_from([0, 1, 2, 4, 8, 16]),
    "data-parallel-size": st.sampled_from([1, 2, 4, 8]),
    "enable-expert-parallel": st.booleans(),
    "decode-context-parallel-size": st.sampled_from([1, 2, 4]),
    "gpu-memory-utilization": st.floats(-0.5, 1.5),
    "kv-cache-dtype": st.sampled_from(["auto", "fp8", "fp8_e4m3", "bfloat16", "int4"]),
    "kv-cache-memory-bytes": sizes,
    "sparse-indexer-topk-backend": st.sampled_from(["auto", "deep_select", "persistent", "aiter", "fastest"]),
    "enforce-eager": st.booleans(),
    "compilation-config": st.fixed_dictionaries({}, optional={
        "cudagraph_mode": st.sampled_from(["FULL_AND_PIECEWISE", "piecewise", "NONE", "FULL", "half"]),
        "max_cudagraph_capture_size": st.integers(-1, 4096),
        "cudagraph_capture_sizes": st.lists(st.integers(-1, 2048), max_size=5)}),
    "deepgemm": st.sampled_from(["2.8", "2.8.2", "2.6.1", "2.2", "2.7", "3"]),
    "engine": st.sampled_from(["vllm", "deepinfer", "sglang"]),
    "env": st.fixed_dictionaries({}, optional={"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": st.integers(-1, 4096)}),
    "memory": st.fixed_dictionaries({}, optional={
        "weights_gib": st.floats(-1, 300), "peak_activation_bytes": st.integers(-1, 10**11),
        "cudagraph_gib": st.one_of(st.floats(0, 40), st.fixed_dictionaries({"auto": st.floats(0, 40)})),
        "indexer_headroom_gib": st.floats(0, 10), "non_torch": st.integers(0, 5)}),
    "port": st.integers(1, 65535),
}
# Mostly valid (so that plans run), sometimes broken, rarely unknown.
valid_model = st.sampled_from(["DeepSeek-V3.2", "GLM-5", "deepseek-v4-flash", "DeepSeek-V4.1-Flash", "GLM-5.3-Flash"])
valid_gpu = st.sampled_from(["H200", "B200", "B300", "MI355X"])


@st.composite
def recipes(draw):
    keys = draw(st.lists(st.sampled_from(sorted(good)), unique=True, max_size=len(good)))
    raw = {"model": draw(valid_model), "gpu": draw(valid_gpu), "tensor-parallel-size": 8}
    for key in keys:
        broken = draw(st.integers(0, 20)) == 0
        raw[key.replace("-", "_") if draw(st.booleans()) else key] = draw(junk if broken else good[key])
    if draw(st.integers(0, 30)) == 0:
        raw[draw(st.text(min_size=1, max_size=10))] = 1
    return raw


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipes())
def test_loader_and_plan_end_in_a_result_or_a_clean_error(raw):
    try:
        plan = capacity.plan(load(raw))
    except RecipeError as error:
        assert error.key and str(error).count("\n") == 0
        return
    data = report.plan_json(plan)
    for backend in data["backends"]:
        if backend["available"]:
            assert backend["kv_cache_tokens"] >= 0 and backend["reserved_bytes"] >= backend["prefill_budget_bytes"] \
                or plan.recipe.engine.profile_holds_decode_logits


runner = CliRunner()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(raw=recipes(), format=st.sampled_from(["table", "json", "csv", "markdown"]))
def test_cli_exits_0_2_or_4_without_traceback(tmp_path, raw, format):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = runner.invoke(app, ["plan", str(path), "--format", format])
    assert result.exit_code in (0, 2, 4), result.output  # 4: a deployment vLLM would refuse, after the plan
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.output.startswith("error: ") and result.output.count("\n") == 1
    if result.exit_code == 4:
        assert re.search(r"(would refuse|refuses) to start", result.output), result.output
