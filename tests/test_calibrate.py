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

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import yaml

from conftest import LOGS, ROOT, SEED, cli, fails, one_line, run
from dsa_kvcalc import engine as engines, planning
from dsa_kvcalc import calibrate as cal, estimates, memory_terms
from dsa_kvcalc.calibrate import headroom_from_logs, measure_kv
from dsa_kvcalc.units import GIB
from dsa_kvcalc.inputs import read_text, yaml_mapping
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.recipe import RecipeError, load, load_recipe
from dsa_kvcalc.vllm_log import LogReading, RankReading, read_log, read_log_file

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


def test_calibrates_table_names_each_term_and_the_logs_figures(tmp_path):
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
    # The RTX log's 75.64 GiB of weights per rank (plus graphs and KV) cannot fit an H100 at 0.95 (75.2 GiB): vLLM
    # would refuse to start it there, so the log is not of an H100 (exit 4, one line).
    result = calibrate(RTX, "--set", "gpu=H100")
    assert result.exit_code == 4 and result.output.count("\n") == 1, result.output
    assert "H100" in result.output and "75.2 GiB" in result.output and "refuses to start" in result.output


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
        planned = planning.plan(load(raw, SEED.parent)).backend(backend)
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
    assert planning.plan(load_recipe(out)).backend("auto").oom.max_decodes == 129


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


# Rules of calibrate.py no test above pins, against real logs, lines in vLLM's spelling or sums written out ------------

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
def test_a_residual_splits_into_the_logged_terms_and_the_non_torch_estimate(residual, activation, non_torch, split):
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
    estimate = planning.plan(recipe)
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
    estimate = planning.plan(recipe)
    target = estimate.memory.requested_bytes - 80 * GIB - 4 * GIB - 10 * GIB
    measured = cal.Measured("", 1, peak_activation_bytes=4 * GIB + (64 << 20), non_torch_bytes=2 * GIB)
    assert cal.profiled_terms(recipe, estimate, measured, 80 * GIB, 4 * GIB, target).activation == 0


def test_logged_terms_within_their_rounding_are_made_to_add_up():
    # V3.2 bf16 on 8 x H200 (vLLM 0.26.0): 61 x (1152 + 132) x 64 = 5,012,736 B a block. Four of the log's terms
    # (weights, graphs, peak, non-torch) are printed to 0.01 GiB, each within 5,368,709 B, and the KV target is whole
    # blocks: 4 x 5,368,709 + 5,012,736 = 26,487,572 B unexplained is rounding, which the peak absorbs; a byte more
    # is not
    recipe = load(V32_H200 | {"vllm-version": "0.26.0"})
    estimate = planning.plan(recipe)
    target = estimate.memory.requested_bytes - 80 * GIB - 4 * GIB - 10 * GIB  # 10 GiB for peak + non-torch
    for gap, activation in ((26_487_572, 8 * GIB + 26_487_572), (26_487_573, 8 * GIB)):
        measured = cal.Measured("", 1, peak_activation_bytes=8 * GIB, non_torch_bytes=2 * GIB - gap)
        assert cal.profiled_terms(recipe, estimate, measured, 80 * GIB, 4 * GIB, target).activation == activation


def test_logged_terms_that_overfill_the_gpu_are_refused():
    recipe = load(V32_H200)
    estimate = planning.plan(recipe)
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
    assert cal.logged_graphs(old, planning.plan(old), cal.Measured("", 1))[:2] == (0, "log (none)")
    new = load(V32_H200)
    plan = planning.plan(new)
    assert cal.logged_graphs(new, plan, cal.Measured("", 1))[:2] == (plan.backend("auto").cudagraph.bytes,
                                                                     "plan's estimate")


def test_weights_the_log_does_not_print():
    recipe = load(V32_H200)
    plan = planning.plan(recipe)
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
    return planning.plan(load(calibration.raw_recipe)).backend("auto").kv_cache_tokens


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
    planned = planning.plan(load(result.raw_recipe)).backend("auto")
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
    # (as test_calibrate_after_a_main_log_gives_the_headroom_by_hand), a headroom of 225,485,783 B; its tokens scaled
    # alike, 1,936,929
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


