"""dsa-kvcalc calibrate against real vLLM startup logs and the seed's table.

Sources (verbatim fixtures, tests/fixtures/vllm_logs/SOURCES.md):
- deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log: public write-up "DeepSeek-V4-Flash on stock vLLM v0.25.0
  (SM120 / RTX PRO 6000 Blackwell)", "Full container startup log" (index file id 56819795714): Model loading 75.64 GiB,
  Available KV 10.29 GiB, GPU KV cache size 1,993,100 tokens, Estimated CUDA graph memory 1.58 GiB
- deepseek-v4-flash-0731-8xb200-tp8-ep-vllm51454.log: vllm-project/vllm issue #51454 (args only, cut short)
- deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log: vllm-project/vllm issue #31903 (KV tokens only)
- nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log: public scoring page (index file id 60449471537)
- seed: vLLM PR #62860, "Memory" table (KV cache per rank before/after, DeepSeek-V4.1-Flash 4xB200 DEP4)
Multi-rank, ANSI and cut inputs are derived from these fixtures inside the tests, as each test says.
"""

import pytest
import json

import yaml

from conftest import LOGS, ROOT, SEED, fails, run
from dsa_kvcalc import capacity, estimates
from dsa_kvcalc.calibrate import headroom_from_logs, measure_kv
from dsa_kvcalc.units import GIB
from dsa_kvcalc.inputs import read_text, yaml_mapping
from dsa_kvcalc.recipe import load, load_recipe
from dsa_kvcalc.vllm_log import LogReading, RankReading

RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"


def calibrate(*args):
    return run("calibrate", *args)


def test_rtx_log_needs_the_gpu_and_writes_nothing_without_it(tmp_path):
    # The log never names its GPU (RTX PRO 6000, not in the catalog) and prints no total memory.
    out = tmp_path / "calibrated.yaml"
    fails(calibrate(RTX, "--output", out), "error: gpu:", "--set gpu=")
    assert not out.exists()


