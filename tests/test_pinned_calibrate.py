"""calibrate.py's rules that no other fast test pinned (found by tools/mutate.py), against the real logs in
tests/fixtures/vllm_logs, lines in vLLM's spelling, or sums written out beside them."""

import dataclasses
from pathlib import Path

import pytest

from conftest import LOGS, SEED
from dsa_kvcalc import calibrate as cal, memory_terms
from dsa_kvcalc import capacity
from dsa_kvcalc.recipe import RecipeError, load, load_recipe
from dsa_kvcalc.units import GIB
from dsa_kvcalc.vllm_log import read_log, read_log_file

GLM_020 = LOGS / "glm-5.1-fp8-8xh200-tp8-v0.20.0.log"
LFM = LOGS / "nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log"
V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}


def reading(path: Path):
    return read_log_file(path, "log")


def test_the_consumed_spelling_gives_non_torch_as_consumed_less_weights():
    # vLLM 0.27+: "Actual usage is X GiB for consumed memory (weights + non-torch)"; weights from "Model loading
    # took": 20.00 - 18.50 = 1.50 GiB of non-torch memory
    log = read_log("INFO [gpu_worker.py:526] Actual usage is 20.00 GiB for consumed memory (weights + non-torch), 5.00 "
                   "GiB for peak activation, and 1.00 GiB for CUDAGraph memory\n"
                   "INFO [gpu_model_runner.py:4879] Model loading took 18.50 GiB\n")
    measured = cal.measure(log)
    assert (measured.non_torch_bytes, measured.weights_bytes) == (round(1.5 * GIB), round(18.5 * GIB))
    assert measured.disagreements == []  # one rank: nothing to disagree


def test_the_utilisation_gap_gives_the_device_memory_where_the_log_prints_none():
    # The LFM log: 0.58 GiB of graphs, --gpu-memory-utilization 0.9500 equivalent to 0.9139 without them:
    # 0.58 / 0.0361 = 16.07 GiB, the 16 GiB device it ran on (it prints 16.00 GiB)
    measured = cal.measure(reading(LFM))
    assert round(measured.approximate_total_memory_bytes / GIB, 2) == 16.07
    assert measured.total_memory_bytes == 16 * GIB


def test_no_utilisation_gap_gives_no_device_memory():
    log = read_log("INFO [gpu_model_runner.py:6737] Estimated CUDA graph memory: 0.58 GiB total\n"
                   "INFO [gpu_worker.py:575] The current --gpu-memory-utilization=0.9500 is equivalent to "
                   "--gpu-memory-utilization=0.9500 without CUDA graph memory profiling\n"
                   "INFO [gpu_worker.py:560] Available KV cache memory: 10.00 GiB\n")
    assert cal.measure(log).approximate_total_memory_bytes is None


def test_a_rank_without_a_figure_takes_another_ranks():
    # The sizing rank (least Available KV) printed no KV tokens; the other rank's line stands in
    log = read_log("(Worker_TP0 pid=1) INFO [gpu_worker.py:560] Available KV cache memory: 10.00 GiB\n"
                   "(Worker_TP1 pid=2) INFO [gpu_worker.py:560] Available KV cache memory: 11.00 GiB\n"
                   "(Worker_TP1 pid=2) INFO [kv_cache_utils.py:1711] GPU KV cache size: 90,841 tokens\n")
    measured = cal.measure(log)
    assert (measured.rank, measured.kv_tokens) == ("Worker_TP0 pid=1", 90_841)


def test_a_hugging_face_cache_path_names_its_repository():
    raw, notes = cal.recipe_from_log(reading(LOGS / "deepseek-v4-flash-0731-8xb200-dp8-ep-vllm51454.log"))
    assert raw["model"] == "deepseek-ai/DeepSeek-V4-Flash-0731"  # .../models--deepseek-ai--DeepSeek-V4-Flash-0731/...
    assert notes == ["the non-default args line is cut short: read 17 arguments, the last one is lost (check the "
                     "recipe, or give --recipe)"]
    assert cal.model_name("zai-org/GLM-5") == "zai-org/GLM-5"


