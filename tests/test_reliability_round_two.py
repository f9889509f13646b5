"""Issue 16, reliability round two. Each class of the issue has property tests that generate its cases: versions too
long to convert, verify without a usable torch or GPU, calibrate --after and --vary meaning what they say, memory that
stays flat whatever fails (its files and streams are test_files_and_streams.py's). Outcomes are checked against what
the code did not produce: exit codes, a one-line stderr, files written in full."""

import json
import re
import sys
import time
import tracemalloc
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import LOGS, ROOT, SEED, runner
from dsa_kvcalc import engine as engines
from dsa_kvcalc.cli import app, console_chunks
from dsa_kvcalc.inputs import RecipeLoader
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.values import read_values
from dsa_kvcalc.render import sweep as sweep_render
from dsa_kvcalc.sweep import parse_varies

RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
SECONDS = 5
FEW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def cli(*args):
    """The command in process, as typer runs it: never a traceback, never more than a few seconds."""
    started = time.process_time()  # CPU: a loaded machine does not fail a run that works
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert time.process_time() - started < SECONDS, args
    return result


def one_line(text: str, start: str = "error: ") -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), text
    return lines[0]


# Versions of thousands of digits -------------------------------------------------------------------------------------

def digits(count: int) -> str:
    return ("1234567890" * (count // 10 + 1))[:count]


versions = st.builds(lambda v, parts, tag: v + ".".join(digits(n) for n in parts) + tag, st.sampled_from(["", "v"]),
                     st.lists(st.one_of(st.integers(1, 7), st.integers(7, 6000)), min_size=1, max_size=4),
                     st.one_of(st.just(""), st.builds(lambda n: "rc" + digits(n), st.integers(1, 6000)),
                               st.sampled_from([".dev1+g1234", "-x", "+" + "a" * 70])))


@FEW
@given(versions, st.sampled_from(["--set", "file", "--vary", "log"]))
def test_a_version_of_any_length_is_planned_or_one_line(tmp_path_factory, version, where):
    # A vllm-version of thousands of digits ended in a traceback (Python converts no int of over 4,300 digits).
    folder = tmp_path_factory.mktemp("version")
    recipe = folder / "recipe.yaml"
    recipe.write_text(SEED.read_text())
    if where == "--set":
        result = cli("plan", recipe, "-f", "json", "--set", f"vllm-version={version}")
    elif where == "file":
        recipe.write_text(f"model: DeepSeek-V3.2\ngpu: H200\ntensor-parallel-size: 8\nvllm-version: '{version}'\n")
        result = cli("plan", recipe, "-f", "json")
    elif where == "--vary":
        result = cli("sweep", recipe, "--vary", f"vllm-version={version}", "-f", "jsonl", "--backend", "auto")
    else:
        log = folder / "startup.log"
        log.write_text(f"INFO vLLM API server version {version}\n" + RTX.read_text().split("\n", 3)[3])
        result = cli("calibrate", log, "--set", "gpu=B200", "-f", "json")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        one_line(result.stderr)
    elif where in ("--set", "file"):
        assert json.loads(result.stdout)["recipe"]["vllm-version"] == version.removeprefix("v")
    elif where == "--vary":
        row = json.loads(result.stdout.splitlines()[0])
        assert row.get("engine_label") == f"vLLM {version.removeprefix('v')}" or "error" in row


# verify: a torch or DeepGEMM that does not import, a GPU that cannot be reached -----------------------------------

def noise() -> None:
    """What a torch or DeepGEMM build says while it loads: lines on stdout and stderr, a warning."""
    import warnings

    print("loading\nstill loading")
    print("a C++ banner", file=sys.stderr)
    warnings.warn("Failed to initialize NumPy: _ARRAY_API not found")


class Failing:
    """A finder whose import of one module fails with the given exception, as a broken build's would."""

    def __init__(self, name: str, error: Exception):
        self.name, self.error = name, error

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            noise()
            raise self.error
        return None


def fake_torch(stage: str, error: Exception, warning: str):
    """A torch whose CUDA side fails at stage: an H200 otherwise, whose memory query fails from its second call
    when the stage is the pass itself."""
    calls = []

    def mem_get_info():
        calls.append(1)
        if stage == "mem_get_info" or (stage == "the pass" and len(calls) > 1):
            raise error
        return 149_557_477_376, 150_109_880_320

    def is_available():
        noise()
        if stage == "is_available raises":
            raise error
        if stage == "no GPU":
            import warnings
            warnings.warn(warning)
        return stage != "no GPU"

    def get_device_properties(index):
        if stage == "get_device_properties":
            raise error
        return types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0)

    cuda = types.SimpleNamespace(is_available=is_available, mem_get_info=mem_get_info,
                                 get_device_properties=get_device_properties)
    return types.SimpleNamespace(__version__="2.11.0+cu130", cuda=cuda)


STAGES = ["import torch", "is_available raises", "no GPU", "mem_get_info", "get_device_properties",
          "import deep_gemm", "the pass"]
ERRORS = [OSError, ImportError, RuntimeError, AttributeError, ValueError, SyntaxError]


@FEW
@given(st.sampled_from(STAGES), st.sampled_from(ERRORS), st.text(max_size=40), st.text(max_size=30))
def test_verify_without_a_usable_torch_or_gpu_is_exit_3_with_one_line_naming_the_cause(stage, kind, message, said):
    # A torch that failed to load, or a GPU busy or in exclusive mode, ended in a traceback.
    if stage == "the pass":
        kind = RuntimeError  # what torch raises for a CUDA failure
    error = kind(message)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("torch", "deep_gemm"):
            patch.delitem(sys.modules, name, raising=False)
        if stage in ("import torch", "import deep_gemm"):
            patch.setattr(sys, "meta_path", [Failing(stage.split()[1], error), *sys.meta_path])
        if stage != "import torch":
            patch.setitem(sys.modules, "torch", fake_torch(stage, error, said))
        if stage != "import deep_gemm":
            patch.setitem(sys.modules, "deep_gemm", types.SimpleNamespace(__version__="2.8.2",
                                                                          fp8_fp4_paged_mqa_logits=None))
        result = cli("verify", "--gpu")
    assert result.exit_code == 3, result.output
    line = one_line(result.stderr)
    first = (said if stage == "no GPU" else message).strip().splitlines()
    named = first[0] if first else ("UserWarning" if stage == "no GPU" else kind.__name__)
    assert all(part in line for part in re.split(r"[^ -~]+", named) if part), (named, line)


# Meaning: calibrate --after, --vary ---------------------------------------------------------------------------------

GIB = 1 << 30
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


@FEW
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


VARIED_KEYS = ["max-num-seqs", "max_num_seqs", "memory.weights_gib", "memory.weights_bytes", "memory.non_torch_gib",
               "memory.cudagraph_gib", "memory.cudagraph_gib.auto", "memory.cudagraph_bytes.deep_select",
               "memory.cudagraph_gib.deep_select", "memory.gpu", "memory.rest", "speculative-config",
               "speculative-config.num_speculative_tokens", "speculative_config.num_speculative_tokens",
               "compilation-config.max_cudagraph_capture_size"]
VALUES = {"memory.gpu": "B200", "memory.rest": "weights", "speculative-config": "{}", "max-num-seqs": "64"}


def as_yaml(keys: list[str]) -> str:
    """A recipe file that sets every key, nested as a file nests them: a key met twice at one level is written
    twice there, which is what a file that gives both would hold."""
    tree: list = []
    for key in keys:
        level, (*parents, leaf) = tree, key.split(".")
        for part in parents:
            node = next((child for name, child in level if name == part and isinstance(child, list)), None)
            if node is None:
                node = []
                level.append((part, node))
            level = node
        level.append((leaf, VALUES.get(key, "1")))

    def lines(level, indent):
        for name, child in level:
            yield f"{indent}{name}:" + ("" if isinstance(child, list) else f" {child}")
            if isinstance(child, list):
                yield from lines(child, indent + "  ")

    return "\n".join(lines(tree, "")) + "\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VARIED_KEYS), min_size=1, max_size=3))
def test_vary_refuses_exactly_the_pairs_a_recipe_file_refuses(keys):
    # `--vary memory.weights_gib=... --vary memory.weights_bytes=...` let one silently win, where a file refuses both.
    import yaml

    try:
        read_values(yaml.load(as_yaml(keys), Loader=RecipeLoader))
        twice = False
    except RecipeError as error:
        twice = "twice" in str(error)
    if twice:
        with pytest.raises(RecipeError, match="varied twice"):
            parse_varies([f"{key}=1" for key in keys])
    else:
        parse_varies([f"{key}=1" for key in keys])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from([("gpu", "H200"), ("gpu", "B200"), ("memory.weights_gib", "80"),
                                 ("memory.cudagraph_gib.auto", "0.5"), ("memory.gpu", "H200"),
                                 ("max-num-seqs", "64"), ("memory.rest", "weights")]), min_size=1, max_size=3,
                unique_by=lambda pair: pair[0]))
