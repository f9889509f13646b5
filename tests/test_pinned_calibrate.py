"""calibrate.py's rules that no other fast test pinned (found by tools/mutate.py), against the real logs in
tests/fixtures/vllm_logs, lines in vLLM's spelling, or sums written out beside them."""

import dataclasses
from pathlib import Path

import pytest

from conftest import LOGS, SEED
from dsa_kvcalc.deployment import resolve
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


def test_a_log_without_memory_terms_says_what_it_found():
    # The vLLM #31903 excerpt has only its KV-cache lines; the #51454 one only its args line and version
    with pytest.raises(RecipeError, match=r"graph memory \(found only: kv_tokens, max_concurrency, max_model_len\); "):
        cal.measure(reading(LOGS / "deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log"))
    with pytest.raises(RecipeError, match=r"graph memory \(found only: version, non-default args\); "):
        cal.measure(reading(LOGS / "deepseek-v4-flash-0731-8xb200-tp8-ep-vllm51454.log"))
    with pytest.raises(RecipeError, match=r"CUDA graph memory; nothing to calibrate$"):
        cal.measure(read_log("INFO [api_utils.py:345] starting\n"))


def test_the_sizing_ranks_own_figures_come_first():
    # TP1 has the least Available KV: its tokens and version, not TP0's (printed first)
    log = read_log("(Worker_TP0 pid=1) INFO [gpu_worker.py:560] Available KV cache memory: 11.00 GiB\n"
                   "(Worker_TP0 pid=1) INFO [kv_cache_utils.py:1711] GPU KV cache size: 99,000 tokens\n"
                   "(Worker_TP1 pid=2) INFO [gpu_worker.py:560] Available KV cache memory: 10.00 GiB\n"
                   "(Worker_TP1 pid=2) INFO [kv_cache_utils.py:1711] GPU KV cache size: 90,841 tokens\n")
    assert (cal.measure(log).rank, cal.measure(log).kv_tokens) == ("Worker_TP1 pid=2", 90_841)


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
    assert cal.log_version(cal.measure(old), old) == ("0.19.1", "vllm-version 0.19.1: the log prints no version; its "
                                                      "stamps gpu_worker.py:436, kv_cache_utils.py:1319, "
                                                      "kv_cache_utils.py:1324 are this release's (0.19.0, 0.19.1: "
                                                      "the same rules)")
    # the RTX log's eight stamps are 0.25.0's and 0.25.1's: the first four named
    rtx = reading(LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log")
    assert cal.log_version(dataclasses.replace(cal.measure(rtx), version="0.1.dev5+gdeadbee"), rtx)[1] == (
        "vllm-version 0.25.1: the log prints 0.1.dev5+gdeadbee, no release; its stamps api_utils.py:273, "
        "gpu_model_runner.py:5306, gpu_model_runner.py:6639, gpu_model_runner.py:6707 are this release's (0.25.0, "
        "0.25.1: the same rules)")
    # a source build and no stamps: nothing names the release
    with pytest.raises(RecipeError, match="stamps match no release either"):
        cal.log_version(cal.Measured("", 1, version="0.1.dev5+gdeadbee"), read_log(""))


def test_kv_figures_that_no_release_explains_name_none():
    raw = {"model": "GLM-5.1-FP8", "gpu": "H200", "tensor-parallel-size": 8}
    assert cal.version_from_kv(raw, cal.Measured("", 1, kv_tokens=1000), Path(".")) == (None, "")
    assert cal.version_from_kv(raw, cal.Measured("", 1, kv_tokens=1000, available_kv_bytes=GIB), Path(".")) == (
        None, "the log names no release, and no release's KV-cache rules give its tokens from its KV memory")


def test_kv_tokens_at_the_edges_of_the_printed_kv_memory_name_a_release():
    # V3.2 fp8 on 8 x H200: 61 x (656 + 132) x 64 = 3,076,352 B a block of 64 tokens in every release. KV memory
    # printed as 1,000 blocks + 0.005 GiB (5,368,709 B) was 1,000 blocks to 1,000 blocks + 0.01 GiB (10,737,418 B,
    # 3.49 blocks): 64,000 to 64,192 tokens, and no release explains one block fewer or more
    raw = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8"}
    printed = 1000 * 3_076_352 + 5_368_709
    for tokens, release in ((63_936, None), (64_000, "0.33.0"), (64_192, "0.33.0"), (64_256, None)):
        measured = cal.Measured("", 1, available_kv_bytes=printed, kv_tokens=tokens)
        assert cal.version_from_kv(raw, measured, Path("."))[0] == release, tokens


def test_the_recipes_version_stands_over_the_logs():
    log = reading(GLM_020)
    raw, _ = cal.with_log_facts({"model": "GLM-5.1-FP8", "vllm-version": "0.19.1"}, cal.measure(log), log, Path("."))
    assert raw["vllm-version"] == "0.19.1"
    # "Enforce eager set" stands over a recipe that says enforce-eager: false
    raw, notes = cal.with_log_facts({"model": "GLM-5.1-FP8", "enforce-eager": False}, cal.measure(log), log, Path("."))
    assert raw["enforce-eager"] is True and notes[-1].startswith("enforce-eager: the log says")


def test_a_log_without_a_model_needs_one():
    with pytest.raises(RecipeError, match=r"^model: the log does not give it: --set model=NAME or --recipe"):
        cal.require({"gpu": "H200"}, cal.Measured("", 1), read_log(""))


def test_a_device_of_no_catalog_gpu_is_named_by_its_memory():
    with pytest.raises(RecipeError, match=r"^gpu: the log does not give it: --set gpu=NAME \(its device has "
                                          r"16.00 GiB, no catalog GPU\)$"):
        cal.require({"model": "DeepSeek-V3.2"}, cal.Measured("", 1, total_memory_bytes=16 * GIB), read_log(""))


def test_tensor_parallel_ranks_without_a_size_need_one_and_a_named_gpu_needs_none():
    reading = read_log("(Worker_TP0 pid=9) INFO [gpu_worker.py:440] Available KV cache memory: 34.86 GiB\n")
    with pytest.raises(RecipeError, match=r"^tensor-parallel-size: the log does not give it: --set "
                                          r"tensor-parallel-size=N \(the log's ranks are Worker_TP0"):
        cal.require({"gpu": "H200", "model": "GLM-5.1-FP8"}, cal.measure(reading), reading)
    # a log of the total memory names the GPU (within 0.05 GiB: the H200's 139.80 GiB)
    raw = cal.require({"model": "GLM-5.1-FP8", "tensor-parallel-size": 8},
                      cal.Measured("", 1, total_memory_bytes=round(139.8 * GIB)), reading)
    assert raw["gpu"] == "H200"


def test_the_kv_target_is_the_logged_tokens_or_the_logged_memory():
    memory = memory_terms.rank_memory(resolve(load(V32_H200 | {"kv-cache-dtype": "fp8"})))
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
    (10 * GIB, 11 * GIB, None, (11 * GIB, 0)),  # a logged term beyond the residual leaves nothing for the other
    (10 * GIB, None, 11 * GIB, (0, 11 * GIB)),
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
    # halfway between, 48,462 B: the MTP layer explains it no better
    assert len(cal.mismatch_notes(recipe, measured, 48_068, 48_462)) == 1
    # MTP on and a log implying 48,068 B: without the MTP layer
    mtp = load(V32_H200 | {"kv-cache-dtype": "fp8", "speculative-config": {"num_speculative_tokens": 1}})
    notes = cal.mismatch_notes(mtp, measured, 48_856, 48_068)
    assert "without the MTP layer's KV cache the figure is 48,068 B" in notes[1]
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
    # 2.01 % above 150,109,880,320 B: 153,127,088,914 B (142.61 GiB), noted
    near = cal.Measured("", 1, approximate_total_memory_bytes=153_127_088_914)
    assert "about 142.6 GiB" in cal.device_notes(recipe, near)[0]


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
    assert any("reserves the decode logits" in note for note in split.notes) == (version == "main")


def test_a_logged_peak_below_the_reservation_keeps_no_base_peak():
    # main: the 134,217,728 B the decode logits raise the peak (above) exceed a logged peak of 4 GiB + 64 MiB less
    # the 4 GiB of graphs in it: the base peak is 0
    recipe = load(V32_H200 | {"vllm-version": "main"})
    estimate = capacity.plan(recipe)
    target = estimate.memory.requested_bytes - 80 * GIB - 4 * GIB - 10 * GIB
    measured = cal.Measured("", 1, peak_activation_bytes=4 * GIB + (64 << 20), non_torch_bytes=2 * GIB)
    assert cal.profiled_terms(recipe, estimate, measured, 80 * GIB, 4 * GIB, target).activation == 0


def test_logged_terms_within_their_rounding_are_made_to_add_up():
    # V3.2 bf16 on 8 x H200 (vLLM 0.26.0): 61 x (1152 + 132) x 64 = 5,012,736 B a block. Four of the log's terms
    # (weights, graphs, peak, non-torch) are printed to 0.01 GiB, each within 5,368,709 B, and the KV target is whole
    # blocks: 4 x 5,368,709 + 5,012,736 = 26,487,572 B unexplained is rounding, which the peak absorbs; a byte more
    # is not
    recipe = load(V32_H200 | {"vllm-version": "0.26.0"})
    estimate = capacity.plan(recipe)
    target = estimate.memory.requested_bytes - 80 * GIB - 4 * GIB - 10 * GIB  # 10 GiB for peak + non-torch
    for gap, activation in ((26_487_572, 8 * GIB + 26_487_572), (26_487_573, 8 * GIB)):
        measured = cal.Measured("", 1, peak_activation_bytes=8 * GIB, non_torch_bytes=2 * GIB - gap)
        assert cal.profiled_terms(recipe, estimate, measured, 80 * GIB, 4 * GIB, target).activation == activation


def test_logged_terms_that_overfill_the_gpu_are_refused():
    recipe = load(V32_H200)
    estimate = capacity.plan(recipe)
    with pytest.raises(RecipeError, match="is the gpu right"):
        cal.profiled_terms(recipe, estimate, cal.Measured("", 1), 80 * GIB, 4 * GIB, estimate.memory.requested_bytes)
    # weights, graphs and KV that fill the 0.92 x 139.80 GiB = 128.62 GiB exactly leave 0 for peak and non-torch; a
    # byte more is refused
    exact = estimate.memory.requested_bytes - 84 * GIB
    split = cal.profiled_terms(recipe, estimate, cal.Measured("", 1), 80 * GIB, 4 * GIB, exact)
    assert (split.activation, split.non_torch) == (0, 0)
    with pytest.raises(RecipeError, match=r"weights, CUDA graphs and KV \(128.62 GiB\) exceed what H200 at "
                                          r"gpu-memory-utilization 0.92 allows \(128.62 GiB\)"):
        cal.profiled_terms(recipe, estimate, cal.Measured("", 1), 80 * GIB, 4 * GIB, exact + 1)


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
    # the edges: KV that leaves plan's weights estimate a byte to spare keeps it; none to spare, the weights are the
    # rest (the estimate itself); KV that leaves exactly plan's peak and non-torch estimates, weights of 0
    weights = plan.memory.weights.bytes
    fits = requested - graphs - others - weights
    assert cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, fits - 1)[:2] == (weights, None)
    assert cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, fits)[:2] == (weights, "weights")
    none = requested - graphs - others
    assert cal.logged_weights(recipe, plan, cal.Measured("", 1), graphs, none)[:2] == (0, "weights")


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
    # the bounds: KV that lost the whole reservation (no headroom) or none of it (all headroom), not a byte beyond
    for after, headroom in ((60 * GIB - 9_668_395_008, 0), (60 * GIB, 9_668_395_008)):
        assert cal.headroom_from_logs(seed, before, cal.Measured("", 1, available_kv_bytes=after)).headroom_bytes == \
            headroom
    for after in (60 * GIB - 9_668_395_008 - 1, 60 * GIB + 1):
        with pytest.raises(RecipeError, match="not the same deployment"):
            cal.headroom_from_logs(seed, before, cal.Measured("", 1, available_kv_bytes=after))


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