def test_args_without_a_model_and_values_that_are_no_literals():
    log = read_log("INFO [api_utils.py:273] non-default args: {'tensor_parallel_size': 8, 'attention_backend': "
                   "AttentionConfig(backend='FLASHMLA_SPARSE')}\n"
                   "INFO [gpu_worker.py:440] Available KV cache memory: 34.86 GiB\n"
                   "INFO [kv_cache_utils.py:1716] Maximum concurrency for 202,752 tokens per request: 1.84x\n")
    raw, notes = cal.recipe_from_log(log)
    # the max-model-len of the concurrency line, where the args give none
    assert raw == {"tensor-parallel-size": 8, "max-model-len": 202_752}
    assert notes == ["not readable as literals, left at their defaults: attention_backend"]


def test_a_log_without_a_release_version_is_read_by_its_stamps():
    # The GLM-5.1 0.20.0 log prints no version; its [file.py:LINE] stamps are 0.20.0's
    log = reading(GLM_020)
    measured = cal.measure(log)
    version, how = cal.log_version(measured, log)
    assert version == "0.20.0" and "the log prints no version" in how and "the same rules" not in how
    version, how = cal.log_version(dataclasses.replace(measured, version="0.1.dev5+gdeadbee"), log)
    assert version == "0.20.0" and "the log prints 0.1.dev5+gdeadbee, no release" in how
    # 0.19.0 and 0.19.1 stamp these lines alike
    old = reading(LOGS / "glm-5.1-fp8-8xh200-tp8-v0.19.1rc1.log")
    assert "(0.19.0, 0.19.1: the same rules)" in cal.log_version(cal.measure(old), old)[1]


def test_kv_figures_that_no_release_explains_name_none():
    raw = {"model": "GLM-5.1-FP8", "gpu": "H200", "tensor-parallel-size": 8}
    assert cal.version_from_kv(raw, cal.Measured("", 1, kv_tokens=1000), Path(".")) == (None, "")
    assert cal.version_from_kv(raw, cal.Measured("", 1, kv_tokens=1000, available_kv_bytes=GIB), Path(".")) == (
        None, "the log names no release, and no release's KV-cache rules give its tokens from its KV memory")


def test_the_recipes_version_stands_over_the_logs():
    log = reading(GLM_020)
    raw, _ = cal.with_log_facts({"model": "GLM-5.1-FP8", "vllm-version": "0.19.1"}, cal.measure(log), log, Path("."))
    assert raw["vllm-version"] == "0.19.1"


def test_a_log_without_a_model_needs_one():
    with pytest.raises(RecipeError, match="the log names no model"):
        cal.require({"gpu": "H200"}, cal.Measured("", 1))