def test_each_sweep_row_is_what_plan_with_the_same_sets_says(pairs):
    # A point of a sweep follows every rule `plan --set` follows: same answer, or the same one-line refusal.
    recipe = ROOT / "recipes" / "deepseek-v3.2-8xh200-tp8.yaml"  # no memory block: a varied term records its GPU
    swept = cli("sweep", recipe, *(a for key, value in pairs for a in ("--vary", f"{key}={value}")), "-f", "jsonl",
                "--backend", "auto")
    [row] = [json.loads(line) for line in swept.stdout.splitlines()]
    planned = cli("plan", recipe, *(a for key, value in pairs for a in ("--set", f"{key}={value}")), "-f", "json")
    if planned.exit_code == 2:
        assert row["error"] == one_line(planned.stderr).removeprefix("error: ")
    else:
        auto = next(b for b in json.loads(planned.stdout)["backends"] if b["backend"] == "auto")
        assert row["kv_cache_tokens"] == auto["kv_cache_tokens"]


# Memory: flat in every format, whatever fails ---------------------------------------------------------------------

failed_row = st.builds(lambda seqs, error: {"max-num-seqs": seqs, "error": error}, st.integers(), st.text(max_size=30))
planned_row = st.builds(lambda seqs, tokens: {"max-num-seqs": seqs, "backend": "auto", "available": True,
                                              "decode_logits.rows": 1, "kv_cache_tokens": tokens},
                        st.integers(), st.integers(0, 10 ** 9))