def test_plan_on_the_calibrated_recipe_reproduces_the_logs_kv_tokens(tmp_path):
    # What is checked: weights, graphs and KV round-trip through the memory block, and plan's KV-cache groups land
    # within one block of the log's 1,993,100 tokens.
    out = tmp_path / "calibrated.yaml"
    result = calibrate(RTX, "--set", "gpu=NVIDIA RTX PRO 6000 Blackwell Server Edition", "--output", out,
                       "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["log"]["kv_tokens"] == 1_993_100 and report["recipe"]["vllm-version"] == "0.25.0"
    implied = next(t for t in report["terms"] if t["term"] == "KV bytes per logged token")
    assert implied["log"] == 5544  # 10.29 GiB / 1,993,100 tokens
    # V4-Flash's groups at vLLM 0.25.0: 1,039,680 B a block, 5,593 pages a request of 1M tokens (hand-checked
    # against vLLM's kv_cache_utils.py in tests/test_kv_cache.py): 5,545.5 B per logged token
    assert implied["plan"] == 5546
    written = yaml.safe_load(out.read_text())
    assert written["memory"]["weights_bytes"] == round(75.64 * GIB)
    assert written["memory"]["cudagraph_bytes"] == {"auto": round(1.58 * GIB)}
    assert written["speculative-config"] == {"method": "mtp", "num_speculative_tokens": 2}
    planned = json.loads(run("plan", out, "--format", "json").output)
    auto = next(b for b in planned["backends"] if b["backend"] == "auto")
    assert abs(auto["kv_cache_tokens"] - 1_993_100) < 256


def test_an_eager_log_calibrates_and_the_memory_block_holds_only_what_it_measured(tmp_path):
    # vLLM 0.20.0, GLM-5.1-FP8 on 8 x H200 (tests/fixtures/vllm_logs/SOURCES.md): no args line, but "Enforce eager
    # set": no CUDA graphs. It prints weights (89.39 GiB), Available KV (34.86 GiB) and 373,696 tokens; non-torch it
    # prints not at all, so plan's estimate fills it, and must not come back from the written recipe as measured.
    out = tmp_path / "calibrated.yaml"
    result = calibrate(LOGS / "glm-5.1-fp8-8xh200-tp8-v0.20.0.log", "--set", "gpu=H200", "--set", "model=GLM-5.1-FP8",
                       "--set", "tensor-parallel-size=8", "--set", "vllm-version=0.20.0", "--output", out)
    assert result.exit_code == 0, result.output
    written = yaml.safe_load(out.read_text())
    assert written["enforce-eager"] is True
    assert set(written["memory"]) == {"weights_bytes", "peak_activation_bytes", "cudagraph_bytes", "gpu", "rest"}
    assert written["memory"]["cudagraph_bytes"] == {"auto": 0}  # eager: none, a fact rather than a missing line
    assert written["memory"]["rest"] == "peak_activation"  # the logged sum less plan's non-torch estimate
    planned = json.loads(run("plan", out, "--format", "json").output)
    provenance = {term: p["provenance"] for term, p in planned["memory"]["provenance"].items()}
    assert provenance == {"weights": "measured", "peak_activation": "estimated", "non_torch": "fitted"}
    auto = next(b for b in planned["backends"] if b["backend"] == "auto")
    assert abs(auto["kv_cache_tokens"] - 373_696) < 64  # one block of 64 tokens


def test_the_log_says_eager_even_when_the_recipe_does_not(tmp_path):
    # With a recipe that omits enforce-eager, plan for vLLM 0.20.0 would subtract a graph estimate the eager
    # deployment never made: 353,408 tokens instead of the log's 373,696.
    recipe = tmp_path / "glm.yaml"
    recipe.write_text("model: GLM-5.1-FP8\ngpu: H200\ntensor-parallel-size: 8\nvllm-version: 0.20.0\n")
    report = json.loads(calibrate(LOGS / "glm-5.1-fp8-8xh200-tp8-v0.20.0.log", "--recipe", recipe, "-f", "json").output)
    assert report["recipe"]["enforce-eager"] is True
    assert abs(report["kv_tokens_calibrated"] - 373_696) < 64


def test_a_sum_below_the_non_torch_estimate_is_all_non_torch_and_written(tmp_path):
    # The RTX log at utilisation 0.925 (not its 0.95): requested - weights - graphs - KV leaves 0.33 GiB for peak
    # activation and non-torch together (94.97 GiB x 0.025 less than at 0.95, where it leaves 2.71 GiB), below plan's
    # fitted non-torch (estimates.NON_TORCH_SINGLE). All of it is non-torch, and it is written: plan's figure in its
    # place would lose the difference of KV.
    assert estimates.NON_TORCH_SINGLE.value > 0.34 * GIB
    out = tmp_path / "calibrated.yaml"
    result = calibrate(RTX, "--set", "gpu=NVIDIA RTX PRO 6000 Blackwell Server Edition", "--set",
                       "gpu-memory-utilization=0.925", "--output", out, "-f", "json")
    report = json.loads(result.output)
    memory = yaml.safe_load(out.read_text())["memory"]
    assert memory["peak_activation_bytes"] == 0 and abs(memory["non_torch_bytes"] / GIB - 0.33) < 0.01
    assert abs(report["kv_tokens_calibrated"] - 1_993_100) < 256


def test_table_names_each_term(tmp_path):
    result = calibrate(RTX, "--set", "gpu=B200")
    assert result.exit_code == 0
    for term in ("weights", "peak activation", "non-torch", "CUDA graphs", "KV bytes per logged token", "KV tokens"):
        assert term in result.output
    assert "75.64 GiB" in result.output and "1,993,100" in result.output and "within one block" in result.output


def test_each_terms_difference_is_plan_minus_the_logs_figure():
    """The log's KV tokens (its line 39: 1,993,100) against the recipe's plan on a B200, in the JSON and the table's
    "plan - log" column; a term the log does not print has none."""
    terms = {t["term"]: t for t in json.loads(calibrate(RTX, "--set", "gpu=B200", "--format", "json").output)["terms"]}
    tokens = terms["KV tokens"]
    assert tokens["log"] == 1_993_100 and tokens["difference"] == tokens["plan"] - 1_993_100 > 0
    assert terms["non-torch"]["log"] is None and terms["non-torch"]["difference"] is None
    assert f"{tokens['plan'] - 1_993_100:+,}" in calibrate(RTX, "--set", "gpu=B200").output


def test_ansi_coloured_log_calibrates_the_same(tmp_path):
    # Derived: the RTX log with coloured level names.
    coloured = tmp_path / "coloured.log"
    coloured.write_text(RTX.read_text().replace("INFO", "\x1b[32mINFO\x1b[0m"))
    plain = json.loads(calibrate(RTX, "--set", "gpu=B200", "-f", "json").output)
    assert json.loads(calibrate(coloured, "--set", "gpu=B200", "-f", "json").output)["memory_bytes"] == plain["memory_bytes"]


def test_interleaved_ranks_use_the_one_with_least_kv_and_say_they_disagree(tmp_path):
    # Derived: the RTX log's lines interleaved with the LFM log's memory lines (its args line left out, so that the
    # recipe is the RTX deployment's): two processes with different numbers, which calibrate must flag.
    lfm = [line for line in (LOGS / "nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log").read_text()
           .splitlines() if "non-default args" not in line]
    rtx = RTX.read_text().splitlines()
    mixed = tmp_path / "mixed.log"
    mixed.write_text("\n".join(line for pair in zip(rtx, lfm + [""] * len(rtx)) for line in pair))
    report = json.loads(calibrate(mixed, "--set", "gpu=B200", "-f", "json").output)
    assert report["log"]["sizing_rank"] == "Worker_TP0 pid=514"  # 10.29 GiB < 13.33 GiB
    assert any("ranks disagree on available kv" in w for w in report["warnings"])
    assert any("ranks disagree on kv tokens: 1,993,100 - 2,324,244 tokens" in w for w in report["warnings"])


def test_truncated_log_names_what_is_missing(tmp_path):
    # Derived: the RTX log cut before the KV cache was sized.
    text = RTX.read_text()
    cut = tmp_path / "cut.log"
    cut.write_text(text[:text.index("Available KV cache memory")])
    out = tmp_path / "calibrated.yaml"
    fails(calibrate(cut, "--set", "gpu=B200", "--output", out), "Available KV cache memory", "GPU KV cache size")
    assert not out.exists()


def test_logs_without_memory_lines_fail_cleanly(tmp_path):
    out = tmp_path / "calibrated.yaml"
    fails(calibrate(LOGS / "deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log", "--output", out), "no memory terms",
          "kv_tokens")
    fails(calibrate(LOGS / "deepseek-v4-flash-0731-8xb200-tp8-ep-vllm51454.log", "--output", out), "no memory terms",
          "non-default args")
    fails(calibrate(ROOT / "pyproject.toml", "--output", out), "error: log: no memory terms")  # an unrelated text file
    fails(calibrate(tmp_path / "missing.log"), "error: log: cannot read")
    assert not out.exists()


def test_unknown_model_fails_cleanly():
    fails(calibrate(LOGS / "nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log", "--set", "gpu=H100"),
          "error: model:", "/model")


def test_wrong_gpu_is_caught_when_the_terms_cannot_fit():
    # The RTX log's 75.64 GiB of weights per rank (plus graphs and KV) cannot fit an H100 at 0.95 (75.2 GiB).
    fails(calibrate(RTX, "--set", "gpu=H100"), "H100", "75.2 GiB")


def test_after_log_of_another_deployment_is_refused():
    fails(calibrate(RTX, "--set", "gpu=B200", "--after", LOGS / "deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log"),
          "error: --after:")


def seed_headroom(backend, tokens_before, tokens_after):
    recipe = load_recipe(SEED, [f"sparse-indexer-topk-backend={backend}"])
    reading = [measure_kv(LogReading([RankReading("", kv_tokens=tokens)], None))
               for tokens in (tokens_before, tokens_after)]
    return recipe, headroom_from_logs(recipe, *reading)


def test_headroom_from_the_seeds_before_and_after_tables():
    # Seed table: main auto 41,050,274 vs #62860 auto 36,636,372; deep_select 48,253,887 vs 48,163,989 KV tokens per
    # rank. 12,329 pages a request at 1M and 126,720 B a block: 482,663 - 430,765 = 51,898 blocks (6,576,514,560 B)
    # against 9,668,395,008 B reserved, and 567,362 - 566,305 = 1,057 blocks (133,943,040 B) against 3,222,798,336 B:
    # headrooms of 3,091,880,448 and 3,088,855,296 B, 3 MiB apart as the two alignments are (4.5 - 1.5 MiB).
    _, auto = seed_headroom("auto", 41_050_274, 36_636_372)
    _, deep_select = seed_headroom("deep_select", 48_253_887, 48_163_989)
    assert (auto.headroom_bytes, deep_select.headroom_bytes) == (3_091_880_448, 3_088_855_296)
    assert auto.kv_source.startswith("GPU KV cache size through plan's KV-cache groups")


def test_plan_with_the_seeds_headroom_loses_the_seeds_tokens():
    # The headrooms derived by hand above, in the memory block: across #62860 plan's KV shrinks by what the seed
    # measured, 41,050,274 - 36,636,372 and 48,253,887 - 48,163,989 tokens, within a block (85 logged tokens).
    for backend, headroom, lost in (("auto", 3_091_880_448, 4_413_902), ("deep_select", 3_088_855_296, 89_898)):
        raw = yaml_mapping(read_text(SEED), SEED)
        raw["sparse-indexer-topk-backend"] = backend
        raw["memory"]["indexer_headroom_bytes"] = {backend: headroom}
        planned = capacity.plan(load(raw, SEED.parent)).backend(backend)
        assert abs(planned.kv_cache_tokens - planned.with_fix.kv_cache_tokens - lost) <= 85, backend


def test_a_vllm_026_log_with_graph_estimate_and_standard_fp8_calibrates_to_its_tokens(tmp_path):
    # tests/fixtures/vllm_logs/glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log: "Using standard fp8 KV cache format"
    # (FlashInfer's sparse MLA, 576 B a token a layer), "Estimated CUDA graph memory: 4.99 GiB", "Available KV cache
    # memory: 50.62 GiB", "GPU KV cache size: 1,139,456 tokens". The log names neither GPU nor recipe file: the
    # version, model, TP and cache dtype come from its engine-config line, the GPU from its 184.31 GiB (GB200).
    out = tmp_path / "glm52.yaml"
    result = calibrate(LOGS / "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log", "--output", out, "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["recipe"]["vllm-version"] == "0.26.0" and report["recipe"]["gpu"] == "GB200"
    # GLM-5.2 since vLLM 0.24: 78 MLA pages of 576 B and 21 indexer pages of 132 B a token = 47,700 B
    implied = next(t for t in report["terms"] if t["term"] == "KV bytes per logged token")
    assert implied["plan"] == 78 * 576 + 21 * 132
    written = yaml.safe_load(out.read_text())
    assert written["memory"]["gpu"] == "GB200" and written["memory"]["cudagraph_bytes"] == {"auto": round(4.99 * GIB)}
    planned = json.loads(run("plan", out, "--format", "json").output)
    auto = next(b for b in planned["backends"] if b["backend"] == "auto")
    assert auto["kv_cache_tokens"] == 1_139_456  # vLLM 0.26.0 has no #62860: its log is its own headline


def test_a_log_that_names_no_release_is_read_by_the_rules_that_give_its_tokens():
    # The V4-Flash H200 NVL log of vLLM 0.23.0 (SOURCES.md) prints no version and no [file.py:LINE] stamps: only the
    # bucket rule of 0.23.0-0.26.0 turns its 32.08 GiB into its 90,841 tokens (0.33.0's would give 83,593).
    result = calibrate(LOGS / "deepseek-v4-flash-2xh200nvl-tp2-eager-v0.23.0-mml4096.log", "--set", "gpu=H200 NVL",
                       "--set", "model=DeepSeek-V4-Flash", "--set", "tensor-parallel-size=2", "--set",
                       "kv-cache-dtype=fp8", "--set", "max-model-len=4096", "--set", "gpu-memory-utilization=0.78",
                       "-f", "json")
    report = json.loads(result.output)
    assert report["recipe"]["vllm-version"] == "0.26.0" and report["kv_tokens_calibrated"] == 90_841
    assert any("0.23.0 to 0.26.0" in note for note in report["notes"])


def test_a_dcp_log_with_only_kv_lines_calibrates_to_its_tokens(tmp_path):
    # records.py's fork record (voipmonitor's notes): GLM-5.1-NVFP4-MTP on 8 x RTX PRO 6000, DCP4, a fork of about vLLM 0.22 with its own SM12x kernels
    # (planned as 0.24.0, the first release with a sparse MLA for SM12x, on the same pages): "Available KV cache memory:
    # 7.58 GiB", "GPU KV cache size: 523,008 tokens", no graph estimate and (second case) no weights line. The
    # per-token figures agree (15,562 logged, 15,563 planned: 79 x 788 B / DCP 4), and the recipe written plans to the
    # log's tokens: plan's graph estimate stands in for the one the log does not print.
    lines = ["Model loading took 70.14 GiB memory", "Available KV cache memory: 7.58 GiB",
             "GPU KV cache size: 523,008 tokens", "Maximum concurrency for 202,752 tokens per request: 2.58x"]
    settings = ["--set", "model=lukealonso/GLM-5.1-NVFP4-MTP", "--set", "gpu=NVIDIA RTX PRO 6000 Blackwell (96 GB)",
                "--set", "tensor-parallel-size=8", "--set", "decode-context-parallel-size=4", "--set",
                "kv-cache-dtype=fp8", "--set", "max-num-seqs=64", "--set", "gpu-memory-utilization=0.845", "--set",
                "vllm-version=0.24.0", "--set", 'speculative-config={"method": "mtp", "num_speculative_tokens": 3}']
    for kept in (lines, lines[1:]):
        log = tmp_path / "dcp.log"
        log.write_text("\n".join(kept) + "\n")
        out = tmp_path / "dcp.yaml"
        report = json.loads(calibrate(log, *settings, "-o", out, "-f", "json").output)
        implied = next(t for t in report["terms"] if t["term"] == "KV bytes per logged token")
        assert (implied["log"], implied["plan"]) == (15_562, 15_563)
        # they agree, so no mismatch is noted; and the graph pool the log does not print is not written as measured
        assert not any(note.startswith("KV bytes per logged token") for note in report["notes"]), report["notes"]
        assert not any(key.startswith("cudagraph") for key in yaml.safe_load(out.read_text())["memory"])
        planned = json.loads(run("plan", out, "--format", "json").output)
        assert next(b for b in planned["backends"] if b["backend"] == "auto")["kv_cache_tokens"] == 523_008


def test_a_log_of_a_release_that_subtracts_no_graphs_calibrates_to_its_tokens(tmp_path):
    # vLLM 0.19.1 does not subtract the CUDA-graph estimate before sizing the KV cache
    # (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0, envs.py:1654-1655), so the graphs sit inside the peak the log's
    # sum leaves. GLM-5.1-FP8 bf16 on 8 x H200: 78 x (1152 + 132) x 64 = 6,409,728 B a block; "Available KV cache
    # memory: 30.00 GiB" is 5,025 blocks, 321,600 tokens (blocks x 64 before 0.20.1). The recipe written must plan to
    # those tokens again.
    log = tmp_path / "glm.log"
    log.write_text("Model loading took 89.39 GiB memory\nAvailable KV cache memory: 30.00 GiB\n"
                   "GPU KV cache size: 321,600 tokens\n")
    out = tmp_path / "glm.yaml"
    result = calibrate(log, "--set", "gpu=H200", "--set", "model=GLM-5.1-FP8", "--set", "tensor-parallel-size=8",
                       "--set", "vllm-version=0.19.1", "--output", out)
    assert result.exit_code == 0, result.output
    planned = json.loads(run("plan", out, "--format", "json").output)
    assert next(b for b in planned["backends"] if b["backend"] == "auto")["kv_cache_tokens"] == 321_600


# An out-of-memory message: the seed's own (vLLM PR #62860, "OOM"), verbatim
SEED_OOM = """File "vllm/model_executor/layers/sparse_attn_indexer.py", line 312, in as_fp32_logits
    out = torch.empty_strided(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.07 GiB. GPU 0 has a total capacity of 178.35 GiB of \
which 3.04 GiB is free.
"""


def test_calibrate_reads_the_seeds_oom_message_and_bounds_the_decodes_at_or_below_131(tmp_path):
    # "Tried to allocate 3.07 GiB": 786 rows x 1,049,088 x 4 B = 3,298,332,672 B, 3,298,820,096 in 2 MiB segments,
    # prints 3.07 GiB; 131 decodes of 6 rows, the FP32 copy while the BF16 logits (786 x 1,049,088 x 2 B =
    # 1,649,166,336 B) were live. The step had 3.04 GiB - 0.005 GiB of rounding (3,258,806,436 B) + those:
    # 4,907,972,772 B, 129.95 decodes of 37,767,168 B: OOM above 129.
    log, out = tmp_path / "seed-oom.txt", tmp_path / "seed-calibrated.yaml"
    log.write_text(SEED_OOM)
    result = calibrate(log, "--recipe", SEED, "--format", "json", "--output", out)
    assert result.exit_code == 0, result.output
    oom = json.loads(result.stdout)["oom"]
    assert (oom["allocation"], oom["decodes"], oom["live_bytes"], oom["room_bytes"]) == (
        "the FP32 copy", 131, 1_649_166_336, 4_907_972_772)
    assert oom["max_decodes"] == 129 <= 131 and oom["safe_decodes"] == 129
    written = yaml.safe_load(out.read_text())["memory"]["unprofiled_bytes"]
    # the bundled seed recipe carries this measurement, and plan's fitted default is this data point
    assert written == yaml.safe_load(SEED.read_text())["memory"]["unprofiled_bytes"] == estimates.UNPROFILED.value
    assert estimates.UNPROFILED.uncertainty == abs(written)
    assert capacity.plan(load_recipe(out)).backend("auto").oom.max_decodes == 129


def test_an_oom_message_alone_needs_the_recipe_and_one_of_its_decode_counts(tmp_path):
    log = tmp_path / "seed-oom.txt"
    log.write_text(SEED_OOM)
    fails(calibrate(log), "error: --recipe:", "out-of-memory message")
    log.write_text(SEED_OOM.replace("3.07 GiB", "3.30 GiB"))  # 844.4 rows of the copy (1,689 of BF16): no whole number of 6-row decodes
    fails(calibrate(log, "--recipe", SEED), "error: log:", "tried to allocate 3.30 GiB")
    log.write_text(SEED_OOM.replace("178.35 GiB", "139.80 GiB"))  # an H200's
    fails(calibrate(log, "--recipe", SEED), "error: gpu:", "139.80 GiB")
GLM = LOGS / "glm-5.1-fp8-8xh200-tp8-v0.20.0.log"


def test_every_missing_input_is_in_one_error():
    # The GLM-5.1 log has no total-memory line, no non-default args line, and its ranks are Worker_TP0 (TP8 on the
    # deployment): the gpu, the model and the tensor-parallel size all have to be given, and one run says so.
    line = fails(run("calibrate", GLM), "gpu, model, tensor-parallel-size: the log does not give them:",
                 "--set gpu=NAME", "--set model=NAME", "--set tensor-parallel-size=N", "Worker_TP0")
    assert line.count("--set") == 3
    fails(run("calibrate", GLM, "--set", "gpu=H200"), "model, tensor-parallel-size: ")
    result = run("calibrate", GLM, "--set", "gpu=H200", "--set", "model=zai-org/GLM-5.1-FP8", "--set",
                 "tensor-parallel-size=8", "-f", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["kv_tokens_calibrated"] == 373_696  # the log's


@pytest.mark.parametrize("log, sets, source", [
    ("deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log", ["gpu=RTX PRO 6000"], "non-default args: "),
    ("glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log", [], "Initializing a V1 LLM engine (v0.26.0) with config: "),
])
def test_each_figure_names_the_log_line_it_came_from(log, sets, source):
    lines = (LOGS / log).read_text().splitlines()

    def number(text: str) -> int:
        return next((i for i, line in enumerate(lines, 1) if text in line), None)

    data = json.loads(run("calibrate", LOGS / log, *(a for s in sets for a in ("--set", s)), "-f", "json").stdout)
    kind = "non-default args" if "non-default" in source else "engine config"
    assert data["recipe_source"].startswith(f"from the log's {kind}, line {number(source)}")
    terms = {t["term"]: t for t in data["terms"]}
    gib = {name: f"{terms[name]['log'] / GIB:.2f} GiB" for name in ("weights", "KV memory")}
    assert terms["weights"]["log_line"] in (number(f"Model loading took {gib['weights']}"),
                                           number(f"Actual usage is {gib['weights']}"))
    assert terms["KV memory"]["log_line"] == number(f"Available KV cache memory: {gib['KV memory']}")
    assert terms["KV tokens"]["log_line"] == number(f"GPU KV cache size: {terms['KV tokens']['log']:,} tokens")
    assert terms["KV bytes per logged token"]["log_line"] is None  # derived from two lines
    text = run("calibrate", LOGS / log, *(a for s in sets for a in ("--set", s))).stdout
    assert f"log, line {terms['KV tokens']['log_line']}" in text