def test_the_kv_target_is_the_logged_tokens_or_the_logged_memory():
    memory = memory_terms.rank_memory(load(V32_H200 | {"kv-cache-dtype": "fp8"}))
    block = memory.kv.block_bytes  # 61 x (656 + 132) x 64 = 3,076,352 B, 64 tokens
    # tokens alone: their blocks (64,000 tokens = 1,000 blocks)
    assert cal.kv_target_bytes(memory, cal.Measured("", 1, kv_tokens=64_000)) == (1000 * block, None)
    # memory alone: the memory
    assert cal.kv_target_bytes(memory, cal.Measured("", 1, available_kv_bytes=5 * GIB)) == (5 * GIB, None)
    # both, agreeing within 0.005 GiB + a block: the tokens' blocks; else the memory
    near = cal.Measured("", 1, kv_tokens=64_000, available_kv_bytes=1000 * block + GIB // 200 + block)
    assert cal.kv_target_bytes(memory, near) == (1000 * block, True)
    far = dataclasses.replace(near, available_kv_bytes=near.available_kv_bytes + 1)
    assert cal.kv_target_bytes(memory, far) == (far.available_kv_bytes, False)


@pytest.mark.parametrize("residual, activation, non_torch, split", [
    # vLLM's identity activation + non-torch = residual; logged terms kept, the rest derived
    (10 * GIB, 7 * GIB, 3 * GIB + 100, (7 * GIB - 100, 3 * GIB + 100)),  # within rounding: activation absorbs the gap
    (10 * GIB, 7 * GIB, 2 * GIB, (7 * GIB, 2 * GIB)),  # 1 GiB unexplained: both as logged
    (10 * GIB, 7 * GIB, None, (7 * GIB, 3 * GIB)),
    (10 * GIB, None, 3 * GIB, (7 * GIB, 3 * GIB)),
    (10 * GIB, None, None, (10 * GIB - 2 * GIB, 2 * GIB)),  # split with the 2 GiB estimate
    (GIB, None, None, (0, GIB)),  # less than the estimate: all non-torch
])
def test_split_residual(residual, activation, non_torch, split):
    result = cal.split_residual(load(V32_H200), residual, activation, non_torch, 2 * GIB, GIB // 50)
    assert (result.activation, result.non_torch) == split


def test_a_residual_of_exactly_the_estimate_is_split_not_all_non_torch():
    result = cal.split_residual(load(V32_H200), 2 * GIB, None, None, 2 * GIB, GIB // 50)
    assert (result.activation, result.non_torch, result.sources["non_torch"]) == (0, 2 * GIB, cal.ESTIMATED_NON_TORCH)


def test_mismatch_notes_name_the_mtp_layer_and_dcp():
    # V3.2 fp8 on H200: 61 x 788 = 48,068 B a logged token; with the MTP layer 62 x 788 = 48,856. A log implying
    # 48,856 B is told to set speculative-config; under DCP 2 the tokens are logical
    recipe = load(V32_H200 | {"kv-cache-dtype": "fp8"})
    measured = cal.Measured("", 1, available_kv_bytes=10 * GIB, kv_tokens=200_000)
    notes = cal.mismatch_notes(recipe, measured, 48_068, 48_856)
    assert len(notes) == 2 and "with the MTP layer's KV cache the figure is 48,856 B" in notes[1]
    assert len(cal.mismatch_notes(recipe, measured, 48_068, 48_068)) == 1
    dcp = cal.mismatch_notes(load(V32_H200 | {"kv-cache-dtype": "fp8", "decode-context-parallel-size": 2}),
                             measured, 48_068, 48_068)
    assert dcp[-1] == "DCP 2: the logged tokens are logical (x DCP) per rank"


def test_a_device_other_than_the_recipes_gpu_is_noted():
    recipe = load(V32_H200)  # 150,109,880,320 B = 139.80 GiB
    assert cal.device_notes(recipe, cal.Measured("", 1, total_memory_bytes=round(139.80 * GIB))) == []
    assert "the log's device has 143.00 GiB" in cal.device_notes(
        recipe, cal.Measured("", 1, total_memory_bytes=143 * GIB))[0]
    # no total printed: the utilisation gap's estimate, noted beyond 2 %
    assert cal.device_notes(recipe, cal.Measured("", 1, approximate_total_memory_bytes=141 * GIB)) == []
    assert "about 150.0 GiB" in cal.device_notes(recipe, cal.Measured("", 1, approximate_total_memory_bytes=150 * GIB))[0]


@pytest.mark.parametrize("version, activation", [
    # Logged: 12 GiB peak, 2 GiB non-torch, 4 GiB of graphs; the KV leaves 10 GiB for peak + non-torch.
    ("0.26.0", 12 * GIB),  # the peak as logged (and 4 GiB unexplained, noted)
    ("0.27.0", 8 * GIB),  # vLLM PR #49208: 0.27.0 logs the peak with the graph estimate in it: 12 - 4
    # main reserves the decode logits (#62860): 1024 rows x 163,840 FP32 columns = 671,088,640 B against the
    # 512 MiB budget raise the peak by 134,217,728 B, which the memory block leaves out (the base peak)
    ("main", 8 * GIB - 134_217_728),
])
def test_the_logged_peak_as_the_memory_block_keeps_it(version, activation):
    recipe = load(V32_H200 | {"vllm-version": version})
    estimate = capacity.plan(recipe)
    weights, graphs = 80 * GIB, 4 * GIB
    target = estimate.memory.requested_bytes - weights - graphs - 10 * GIB
    measured = cal.Measured("", 1, peak_activation_bytes=12 * GIB, non_torch_bytes=2 * GIB)
    split = cal.profiled_terms(recipe, estimate, measured, weights, graphs, target)
    assert (split.activation, split.non_torch) == (activation, 2 * GIB)


def test_logged_terms_that_overfill_the_gpu_are_refused():
    recipe = load(V32_H200)
    estimate = capacity.plan(recipe)
    with pytest.raises(RecipeError, match="is the gpu right"):
        cal.profiled_terms(recipe, estimate, cal.Measured("", 1), 80 * GIB, 4 * GIB, estimate.memory.requested_bytes)


def test_graphs_the_log_does_not_print():
    # 0.19.1 subtracts no estimate (envs.py:1654-1655): none; 0.33.0 does: plan's estimate stands in
    old = load(V32_H200 | {"vllm-version": "0.19.1"})
    assert cal.logged_graphs(old, capacity.plan(old), cal.Measured("", 1))[:2] == (0, "log (none)")
    new = load(V32_H200)
    plan = capacity.plan(new)
    assert cal.logged_graphs(new, plan, cal.Measured("", 1))[:2] == (plan.backend("auto").cudagraph.bytes,
                                                                     "plan's estimate")


def test_weights_the_log_does_not_print():
    recipe = load(V32_H200)
    plan = capacity.plan(recipe)
    others = plan.memory.base_peak.bytes + plan.memory.non_torch.bytes
    requested, graphs = plan.memory.requested_bytes, 4 * GIB
    # KV that leaves room for plan's weights estimate: the estimate
    assert cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, GIB)[:2] == (plan.memory.weights.bytes, None)
    # KV that leaves 50 GiB beside plan's peak and non-torch estimates: the weights are those 50 GiB (memory.rest)
    target = requested - graphs - others - 50 * GIB
    assert cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, target)[:2] == (50 * GIB, "weights")
    with pytest.raises(RecipeError, match="is the gpu right"):  # KV beyond what the estimates leave
        cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, requested - graphs - others + 1)