unavailable_row = st.builds(lambda seqs: {"max-num-seqs": seqs, "backend": "deep_select", "available": False,
                                          "reason": "not on SM90", "decode_logits": None}, st.integers())


def test_csv_header_is_the_fields_up_to_the_first_planned_row_then_error():
    # The header: every field of the rows up to the first available one, in order, a field with dotted children
    # (decode_logits, null where unavailable) left out, error kept; a later row's new field (extra) gets no column.
    rows = [{"max-num-seqs": 1, "error": "bad"},
            {"max-num-seqs": 2, "backend": "deep_select", "available": False, "reason": "not on SM90",
             "decode_logits": None},
            {"max-num-seqs": 3, "backend": "auto", "available": True, "decode_logits.rows": 6, "kv_cache_tokens": 7},
            {"max-num-seqs": 4, "error": "late", "extra": 1}]
    assert "".join(sweep_render.csv_lines(iter(rows))) == (
        "max-num-seqs,error,backend,available,reason,decode_logits.rows,kv_cache_tokens\n"
        "1,bad,,,,,\n2,,deep_select,False,not on SM90,,\n3,,auto,True,,6,7\n4,late,,,,,\n")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(failed_row, planned_row, unavailable_row), min_size=1, max_size=40), st.integers(1, 400))
def test_csv_rows_are_the_same_whatever_spills(rows, wait_bytes):
    whole = "".join(sweep_render.csv_lines(iter(rows)))  # WAIT_BYTES of 1 MiB: these rows never spill
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "WAIT_BYTES", wait_bytes)  # spill to disk early, or not at all
        assert "".join(sweep_render.csv_lines(iter(rows))) == whole


def peak_bytes(format: str, count: int) -> int:
    """What streaming count failed points in this format holds at most in memory."""
    rows = ({"max-num-seqs": -i, "error": f"max-num-seqs: must be at least 1 and at most 1,048,576, got -{i % 7}"}
            for i in range(count))
    chunks = {"csv": sweep_render.csv_lines, "jsonl": sweep_render.jsonl_lines,
              "table": lambda rows: console_chunks(lambda c: sweep_render.table_parts(["max-num-seqs"], rows, c))}
    tracemalloc.start()
    for _ in chunks[format](rows):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("format, rows", [("csv", 1000), ("jsonl", 1000), ("table", 40)])
def test_memory_stays_flat_in_every_format_when_every_point_fails(format, rows):
    # A sweep whose points all failed grew in CSV (every row waited for the header), not in JSONL.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "TABLE_ROWS", 20)  # a table's memory is a part's: twenty rows show it
        patch.setattr(sweep_render, "WAIT_BYTES", 64 << 10)
        peak_bytes(format, rows)  # imports and first-use caches out of the way
        few, many = peak_bytes(format, rows), peak_bytes(format, 10 * rows)
    assert many < few * 1.5 + (512 << 10), (few, many)  # rich's caches grow up to their bound