# calibrate --after: another log, of a vLLM with the fix -------------------------------------------------------------

RTX_KV_GIB, RTX_TOKENS = 10.29, 1_993_100


def after_log(version: str | None, kv_gib: float) -> str:
    """The RTX log as a vLLM of this version (None: a log that prints none) would print it with this much KV."""
    text = RTX.read_text()
    version_line = next(line for line in text.splitlines() if line.endswith("version 0.25.0"))
    text = text.replace(version_line, version_line.replace("0.25.0", version) if version else "")
    tokens = int(RTX_TOKENS * kv_gib / RTX_KV_GIB)
    return text.replace(f"Available KV cache memory: {RTX_KV_GIB} GiB", f"Available KV cache memory: {kv_gib:.2f} GiB") \
        .replace(f"{RTX_TOKENS:,} tokens", f"{tokens:,} tokens")


MAIN_BUILD = "0.34.0.dev12+g317081f00"  # a build of main, which reserves the decode logits (#62860)
# The RTX deployment planned on a B200 reserves max(the 512 MiB prefill budget, 64 sequences x 3 rows x 262,656
# columns x 6 B = 302,579,712 B) = 536,870,912 B with #62860: a KV drop of more than that is another deployment.
RTX_RESERVED = 512 << 20


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([None, engines.OLDEST_VLLM, "0.25.0", "0.30.0", "0.33.0", engines.NEWEST_VLLM, MAIN_BUILD]),
       st.one_of(st.just(RTX_KV_GIB), st.floats(RTX_KV_GIB - 2, RTX_KV_GIB + 0.5).map(lambda g: round(g, 2))))
def test_calibrate_after_needs_another_log_of_a_vllm_with_the_fix(tmp_path_factory, version, kv_gib):
    # `calibrate L --after L` (the same log, from a vLLM before the fix) reported a headroom.
    log = tmp_path_factory.mktemp("after") / "after.log"
    log.write_text(after_log(version, kv_gib))
    result = cli("calibrate", RTX, "--set", "gpu=B200", "--after", log, "-f", "json")
    drop = round(RTX_KV_GIB * GIB) - round(kv_gib * GIB)
    if kv_gib == RTX_KV_GIB:
        assert "its KV figures are the first log's" in one_line(result.stderr)
    elif version is None:
        assert "prints no vLLM version" in one_line(result.stderr)
    elif version != MAIN_BUILD:
        assert f"vLLM {version}, which does not reserve the decode logits" in one_line(result.stderr)
    elif not 0 <= drop <= RTX_RESERVED:
        assert "not the same deployment" in one_line(result.stderr)
    else:
        headroom = json.loads(result.stdout)["headroom"]
        assert headroom["reserved_bytes"] == RTX_RESERVED and 0 <= headroom["headroom_bytes"] <= RTX_RESERVED
    assert result.exit_code in (0, 2)


def test_calibrate_after_a_main_log_gives_the_headroom_by_hand(tmp_path):
    # KV 10.29 GiB before, 10.00 GiB after: 11,048,803,369 - 10,737,418,240 = 311,385,129 B fell where 536,870,912 B
    # were reserved, so the profile's peak sat 536,870,912 - 311,385,129 = 225,485,783 B above the indexer's use.
    log = tmp_path / "after.log"
    log.write_text(after_log(MAIN_BUILD, 10.0))
    headroom = json.loads(cli("calibrate", RTX, "--set", "gpu=B200", "--after", log, "-f", "json").stdout)["headroom"]
    assert (headroom["kv_bytes_before"], headroom["kv_bytes_after"]) == (11_048_803_369, 10_737_418_240)
    assert headroom["headroom_bytes"] == 225_485_783


def test_calibrate_the_same_log_twice_is_refused():
    assert "the same log twice?" in one_line(cli("calibrate", RTX, "--set", "gpu=B200", "--after", RTX).stderr)