def test_the_headroom_from_two_logs_compares_like_with_like():
    # The seed's auto reservation, 9,668,395,008 B: KV memory 60 GiB before and 55 GiB after leaves 9,668,395,008 -
    # 5,368,709,120 = 4,299,685,888 B of headroom
    seed = load_recipe(SEED)
    before = cal.Measured("", 1, available_kv_bytes=60 * GIB)
    headroom = cal.headroom_from_logs(seed, before, cal.Measured("", 1, available_kv_bytes=55 * GIB))
    assert (headroom.headroom_bytes, headroom.kv_source) == (4_299_685_888, "Available KV cache memory")
    # memory in one log, tokens in the other: both by tokens, the seed's 41,050,274 and 36,636,372: its headroom
    mixed = cal.headroom_from_logs(seed, dataclasses.replace(before, kv_tokens=41_050_274),
                                 cal.Measured("", 1, kv_tokens=36_636_372))
    assert mixed.headroom_bytes == 3_091_880_448
    with pytest.raises(RecipeError, match="changed by 20.00 GiB against a reservation of 9.00 GiB"):
        cal.headroom_from_logs(seed, before, cal.Measured("", 1, available_kv_bytes=40 * GIB))
    with pytest.raises(RecipeError, match="--after: no Available KV"):
        cal.headroom_from_logs(seed, before, cal.Measured("", 1))


def test_the_after_log_needs_only_kv_figures_from_any_rank():
    log = read_log("(Worker_TP0 pid=1) INFO [gpu_worker.py:560] Available KV cache memory: 10.00 GiB\n"
                   "(Worker_TP1 pid=2) INFO [kv_cache_utils.py:1711] GPU KV cache size: 90,841 tokens\n"
                   "(Worker_TP1 pid=2) INFO [api_utils.py:345] version 0.33.0\n")
    after = cal.measure_kv(log)
    assert (after.available_kv_bytes, after.kv_tokens, after.version) == (10 * GIB, 90_841, "0.33.0")
    with pytest.raises(RecipeError, match="--after: no Available KV"):
        cal.measure_kv(read_log("INFO [api_utils.py:345] version 0.33.0\n"))


def test_a_logged_total_names_the_gpu_within_005_gib():
    # H200: 150,109,880,320 B; the log prints GiB with two decimals, and 0.05 GiB (53,687,091 B) of slack names it
    assert cal.gpu_from_memory(150_109_880_320 + GIB // 20) == "H200"
    assert cal.gpu_from_memory(150_109_880_320 + GIB // 20 + 1) is None
    recipe = load(V32_H200)
    assert cal.device_notes(recipe, cal.Measured("", 1, total_memory_bytes=150_109_880_320 + GIB // 20)) == []
    assert cal.device_notes(recipe, cal.Measured("", 1, total_memory_bytes=150_109_880_320 + GIB // 20 + 1)) != []