def test_the_memory_block_keeps_the_terms_not_calibrated():
    # the calibrated peak replaces the recipe's (and the rest that named it); the weights and another rest stay
    raw = {"model": "DeepSeek-V3.2", "memory": {"weights_gib": 70, "peak_activation_gib": 5, "rest": "peak_activation"}}
    assert cal.with_memory(raw, {"peak_activation": 1000}, "H200")["memory"] == {
        "weights_gib": 70, "peak_activation_bytes": 1000, "gpu": "H200"}
    raw = {"model": "DeepSeek-V3.2", "memory": {"weights_gib": 70, "rest": "non_torch"}}
    assert cal.with_memory(raw, {"peak_activation": 1000}, "H200")["memory"] == {
        "weights_gib": 70, "rest": "non_torch", "peak_activation_bytes": 1000, "gpu": "H200"}


def test_calibrate_refuses_a_deepinfer_recipe():
    rtx = reading(LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log")
    raw, _ = cal.recipe_from_log(rtx)
    with pytest.raises(RecipeError, match="calibrate reads vLLM startup logs; this recipe runs DeepInfer"):
        cal.calibrate(rtx, raw | {"gpu": "B200", "engine": "deepinfer"}, "log", Path("."))


def planned_tokens(calibration) -> int:
    return capacity.plan(load(calibration.raw_recipe)).backend("auto").kv_cache_tokens


GLM_H200 = {"model": "GLM-5.1-FP8", "gpu": "H200", "tensor-parallel-size": 8}


@pytest.mark.parametrize("weights, kv_gib, tokens, memory, source", [
    # vLLM 0.19.1 prints its CUDA-graph estimate but does not subtract it (vllm==0.19.1 vllm/v1/worker/gpu_worker.py:
    # 395-399, 418-422). GLM-5.1-FP8 bf16 on 8 x H200: 78 x (1152 + 132) x 64 = 6,409,728 B a block of 64 tokens;
    # 30 GiB is 5,025 blocks (321,600 tokens), 34 GiB 5,695 (364,480). The recipe written plans to those tokens again.
    (True, 30, 321_600, {"weights_bytes", "peak_activation_bytes", "cudagraph_bytes", "gpu", "rest"}, "log"),
    # no weights line: plan's estimate (88.01 GiB) fits beside 30 GiB of KV and is not written as measured ...
    (False, 30, 321_600, {"peak_activation_bytes", "cudagraph_bytes", "gpu", "rest"}, "plan's estimate"),
    # ... and beside 34 GiB it does not: the weights are the rest of the sum (memory.rest)
    (False, 34, 364_480, {"weights_bytes", "cudagraph_bytes", "gpu", "rest"}, "weights"),
])
def test_a_019_log_prints_graphs_it_does_not_subtract(weights, kv_gib, tokens, memory, source):
    lines = ["Model loading took 89.39 GiB memory"] * weights + [
        "Estimated CUDA graph memory: 1.50 GiB total", f"Available KV cache memory: {kv_gib}.00 GiB",
        f"GPU KV cache size: {tokens:,} tokens"]
    result = cal.calibrate(read_log("\n".join(lines) + "\n"), GLM_H200 | {"vllm-version": "0.19.1"}, "log", Path("."))
    assert set(result.raw_recipe["memory"]) == memory and result.raw_recipe["memory"]["cudagraph_bytes"] == {
        "auto": round(1.5 * GIB)}
    assert result.raw_recipe["memory"].get("rest", "weights") == ("weights" if source == "weights" else
                                                                   "peak_activation")
    assert {row.term: row.source for row in result.rows}["weights"] == source
    planned = capacity.plan(load(result.raw_recipe)).backend("auto")
    assert (planned.kv_cache_tokens, planned.kv_cache_bytes) == (tokens, tokens // 64 * 6_409_728)  # to the byte
    # and the terms meet vLLM 0.19.1's identity to the byte, the graphs outside it: requested = ceil(150,109,880,320 x
    # 0.90) = 135,098,892,288 B (vllm==0.19.1 vllm/v1/worker/utils.py:408-410) = weights + peak + non-torch + KV
    terms = result.memory
    assert terms["weights"] + terms["peak_activation"] + terms["non_torch"] + tokens // 64 * 6_409_728 == \
        135_098_892_288


def test_a_log_with_kv_tokens_but_no_kv_memory_calibrates_to_its_tokens():
    # the 0.19.1 case above without its Available KV line: 321,600 tokens are 5,025 blocks; no per-token figure
    log = read_log("Model loading took 89.39 GiB memory\nGPU KV cache size: 321,600 tokens\n")
    result = cal.calibrate(log, GLM_H200 | {"vllm-version": "0.19.1"}, "log", Path("."))
    assert {row.term: row.log for row in result.rows}["KV bytes per logged token"] is None
    assert planned_tokens(result) == 321_600


@pytest.mark.parametrize("utilisation, rest", [(0.78, "peak_activation"), (0.75, "weights")])
def test_a_log_without_weights_calibrates_the_term_that_does_not_fit_as_the_rest(utilisation, rest):
    # tests/fixtures/vllm_logs (SOURCES.md): V4-Flash on 2 x H200 NVL at 262,144 tokens, no weights line, its command's
    # --enforce-eager. At its 0.78, plan's derived weights and fitted non-torch fit beside its 32.08 GiB of KV: the
    # peak is the rest. Read as if started at 0.75, 3.75 GiB less: the weights no longer fit and are the rest. Either
    # way the recipe written plans to the log's 2,175,276 tokens
    raw = {"model": "DeepSeek-V4-Flash", "gpu": "H200 NVL", "tensor-parallel-size": 2, "kv-cache-dtype": "fp8",
           "max-model-len": 262_144, "gpu-memory-utilization": utilisation, "vllm-version": "0.23.0",
           "enforce-eager": True}
    result = cal.calibrate(reading(LOGS / "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml262144.log"), raw, "log",
                           Path("."))
    assert result.raw_recipe["memory"]["rest"] == rest
    assert set(result.raw_recipe["memory"]) == {f"{rest}_bytes", "cudagraph_bytes", "gpu", "rest"}
    assert planned_tokens(result) == 2_175_276


def test_a_log_that_prints_every_term_writes_no_rest():
    # The GLM-5.2 GB200 log prints weights, peak activation, non-torch and graphs: all measured, none the rest
    log = reading(LOGS / "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log")
    result = cal.calibrate(log, cal.recipe_from_log(log)[0], "log", Path("."))
    assert set(result.raw_recipe["memory"]) == {"weights_bytes", "peak_activation_bytes", "non_torch_bytes",
                                                "cudagraph_bytes", "gpu"}
    assert planned_tokens(result) == 1_139_456


def test_a_recipe_of_another_cache_dtype_is_told_by_the_per_token_figures():
    # The GLM-5.1 0.20.0 log: 34.86 GiB / 373,696 tokens = 100,163 B a token, bf16's 78 x (1152 + 132) = 100,152 B;
    # a recipe with fp8 KV plans 78 x (656 + 132) = 61,464 B
    result = cal.calibrate(reading(GLM_020), GLM_H200 | {"kv-cache-dtype": "fp8"}, "log", Path("."))
    assert "KV bytes per logged token: the log implies 100,163 B (Available KV 34.86 GiB / 373,696 tokens); plan's " \
           "KV-cache groups give 61,464 B for zai-org/GLM-5.1-FP8 with fp8 KV on vLLM 0.20.0" in result.notes


def test_a_block_is_worth_its_share_of_a_requests_tokens():
    # The RTX log: V4-Flash at 1,048,576 tokens holds 5,593 pages a request (tests/test_calibrate.py): a block is
    # worth 187.5 logged tokens, 188 rounded up
    rtx = reading(LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log")
    raw, _ = cal.recipe_from_log(rtx)
    assert cal.calibrate(rtx, raw | {"gpu": "B200"}, "log", Path(".")).block_tokens == 188


def test_the_after_log_must_be_another_log_of_a_vllm_with_the_fix():
    # The RTX log (10.29 GiB, 1,993,100 tokens, vLLM 0.25.0) against itself as other builds would print it. With 10.00
    # GiB on vLLM main: 11,048,803,369 - 10,737,418,240 = 311,385,129 B of KV lost of the 536,870,912 B reserved
    # (tests/test_reliability_round_two.py), a headroom of 225,485,783 B; its tokens scaled alike, 1,936,929
    rtx_path = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
    rtx, text = reading(rtx_path), rtx_path.read_text()
    raw = cal.recipe_from_log(rtx)[0] | {"gpu": "B200"}

    def after(version, kv):
        return read_log(text.replace("version 0.25.0", f"version {version}" if version else "").replace(
            "Available KV cache memory: 10.29 GiB", f"Available KV cache memory: {kv} GiB").replace(
            "1,993,100 tokens", "1,936,929 tokens"))

    for log, error in ((rtx, "its KV figures are the first log's"), (after(None, "10.00"), "prints no vLLM version"),
                       (after("0.33.0", "10.00"), "vLLM 0.33.0, which does not reserve the decode logits")):
        with pytest.raises(RecipeError, match=error):
            cal.calibrate_pair(rtx, log, raw, "log", Path("."))
    result = cal.calibrate_pair(rtx, after("0.34.0.dev12+g317081f00", "10.00"), raw, "log", Path("."))
    assert result.headroom.headroom_bytes == 225_485_783
