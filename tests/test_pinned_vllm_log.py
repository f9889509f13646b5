"""vllm_log.py's reading rules that no other test pinned (found by tools/mutate.py). The lines are vLLM's spellings,
cut to what each rule reads; the values are the text's own."""

import pytest

from conftest import LOGS
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.vllm_log import read_engine_args, read_engine_config, read_log, read_log_file, split_entries


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
