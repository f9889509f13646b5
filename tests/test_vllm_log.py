"""vllm_log.read_log against real vLLM startup logs (verbatim, tests/fixtures/vllm_logs/SOURCES.md):

- deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log: a public write-up "DeepSeek-V4-Flash on stock vLLM v0.25.0
  (SM120 / RTX PRO 6000 Blackwell)", section "Full container startup log" (index file id 56819795714)
- deepseek-v4-flash-0731-8xb200-{tp8,dp8}-ep-vllm51454.log: vllm-project/vllm issue #51454 (stewtong)
- deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log: vllm-project/vllm issue #31903 (lengrongfu)
- nondsa-deepseek-r1-gguf-24gib-gpus-v0-oldspelling-vllm15340.log: vllm-project/vllm issue #15340 (davidsyoung)
- nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log: a public scoring page embedding container logs
  (index file id 60449471537)
- the one-line "GPU KV cache size: ..., Maximum concurrency ..." spelling: quoted from a boot log in
  vllm-project/vllm issue #54662 (nood-co1)
ANSI-coloured and cut inputs are derived inside the tests from these fixtures; no number is made up.
"""

from pathlib import Path

import pytest

from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.vllm_log import read_engine_args, read_engine_config, read_log, read_log_file, split_entries

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
RTX = (LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log").read_text()


def rank(reading, name):
    return next(r for r in reading.ranks if r.rank == name)


def test_v4_flash_rtx_log_per_rank():
    reading = read_log(RTX)
    tp0 = rank(reading, "Worker_TP0 pid=514")
    assert (tp0.weights_gib, tp0.available_kv_gib, tp0.cudagraph_estimated_gib, tp0.cudagraph_pool_gib,
            tp0.graph_capture_gib) == (75.64, 10.29, 1.58, 1.73, 1.73)
    assert (tp0.gpu_memory_utilization, tp0.utilization_without_graphs) == (0.95, 0.9334)
    assert rank(reading, "Worker_TP1 pid=515").cudagraph_estimated_gib == 1.58
    engine = rank(reading, "EngineCore pid=395")
    assert (engine.kv_tokens, engine.max_model_len, engine.max_concurrency) == (1_993_100, 1_048_576, 1.90)
    args = reading.engine_args
    assert not args.truncated and args.unreadable == ()
    assert args.values["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert (args.values["tensor_parallel_size"], args.values["max_num_seqs"]) == (2, 64)


def test_the_actual_usage_spelling_gives_every_memory_term():
    reading = read_log((LOGS / "nondsa-lfm2.5-1.2b-1xsm90-16gib-tp1-v0.26.0-actualusage.log").read_text())
    core = rank(reading, "EngineCore pid=79")
    assert (core.weights_gib, core.peak_activation_gib, core.non_torch_gib, core.cudagraph_actual_gib) == (
        0.88, 0.26, 0.16, 0.24)
    assert (core.cudagraph_estimated_gib, core.available_kv_gib, core.kv_tokens) == (0.58, 13.33, 2_324_244)
    assert (core.total_memory_gib, core.gpu_memory_utilization) == (16.0, 0.95)


def test_old_memory_profiling_spelling_and_gb_units():
    reading = read_log((LOGS / "nondsa-deepseek-r1-gguf-24gib-gpus-v0-oldspelling-vllm15340.log").read_text())
    worker = rank(reading, "VllmWorkerProcess pid=277")
    assert (worker.weights_gib, worker.non_torch_gib, worker.peak_activation_gib, worker.available_kv_gib) == (
        18.38, 0.15, 0.79, 2.96)
    assert (worker.total_memory_gib, worker.gpu_memory_utilization) == (23.58, 0.94)
    assert rank(reading, "VllmWorkerProcess pid=272").weights_gib == 18.3843  # "Model loading took 18.3843 GB"
    assert rank(reading, "").available_kv_gib == 2.96  # the driver process prints without a prefix


def test_truncated_args_keep_what_is_whole():
    reading = read_log((LOGS / "deepseek-v4-flash-0731-8xb200-tp8-ep-vllm51454.log").read_text())
    args = reading.engine_args
    assert args.truncated
    assert (args.values["tensor_parallel_size"], args.values["max_num_seqs"], args.values["kv_cache_dtype"]) == (
        8, 256, "fp8")
    assert "attention_config" not in args.values
    dp8 = read_log((LOGS / "deepseek-v4-flash-0731-8xb200-dp8-ep-vllm51454.log").read_text()).engine_args
    assert dp8.truncated and dp8.values["data_parallel_size"] == 8 and dp8.values["enable_expert_parallel"] is True


def test_an_entry_cut_mid_value_is_dropped():
    # Derived: the RTX log's args line cut inside "'max_num_seqs': 64" -> "'max_num_seqs': 6".
    line = next(l for l in RTX.splitlines() if "non-default args" in l)
    cut = line[:line.index("'max_num_seqs': 6") + len("'max_num_seqs': 6")]
    args = read_log(cut).engine_args
    assert args.truncated and "max_num_seqs" not in args.values and args.values["max_num_batched_tokens"] == 4096


def test_nested_prefix_names_the_innermost_process():
    reading = read_log((LOGS / "deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log").read_text())
    assert [r.rank for r in reading.ranks] == ["EngineCore_DP0 pid=749"]
    assert (reading.ranks[0].kv_tokens, reading.ranks[0].max_model_len) == (1_214_464, 163_840)


def test_ansi_colour_codes_are_ignored():
    # Derived: the RTX log with vLLM's coloured level names and a coloured prefix.
    coloured = RTX.replace("INFO", "\x1b[32mINFO\x1b[0m").replace("(Worker_TP0", "\x1b[36m(Worker_TP0").replace(
        "pid=514)", "pid=514)\x1b[0m")
    assert read_log(coloured) == read_log(RTX)


def test_a_lone_kv_cache_size_line_gives_tokens_length_and_concurrency():
    line = "GPU KV cache size: 1,553,140 tokens, Maximum concurrency for 1,000,000 tokens per request: 1.55x"
    only = read_log(line).ranks[0]
    assert (only.kv_tokens, only.max_model_len, only.max_concurrency) == (1_553_140, 1_000_000, 1.55)


# Reading rules, on lines in vLLM's spelling cut to what each rule reads; the values are the text's own ----------------

def test_the_first_entry_of_the_args_line_is_read():
    args = read_engine_args("{'model': 'zai-org/GLM-5-FP8', 'tensor_parallel_size': 8}")
    assert args.values == {"model": "zai-org/GLM-5-FP8", "tensor_parallel_size": 8}
    assert not args.truncated


def test_commas_quotes_and_brackets_inside_values_do_not_split_entries():
    # a quoted comma, a double-quoted apostrophe, an escaped quote, and a list: four entries
    args = read_engine_args(r"""{'a': 'x, y', 'b': "it's", 'c': 'q\'s, r', 'd': [1, 2]}""")
    assert args.values == {"a": "x, y", "b": "it's", "c": "q's, r", "d": [1, 2]}


def test_an_entry_that_is_not_a_quoted_key_is_skipped():
    assert read_engine_args("{'model': 'm', 42: 1}").values == {"model": "m"}


def test_the_config_line_gives_the_fields_it_has():
    # vLLM 0.26.0's "Initializing a V1 LLM engine (v0.26.0) with config: model='...', ...", cut to two fields
    reading = read_log("INFO 08-06 20:48:39 [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: "
                       "model='/MODELS/DeepSeek-V4-Flash-0731', tensor_parallel_size=4, skip_tokenizer_init=False")
    assert reading.engine_args.values == {"model": "/MODELS/DeepSeek-V4-Flash-0731", "tensor_parallel_size": 4}


def test_stamps_no_release_table_knows_name_no_release():
    reading = read_log("INFO 08-06 20:48:39 [my_fork.py:12] Available KV cache memory: 10.29 GiB")
    assert reading.stamps == {} and reading.releases == []
    assert reading.ranks[0].available_kv_gib == 10.29


def test_a_log_of_64_mib_is_read_and_one_byte_more_is_refused(tmp_path):
    # the reading limit is 64 MiB = 67,108,864 B (a startup log is kilobytes): a real log padded to exactly that is
    # read (its one rank's memory lines found), one byte more is refused before a line is read
    log = (LOGS / "deepseek-v3.2-unknowngpu-tp8-pp4-ray-vllm31903.log").read_bytes()
    path = tmp_path / "padded.log"
    path.write_bytes(log + b"\n" + b" " * (67_108_864 - len(log) - 1))
    assert len(read_log_file(path, "log").ranks) == 1
    path.write_bytes(log + b"\n" + b" " * (67_108_864 - len(log)))
    with pytest.raises(RecipeError, match="is over 64 MiB: not a vLLM startup log"):
        read_log_file(path, "log")


def test_an_empty_quoted_key_closes_at_its_second_quote():
    # '' opens and closes a string: the entries are "'': 1" and "'b': 2", and the brace closes the dict
    assert split_entries("'': 1, 'b': 2}") == (["'': 1", " 'b': 2"], True)


def test_the_engine_config_line_is_never_cut_off():
    # vLLM's "Initializing a V1 LLM engine (v0.26.0) with config: model='...', max_seq_len=819200, ..." is read
    # field by field, not as a dict repr: nothing is lost at its end, so calibrate warns of no truncated args
    args = read_engine_config("model='zai-org/GLM-5.2', max_seq_len=819200, tensor_parallel_size=4")
    assert args.values == {"model": "zai-org/GLM-5.2", "max_model_len": 819_200, "tensor_parallel_size": 4}
    assert not args.truncated
