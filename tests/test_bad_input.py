"""Every bad input gets one line (`error: KEY: ...`, exit 2) and writes nothing, and no figure a person reads is cut
(what --output does alone is test_files_and_streams.py's). One test a case, each saying what the user did; then
property tests that throw hostile recipes, --set values, sweep ranges, output targets and versions of thousands of
digits at the command line, and thousands of generated recipes, valid and broken, at the loader and plan."""

import io
import json
import os
import re
import resource
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from rich.console import Console

from conftest import LOGS, RECIPES, ROOT, SEED, cli, fails, one_line, runner
from dsa_kvcalc import planning, report
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.cli import app, main
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load
from dsa_kvcalc.schema import json_schema
from dsa_kvcalc.render import verify as verify_render
from dsa_kvcalc.sweep import MAX_POINTS, parse_varies, points

RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"
BASE = "model: DeepSeek-V3.2\ngpu: H200\ntensor-parallel-size: 8\n"
V4 = "model: DeepSeek-V4-Flash\ngpu: B200\ndata-parallel-size: 4\nenable-expert-parallel: true\n"
CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
MEMORY_LIMIT = 2 << 30  # address space for a child: the 7.5 GB config.json of the issue would not fit
FEW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
CHILD_SECONDS = 30  # a child's wall-clock limit: it imports everything, on a machine others may be loading


def child(*args, timeout=20):
    """python -m dsa_kvcalc, as the console script runs, in at most MEMORY_LIMIT of address space."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    return subprocess.run([sys.executable, "-m", "dsa_kvcalc", *map(str, args)], env=CHILD_ENV, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit)


def main_run(capsys, *args) -> tuple[int, str, str]:
    """dsa_kvcalc.cli.main, the console script's entry, in process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def write(folder: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def state(*roots) -> dict:
    """Everything a command could harm under roots: per path its type, mode, owner, content (a link: where it points;
    a device: its number) and a file's or link's modification time (a folder's changes when a temporary comes and
    goes)."""
    found = {}
    for root in map(Path, roots):
        walk = [root, *sorted(root.rglob("*"))] if root.is_dir() and not root.is_symlink() else [root]
        for path in walk:
            info = os.lstat(path)
            kind = stat.S_IFMT(info.st_mode)
            content = os.readlink(path) if stat.S_ISLNK(info.st_mode) else \
                path.read_bytes() if stat.S_ISREG(info.st_mode) else info.st_rdev
            timed = stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)
            found[str(path)] = (kind, stat.S_IMODE(info.st_mode), info.st_uid, content, timed and info.st_mtime_ns)
    return found


def hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


# Tracebacks, hangs and unbounded memory instead of one line -------------------------------------------------------

def commands(recipe: Path) -> dict[str, list]:
    """Every command that reads a recipe, as a user would run it on that recipe."""
    return {
        "plan": ["plan", recipe],
        "sweep": ["sweep", recipe, "--vary", "max-num-seqs=64,128"],
        "recommend": ["recommend", recipe, "--target-concurrency", 64, "--min-kv-tokens", 1000],
        "verify": ["verify", recipe, "--gpu"],  # the recipe is read before the GPU is looked for
        "calibrate": ["calibrate", RTX, "--recipe", recipe, "--set", "gpu=B200"],
    }


@pytest.mark.parametrize("command", ["plan", "sweep", "recommend", "verify", "calibrate"])
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_nan_and_inf_memory_terms_are_one_line_in_every_command(tmp_path, command, value):
    # `memory: {weights_gib: .nan}` (or .inf) gave a traceback in plan, sweep, recommend, verify and calibrate.
    recipe = write(tmp_path, f"model: DeepSeek-V4-Flash\ngpu: B200\nmemory: {{weights_gib: {value}}}\n")
    fails(cli(*commands(recipe)[command]), "error: memory.weights_gib: expected a number of GiB")


@pytest.mark.parametrize("value, problem", [
    ('\'{"weights_gib": NaN}\'', "memory.weights_gib: expected a number of GiB, got nan"),
    ('\'{"weights_gib": 1' + "0" * 5000 + '}\'', "memory: a number too long to read"),
    ("'" + "[" * 100_000 + "'", "memory: nests too deeply"),
    ("1" + "0" * 5000, "recipe: YAML error in"),
])
def test_odd_numbers_in_a_json_string_or_yaml_are_one_line(tmp_path, value, problem):
    # vLLM takes nested configs as JSON strings: NaN, a 5,000-digit number or deep nesting there, or a 5,000-digit
    # YAML number, gave tracebacks (Python reads no int of over 4,300 digits).
    fails(cli("plan", write(tmp_path, BASE + f"memory: {value}\n")), f"error: {problem}")


@pytest.mark.parametrize("key", ["1", "2.5", "true", "yes", "null", "~", "2001-01-01"])
def test_a_key_that_yaml_reads_as_a_value_is_named_as_written(tmp_path, key):
    # A recipe line `1: 3` gave a traceback; then `yes: 3` was reported as `True` and `~: 3` as `None`.
    fails(cli("plan", write(tmp_path, BASE + f"{key}: 3\n")), f"error: {key}: unknown key")


def test_merged_and_anchored_values_are_read_as_written_without_harming_their_other_uses(tmp_path):
    # Keys merged with <<: were retagged after the merge: deepgemm 2.10 still became 2.1, yes still True. And a
    # version anchored beside a number was retagged for both uses.
    fails(cli("plan", write(tmp_path, BASE + "<<: {deepgemm: 2.10}\n")), "error: deepgemm: no known logits layout "
                                                                        "for DeepGEMM 2.10")
    fails(cli("plan", write(tmp_path, BASE + "<<: {yes: 1}\n")), "error: yes: unknown key")
    shared = BASE + "vllm-version: &v 0.30\nenv: {VLLM_SPARSE_INDEXER_MAX_LOGITS_MB: *v}\n"
    fails(cli("plan", write(tmp_path, shared)), "error: env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB: expected a whole "
                                                "number, got 0.3")  # the number, not the text '0.30'


def test_a_key_given_twice_in_a_nested_mapping_is_named_with_its_path(tmp_path):
    fails(cli("plan", write(tmp_path, BASE + "speculative-config:\n  num_speculative_tokens: 1\n"
                                              "  num_speculative_tokens: 2\n")),
          "error: speculative-config.num_speculative_tokens: given twice (line 6)")


def test_a_key_given_twice_in_a_json_string_is_refused(tmp_path):
    # vLLM's CLI form `speculative-config: '{...}'` kept the last of two num_speculative_tokens silently.
    fails(cli("plan", write(tmp_path, BASE + """speculative-config: '{"num_speculative_tokens": 1, """
                                              """"num_speculative_tokens": 3}'\n""")),
          "error: speculative-config.num_speculative_tokens: given twice in the JSON")


def test_null_for_one_backends_graph_pool_restores_the_estimate(tmp_path):
    recipe = write(tmp_path, BASE + "memory:\n  cudagraph_gib:\n    auto: null\n    deep_select: 2\n")
    result = cli("plan", recipe, "-f", "json")
    assert result.exit_code == 0, result.output
    auto = next(b for b in json.loads(result.stdout)["backends"] if b["backend"] == "auto")
    assert auto["cudagraph_provenance"] == "derived"  # from deep_select's measured pool, not a measurement of its own


def test_memory_rest_marks_the_one_term_a_sum_leaves_as_estimated(tmp_path):
    block = BASE + "memory:\n  weights_gib: 80\n  peak_activation_gib: 3\n"
    provenance = json.loads(cli("plan", write(tmp_path, block + "  rest: peak_activation\n"), "-f", "json").stdout)[
        "memory"]["provenance"]
    assert (provenance["weights"]["provenance"], provenance["peak_activation"]["provenance"]) == ("measured",
                                                                                                  "estimated")
    fails(cli("plan", write(tmp_path, block + "  rest: non_torch\n")),
          "error: memory.rest: names non_torch, which the memory block does not give")
    fails(cli("plan", write(tmp_path, block + "  rest: cudagraph\n")), "error: memory.rest: unknown value")


def test_a_vllm_newer_than_the_rules_is_planned_with_a_warning(tmp_path):
    result = cli("plan", write(tmp_path, BASE + "vllm-version: 0.99.0\n"), "-f", "json")
    assert any("newer than the newest release modelled (0.33.0)" in w for w in json.loads(result.stdout)["warnings"])


def test_a_check_across_keys_names_the_key_as_written(tmp_path):
    recipe = write(tmp_path, BASE + "max_model_len: 999999999\n")
    fails(cli("plan", recipe), "error: max_model_len: 999,999,999 exceeds")
    fails(cli("sweep", recipe, "--vary", "max-num-seqs=1,2"), "error: max_model_len: 999,999,999 exceeds")


def test_set_and_vary_read_versions_as_written_and_null_as_the_default(tmp_path):
    recipe = write(tmp_path, BASE)
    for text, version in (("0.30", "0.30"), ("~", "0.33.0"), ("Null", "0.33.0")):
        planned = json.loads(cli("plan", recipe, "--set", f"vllm-version={text}", "-f", "json").stdout)
        assert planned["recipe"]["vllm-version"] == version, text
    swept = cli("sweep", recipe, "--vary", "vllm-version=0.30,null", "--backend", "auto", "-f", "jsonl")
    assert [json.loads(line)["engine_label"] for line in swept.stdout.splitlines()] == ["vLLM 0.30", "vLLM 0.33.0"]


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "{a: " * 3000 + "1" + "}" * 3000,
                                   "".join(f"\n{'  ' * (i + 1)}a:" for i in range(900)) + " 1"])
def test_deep_nesting_under_an_ignored_key_is_one_line(tmp_path, value):
    # A deeply nested value under `host:` (a key dsa-kvcalc ignores) gave a RecursionError traceback.
    fails(cli("plan", write(tmp_path, BASE + f"host: {value}\n")), "error: recipe: ", "nests too deeply")


def test_aliases_that_expand_without_bound_are_one_line(tmp_path):
    # Nine aliases of nine aliases ("billion laughs") under an ignored key, then one of them as the model: printing the
    # value in the error took all memory. Run in a child with 2 GiB of address space.
    lines = ["host:", "  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    recipe = write(tmp_path, "\n".join(lines) + "\nmodel: *a8\ngpu: H200\n")
    done = child("plan", recipe)
    assert done.returncode == 2, done.stderr
    one_line(done.stderr, "error: recipe: ")
    assert "aliases expand" in done.stderr


NEEDED = {"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}


@pytest.mark.parametrize("config", [
    json.dumps({name: str(value) for name, value in NEEDED.items()}),
    json.dumps(NEEDED | {"max_position_embeddings": "163840"}),
    json.dumps(NEEDED | {"num_hidden_layers": 10 ** 12}),
    json.dumps(NEEDED | {"compress_ratios": "4" * 1_000_000}),
    json.dumps(NEEDED | {"_name_or_path": "\ud800"}),  # JSON's "\ud800" is half a character: no output prints it
    json.dumps(NEEDED)[:-1] + ', "vocab_size": 1' + "0" * 5000 + "}",  # Python reads no int of over 4,300 digits
])
def test_a_local_config_json_with_strings_for_numbers_is_one_line_in_bounded_memory(tmp_path, config):
    # A local config.json with strings where numbers belong gave a traceback; one used 7.5 GB of RAM before failing.
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "config.json").write_text(config)
    done = child("plan", write(tmp_path, "model: checkpoint\ngpu: H200\n"))
    assert done.returncode == 2, done.stderr
    one_line(done.stderr, "error: model: ")


def test_huge_capture_sizes_end_within_seconds_in_bounded_memory(tmp_path):
    # Found by the property test below: max-num-batched-tokens and max_cudagraph_capture_size of 2e9, each within its
    # bounds, made plan build vLLM's capture-size grid of 250 million sizes (MemoryError, or minutes). Either plan
    # answers or the recipe is refused in one line; either way within seconds and 2 GiB.
    recipe = write(tmp_path, BASE + "max-num-batched-tokens: 2000000000\n"
                                    "compilation-config:\n  max_cudagraph_capture_size: 2000000000\n")
    done = child("plan", recipe, timeout=CHILD_SECONDS)
    assert done.returncode in (0, 2, 4) and "Traceback" not in done.stderr, done.stderr  # 4: vLLM would refuse it
    if done.returncode in (2, 4):
        one_line(done.stderr, "error: ")


@pytest.mark.parametrize("spec", ["1:1e12:1", "1:1e30:1", "1:1e999999:1", "0:1:1e-999999", "0.1:0.9:1e-30",
                                  "1:1000001:1"])
def test_sweep_ranges_beyond_the_limit_are_one_line_at_once(spec):
    # `sweep --vary max-num-seqs=1:1e12:1` raised MemoryError and 1:1e30:1 grew memory without bound.
    done = child("sweep", SEED, "--vary", f"max-num-seqs={spec}", timeout=CHILD_SECONDS)
    assert done.returncode == 2, done.stderr
    one_line(done.stderr, f"error: --vary max-num-seqs={spec}: ")


def test_a_single_vary_is_lazy():
    # A single --vary built its whole range before the first row streamed.
    [vary] = parse_varies([f"max-num-seqs=1:{MAX_POINTS}:1"])
    assert isinstance(vary.values, range) and len(vary.values) == MAX_POINTS
    started = time.monotonic()
    assert next(points([vary])) == (1,) and time.monotonic() - started < 0.1


def test_a_max_model_len_below_the_indexers_ratio_is_one_line(tmp_path):
    # Found by the property test below: DeepSeek-V4's indexer scores max-model-len // 4 keys, so `--set
    # max-model-len=1` left it none and plan divided by zero.
    recipe = write(tmp_path, V4)
    fails(cli("plan", recipe, "--set", "max-model-len=3"), "error: max-model-len: ")


def test_recommend_max_spec_tokens_is_bounded_by_the_keys_maximum():
    # `recommend --max-spec-tokens 1000000` ran for minutes.
    result = cli("recommend", SEED, "--target-concurrency", 64, "--min-kv-tokens", 1000, "--max-spec-tokens", 1000000)
    fails(result, "error: --max-spec-tokens: must be at least 0 and at most 64")


# Accepted silently, with wrong answers ----------------------------------------------------------------------------

@pytest.mark.parametrize("text, key", [
    (BASE + "max-num-seqs: 3\nmax-num-seqs: 4\n", "max-num-seqs: given twice (line 5)"),
    (BASE + "max_num_seqs: 3\nmax-num-seqs: 4\n", "max-num-seqs: given twice (as max_num_seqs and max-num-seqs)"),
    (BASE + "memory:\n  weights_gib: 3\n  weights_gib: 4\n", "memory.weights_gib: given twice (line 6)"),
    (BASE + "memory:\n  weights_gib: 3\n  weights_bytes: 4\n", "memory.weights_bytes: weights is given twice"),
])
def test_duplicate_keys_are_refused(tmp_path, text, key):
    # A key given twice was accepted, and the last one won.
    fails(cli("plan", write(tmp_path, text)), f"error: {key}")


def test_a_duplicate_key_in_a_set_value_is_refused():
    # --set takes YAML: a mapping with a key given twice is the same mistake as in a file.
    result = cli("plan", SEED, "--set", "speculative-config={num_speculative_tokens: 1, num_speculative_tokens: 2}")
    fails(result, "error: --set speculative-config: num_speculative_tokens: given twice")


def test_a_tensor_parallel_size_of_10_to_the_30_is_refused(tmp_path):
    # tensor-parallel-size: 10^30 was accepted and planned.
    fails(cli("plan", write(tmp_path, BASE.replace("8", "1" + "0" * 30))),
          "error: tensor-parallel-size: must be at least 1 and at most 1,024")


def test_kv_cache_memory_bytes_larger_than_the_gpu_is_refused():
    # kv-cache-memory-bytes larger than the GPU was accepted.
    fails(cli("plan", SEED, "--set", "kv-cache-memory-bytes=200G"), "error: kv-cache-memory-bytes: ", "more than B200")


def test_set_with_an_empty_value_is_refused_and_null_restores_the_default():
    # `--set max-num-seqs=` with an empty value was accepted.
    fails(cli("plan", SEED, "--set", "max-num-seqs="), "error: --set max-num-seqs: no value")
    restored = json.loads(cli("plan", SEED, "-f", "json", "--set", "max-num-seqs=null").output)
    assert restored["recipe"]["max-num-seqs"] == 1024  # vLLM's default on a GPU of >= 70 GiB, not the recipe's 256


def test_a_measured_graph_pool_smaller_than_its_logits_is_refused():
    # A measured CUDA-graph pool of 0.5 GiB was accepted though its FULL decode graph holds 9 GiB of indexer logits.
    fails(cli("plan", SEED, "--set", "memory.cudagraph_gib.auto=0.5"),
          "error: memory.cudagraph_gib.auto: 0.50 GiB is less than the 9.00 GiB of indexer logits")


def test_set_gpu_on_a_recipe_measured_on_another_gpu_is_refused():
    # `--set gpu=H200` on the seed's recipe, measured on B200, gave 0 KV tokens and "OOM before fix > 268 decodes".
    fails(cli("plan", SEED, "--set", "gpu=H200"), "error: memory: measured on B200", "runs on H200")


def test_sweep_over_engines_keeps_a_row_for_a_backend_one_engine_lacks():
    # `sweep --vary engine=vllm,deepinfer --backend deep_select` dropped the deepinfer point without an error row.
    result = cli("sweep", SEED, "--vary", "engine=vllm,deepinfer", "--backend", "deep_select", "-f", "jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["engine"], r["backend"], r["available"]) for r in rows] == [
        ("vllm", "deep_select", True), ("deepinfer", "deep_select", False)]
    assert "not a backend of DeepInfer" in rows[1]["reason"]


def test_calibrate_a_deepinfer_recipe_is_one_line(tmp_path):
    # `calibrate LOG --set engine=deepinfer` failed with a StopIteration traceback.
    out = tmp_path / "calibrated.yaml"
    fails(cli("calibrate", RTX, "--set", "gpu=B200", "--set", "engine=deepinfer", "-o", out),
          "error: engine: calibrate reads vLLM startup logs")
    assert not out.exists()


# Documented, but rejected -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["auto", "-1", "'-1'"])
def test_max_model_len_auto_and_minus_one_mean_the_models_maximum(tmp_path, spelling):
    # `max-model-len: auto` and `-1`, documented as the model's maximum, were rejected.
    result = cli("plan", write(tmp_path, BASE + f"max-model-len: {spelling}\n"), "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["recipe"]["max-model-len"] == 163_840
    swept = cli("sweep", SEED, "--vary", "max-model-len=auto,128k", "-f", "jsonl", "--backend", "auto")
    assert [json.loads(line)["decode_logits.columns"] for line in swept.stdout.splitlines()] == [1_048_576, 128_000]


def test_deepgemm_2_8_unquoted_is_accepted_and_the_error_lists_the_layouts(tmp_path):
    # `deepgemm: 2.8` (a YAML float) was rejected, and the error listed layouts that differ from docs/design.md's.
    assert cli("plan", write(tmp_path, BASE + "deepgemm: 2.8\n")).exit_code == 0
    fails(cli("plan", write(tmp_path, BASE + "deepgemm: 2.7\n")),
          "error: deepgemm: no known logits layout for DeepGEMM 2.7; known layouts: 2.8, 2.3 - 2.6, 2.1 - 2.2")


def test_versions_are_read_as_written_not_as_yaml_numbers(tmp_path):
    # YAML reads 0.30 as the number 0.3 and 2.10 as 2.1: vllm-version 0.30 was refused as older than 0.19.0, and
    # deepgemm 2.10 silently took DeepGEMM 2.1's layout. In a file, through --set and through --vary alike.
    def version(*args) -> str:
        return json.loads(cli("plan", *args, "-f", "json").stdout)["recipe"]["vllm-version"]

    assert version(write(tmp_path, BASE + "vllm-version: 0.30\n")) == "0.30"
    assert version(write(tmp_path, BASE), "--set", "vllm-version=0.30") == "0.30"
    swept = cli("sweep", write(tmp_path, BASE), "--vary", "vllm-version=0.30,0.20", "--backend", "auto", "-f", "jsonl")
    assert [json.loads(line)["engine_label"] for line in swept.stdout.splitlines()] == ["vLLM 0.30", "vLLM 0.20"]
    fails(cli("plan", write(tmp_path, BASE + "deepgemm: 2.10\n")),
          "error: deepgemm: no known logits layout for DeepGEMM 2.10; known layouts: 2.8, 2.3 - 2.6, 2.1 - 2.2")


def test_set_a_backends_graph_pool_on_a_recipe_without_the_mapping(tmp_path):
    # `--set memory.cudagraph_gib.auto=3` on a recipe with no such mapping was rejected, and the message renamed the
    # key. Errors name the key as the user wrote it.
    recipe = write(tmp_path, BASE)
    assert cli("plan", recipe, "--set", "memory.cudagraph_gib.auto=3").exit_code == 0
    fails(cli("plan", recipe, "--set", "memory.cudagraph-gib.auto=3"),
          "error: memory.cudagraph-gib: unknown memory term")
    fails(cli("plan", recipe, "--set", "memory.cudagraph_gib.fastest=3"),
          "error: memory.cudagraph_gib.fastest: unknown backend")
    in_bytes = write(tmp_path, BASE + "memory:\n  cudagraph_bytes: {auto: 2000000000}\n", "bytes.yaml")
    fails(cli("plan", in_bytes, "--set", "memory.cudagraph_gib.auto=3"),
          "error: memory.cudagraph_gib.auto: the recipe gives cudagraph as cudagraph_bytes")
    assert cli("plan", in_bytes, "--set", "memory.cudagraph_gib=null").exit_code == 0  # null: the estimate


def test_a_memory_key_with_a_line_break_is_an_unknown_term(tmp_path):
    # A memory key holding a line break ("a\nb") crashed the term's pattern (AttributeError) instead of being refused.
    fails(cli("plan", write(tmp_path, BASE + 'memory: {"a\\nb_gib": 1}\n')),
          "error: memory.'a\\nb_gib': unknown memory term; expected one of weights_gib, peak_activation_gib, "
          "non_torch_gib, cudagraph_gib, indexer_headroom_gib, unprofiled_gib (or _bytes)")


@pytest.mark.parametrize("command", [["verify", SEED, "--gpu"], ["calibrate", RTX]])
def test_verify_and_calibrate_offer_only_the_formats_they_take(capsys, command):
    # `verify --help` and `calibrate --help` offered markdown and csv, then rejected them.
    code, out, _ = main_run(capsys, command[0], "--help")
    assert code == 0 and "<table|json>" in out and "markdown" not in out and "csv" not in out
    code, _, err = main_run(capsys, *command, "-f", "csv")
    assert code == 2
    one_line(err, "error: --format: 'csv' is not one of 'table', 'json'")


# Output a person reads ----------------------------------------------------------------------------------------------

def figures(text: str, *numbers: int) -> None:
    """No figure cut: none of rich's ellipses, and every number whole (thousands separated) in the text."""
    assert "…" not in text, text
    for number in numbers:
        assert f"{number:,}" in text, (number, text)


def test_plan_at_80_columns_cuts_no_figure():
    # In a pipe, at 80 columns, plan's table cut `1,049,0…` and `36,637,…`.
    data = json.loads(cli("plan", SEED, "-f", "json").output)
    text = cli("plan", SEED, env={"COLUMNS": "80"}).output
    figures(text, *(b["kv_cache_tokens"] for b in data["backends"] if b["available"]),
            *(b["decode_logits"]["padded_columns"] for b in data["backends"] if b["available"]))


def test_models_and_gpus_in_a_pipe_cut_no_name():
    # `models | cat` cut every model name.
    done = child("models")
    assert done.returncode == 0, done.stderr
    figures(done.stdout, *(m.max_position_embeddings for m in MODELS))
    for model in MODELS:
        assert re.search(rf"(^|\s){re.escape(model.name)}(\s|;|$)", done.stdout, re.M), model.name
    gpus = cli("gpus", env={"COLUMNS": "80"}).output
    figures(gpus, 191_502_483_456)  # B200's bytes


@pytest.mark.parametrize("varies", [["max-num-seqs=64:256:64"],
                                    ["max-num-seqs=64,128", "speculative-config.num_speculative_tokens=0,5"],
                                    ["engine=vllm,deepinfer", "memory.cudagraph_gib.deep_select=100,12.5"]])
def test_sweep_table_at_80_columns_cuts_no_figure(varies):
    # A sweep table at 80 columns cut `persist…` and the KV tokens.
    args = [a for vary in varies for a in ("--vary", vary)]
    rows = [json.loads(line) for line in cli("sweep", SEED, *args, "-f", "jsonl").stdout.splitlines()]
    text = cli("sweep", SEED, *args, env={"COLUMNS": "80"}).output
    figures(text, *(row["kv_cache_tokens"] for row in rows if row.get("available")))
    for backend in {row["backend"] for row in rows}:
        assert backend in text


@pytest.mark.parametrize("spec", [None, 3])
def test_recommend_at_80_columns_cuts_no_figure(spec):
    # The recommendation table cut `deep_sele…` and `max-num-s…` at 80 columns.
    args = ["--target-concurrency", 64, "--min-kv-tokens", 1_000_000] + (["--max-spec-tokens", spec] if spec else [])
    wide = cli("recommend", SEED, *args, env={"COLUMNS": "250"}).output
    text = cli("recommend", SEED, *args, env={"COLUMNS": "80"}).output
    figures(text, *(int(n.replace(",", "")) for n in re.findall(r"\b\d{1,3}(?:,\d{3})+\b", wide)))
    for backend in ("deep_select", "persistent", "cooperative", "flashinfer"):
        assert backend in text


def test_calibrate_at_80_columns_cuts_no_figure():
    result = cli("calibrate", RTX, "--set", "gpu=B200", env={"COLUMNS": "80"})
    figures(result.output, 1_993_100)


@pytest.mark.parametrize("fixture", ["h200-builtin.json", "h200-v41-as-local-oom.json"])
def test_verify_table_at_80_columns_cuts_no_figure(fixture):
    report = json.loads((Path(__file__).parent / "fixtures" / "verify" / fixture).read_text())
    console = Console(file=io.StringIO(), width=80)
    verify_render.render_table(report, console)
    checks = [c for shape in report["shapes"] for b in shape["backends"] for c in b["checks"]]
    figures(console.file.getvalue(), *(c[side] for c in checks for side in ("predicted", "measured")
                                       if isinstance(c[side], int) and not isinstance(c[side], bool)))


@pytest.mark.parametrize("args, key", [
    (["plan", SEED, "--bogus"], "--bogus: no such option"),
    (["plan", "--forma", "json", SEED], "--forma: no such option (did you mean --format, --command?)"),
    (["plan", SEED, "-f", "xml"], "--format: 'xml' is not one of 'table', 'json', 'markdown', 'csv'"),
    (["plan", SEED, "--format"], "--format: requires an argument"),
    (["plan"], "recipe: missing"),
    (["recommend", SEED, "--min-kv-tokens", 1], "--target-concurrency: missing"),
    (["recommend", SEED, "--target-concurrency", "x", "--min-kv-tokens", 1], "--target-concurrency: "),
    (["bogus"], "dsa-kvcalc: no such command 'bogus'"),
    (["plan", SEED, "extra"], "dsa-kvcalc plan: got unexpected extra argument"),
])
def test_usage_errors_are_one_short_line(capsys, args, key):
    # Typer's boxed usage errors took 5 to 6 lines, in another style than every other error.
    code, out, err = main_run(capsys, *args)
    assert code == 2 and out == ""
    line = one_line(err, f"error: {key}")
    assert line.endswith("--help)") and "╭" not in line


def test_no_arguments_print_the_help(capsys):
    code, out, err = main_run(capsys)
    assert code == 0 and out.startswith("Usage: dsa-kvcalc") and err == ""


def test_the_schema_validates_every_bundled_recipe_and_rejects_wrong_types():
    # `dsa-kvcalc schema` emitted properties that refer to themselves: any validator recursed forever.
    schema = json.loads(cli("schema").output)
    assert schema == json.loads(json.dumps(json_schema())) and "$ref" not in json.dumps(schema)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    bundled = sorted(RECIPES.glob("*.yaml")) + sorted((ROOT / "dsa_kvcalc" / "recipes").glob("*.yaml"))
    assert bundled
    for path in bundled:
        assert list(validator.iter_errors(yaml.safe_load(path.read_text()))) == [], path
    base = yaml.safe_load(BASE)
    for documented in [{"max-model-len": "auto"}, {"max-model-len": -1}, {"deepgemm": 2.8}, {"max_num_seqs": 8},
                       {"memory": {"cudagraph_gib": {"auto": 18.4}, "gpu": "B200"}}, {"host": "0.0.0.0"}]:
        assert list(validator.iter_errors(base | documented)) == [], documented
    for wrong in [{"max-num-seqs": "many"}, {"enforce-eager": "yes"}, {"model": 3}, {"gpu-memory-utilization": 2},
                  {"memory": {"weights_gib": "x"}}, {"memory": {"cudagraph_gib": {"fastest": 1}}},
                  {"max-num-seq": 8}, {"speculative-config": {"num_speculative_tokens": 1.5}}]:
        assert list(validator.iter_errors(base | wrong)), wrong


# Property tests: hostile inputs of every kind -----------------------------------------------------------------------

SNIPPETS = [".nan", ".inf", "-.inf", "1e400", "-1e400", "-1", "0", "1", "3", "64", "auto", "128k", "1M", "2.5K", "1k",
            "null", "~", "''", "yes", "no", "true", "0x10", "0o17", "1_000", "9" * 30, "1" + "0" * 300, "-0.0",
            "1e-400", "0.92", "1.5", "[1, 2, [3]]", "[]", "{}", "{a: 1}", "{auto: 3, deep_select: .nan}",
            "'{\"num_speculative_tokens\": 2}'", "'{broken'", "2001-13-45", "2001-12-25", "12:30:00", "!!binary AAAA",
            "!!python/object:os.system x", "!!str 3", "!!float x", "&anchor [1, 2]", "*anchor", "*nowhere",
            "[" * 400 + "]" * 400, "'" + "x" * 3000 + "'", "fp8", "H200", "B200", "deep_select", "DeepSeek-V3.2",
            "mtp", "FULL", "2.8", "2.6.1", "0.20.0", "'a[/b]'", "\"\\t\"", "'1; rm -rf /'"]
TOP_KEYS = ["model", "gpu", "max-num-seqs", "max_num_seqs", "max-model-len", "max-num-batched-tokens",
            "tensor-parallel-size", "data-parallel-size", "decode-context-parallel-size", "gpu-memory-utilization",
            "kv-cache-memory-bytes", "kv-cache-dtype", "deepgemm", "engine", "vllm-version",
            "sparse-indexer-topk-backend", "enforce-eager", "enable-expert-parallel", "host", "hf-overrides",
            "speculative-config", "compilation-config", "env", "memory", "max-num-seq", "1", "2.5", "true", "null",
            "2001-01-01", "'a.b'", "''"]
NESTED = {"speculative-config": ["num_speculative_tokens", "method", "model", "bogus"],
          "compilation-config": ["cudagraph_mode", "max_cudagraph_capture_size", "cudagraph_capture_sizes", "level"],
          "env": ["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", "OTHER"],
          "memory": ["weights_gib", "weights_bytes", "peak_activation_gib", "non_torch_bytes", "cudagraph_gib",
                     "cudagraph_bytes", "indexer_headroom_gib", "gpu", "bogus_gib", "1"]}
DOTTED = TOP_KEYS + [f"{top}.{inner}" for top, inners in NESTED.items() for inner in inners] + [
    "memory.cudagraph_gib.auto", "memory.cudagraph_gib.deep_select", "memory.indexer_headroom_gib.bogus",
    "memory..x", ".x", "max-num-seqs.x", "Memory.weights_gib", ""]
BASES = [BASE, V4, SEED.read_text()]

snippet = st.one_of(st.sampled_from(SNIPPETS), st.integers(-2 ** 80, 2 ** 80).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr).map(
                        lambda r: {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}.get(r, r)),
                    st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12).map(json.dumps))


SANE = {"max-num-seqs": ["64", "256"], "max_num_seqs": ["128"], "max-model-len": ["auto", "-1", "32k", "65536"],
        "max-num-batched-tokens": ["8192", "16k"], "tensor-parallel-size": ["8"], "data-parallel-size": ["1"],
        "decode-context-parallel-size": ["1"], "gpu-memory-utilization": ["0.9", "0.95"], "kv-cache-dtype": ["fp8"],
        "kv-cache-memory-bytes": ["null"], "deepgemm": ["2.8", "'2.6.1'"], "engine": ["vllm", "deepinfer"],
        "vllm-version": ["null"], "sparse-indexer-topk-backend": ["deep_select", "auto"], "enforce-eager": ["false"],
        "enable-expert-parallel": ["true"], "host": ["0.0.0.0"], "hf-overrides": ["{rope_scaling: null}"],
        "speculative-config": ["{num_speculative_tokens: 1, method: mtp}"], "compilation-config": ["{level: 3}"],
        "env": ["{VLLM_SPARSE_INDEXER_MAX_LOGITS_MB: 256}"], "memory": ["null"], "num_speculative_tokens": ["2"],
        "method": ["mtp"], "model": ["DeepSeek-V3.2"], "cudagraph_mode": ["PIECEWISE"],
        "max_cudagraph_capture_size": ["512"], "cudagraph_capture_sizes": ["[1, 2, 4]"], "level": ["3"],
        "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": ["1024"], "OTHER": ["1"], "weights_gib": ["40.5"],
        "peak_activation_gib": ["5"], "non_torch_bytes": ["2000000000"], "indexer_headroom_gib": ["0.5"],
        "cudagraph_gib": ["{auto: 30, deep_select: 30}"], "gpu": ["H200"]}


def value_for(draw, key: str) -> str:
    """Mostly what the key takes (so that plans run and files get written), often something hostile."""
    sane = SANE.get(key.rsplit(".", 1)[-1])
    return draw(st.sampled_from(sane)) if sane and draw(st.integers(0, 2)) else draw(snippet)


@st.composite
def hostile_recipes(draw) -> str:
    """A bundled or minimal recipe, then lines of odd keys and values: duplicates, NaN and infinities, huge numbers,
    non-string keys, tags, aliases, deep nesting, mappings where scalars belong."""
    lines = [draw(st.sampled_from(BASES))]
    for key in draw(st.lists(st.sampled_from(TOP_KEYS), max_size=draw(st.sampled_from([0, 0, 2, 4])))):
        if key in NESTED and draw(st.booleans()):
            inner = draw(st.lists(st.sampled_from(NESTED[key]), min_size=1, max_size=3))
            lines.append(f"{key}:" + "".join(f"\n  {name}: {value_for(draw, name)}" for name in inner))
        else:
            lines.append(f"{key}: {value_for(draw, key)}")
    return "\n".join(lines) + "\n"


def range_spec(draw) -> str:
    kind = draw(st.sampled_from(["small", "decimal", "huge", "junk"]))
    if kind == "small":  # few values: a sweep that runs
        start, step = draw(st.integers(-2, 2000)), draw(st.integers(-1, 300))
        return f"{start}:{start + step * draw(st.integers(0, 6))}:{step}"
    if kind == "decimal":
        return draw(st.sampled_from(["0.90:0.97:0.01", "0.5:1:0.25", "1k:2k:0.5k", "1:3:1.0", "0.1:0.1:0.1"]))
    if kind == "huge":  # over the limit: refused at once
        return draw(st.sampled_from(["1:1e12:1", "1:1e30:1", "0:1:1e-13", "1:1000001:1", "-1e18:1e18:1",
                                     "1:1e999999:1", "0:1e18:0.000000000001"]))
    return draw(st.sampled_from(["1:2", "1:2:3:4", "a:b:c", "nan:1:1", "1:inf:1", "3:1:1", "1:3:0", "1:3:-1", ":",
                                 "1::1", "1e400:1e401:1"]))


VARIED = ["max-num-seqs", "gpu-memory-utilization", "max-model-len", "engine",
          "speculative-config.num_speculative_tokens", "memory.weights_gib", "memory.cudagraph_gib.auto",
          "kv-cache-dtype", "host", "bogus", "memory.x_gib"]


@st.composite
def varies(draw) -> list[str]:
    found = []
    for key in draw(st.lists(st.sampled_from(VARIED), min_size=draw(st.sampled_from([0, 1, 1, 1])), max_size=2)):
        values = st.lists(st.builds(value_for, st.just(draw), st.just(key)), min_size=1, max_size=3)
        spec = range_spec(draw) if draw(st.booleans()) else ",".join(draw(values))
        found.append(f"{key}={spec}")
    return found


TARGETS = ["stdout", "new", "existing", "private", "symlink", "dangling", "missing folder", "folder", "/dev/null",
           "the recipe", "a hard link to the recipe", "the log"]


def target(folder: Path, recipe: Path, log: Path, kind: str, suffix: str = ".csv") -> Path | None:
    """An output target of the given kind, in a folder prepared by make_targets."""
    if kind == "stdout":
        return None
    paths = {"new": folder / f"out{suffix}", "existing": folder / "old.csv", "private": folder / "private",
             "symlink": folder / "link.csv", "dangling": folder / "dangling", "missing folder": folder / "no" / "x",
             "folder": folder / "dir", "/dev/null": Path("/dev/null"), "the recipe": recipe,
             "a hard link to the recipe": folder / "hard.yaml", "the log": log}
    return paths[kind]


def make_targets(folder: Path, recipe: Path) -> None:
    write(folder, "old\n", "old.csv")
    write(folder, "old\n", "private").chmod(0o600)
    write(folder, "old\n", "real.csv")
    (folder / "link.csv").symlink_to("real.csv")
    (folder / "dangling").symlink_to("gone/x")
    (folder / "dir").mkdir()
    os.link(recipe, folder / "hard.yaml")


@st.composite
def invocations(draw):
    """(command line with {recipe}/{log}/{out}/{plot} placeholders, recipe text, output kind, plot kind)."""
    command = draw(st.sampled_from(["plan", "plan", "plan", "sweep", "sweep", "recommend", "calibrate", "schema"]))
    keys = draw(st.lists(st.sampled_from(DOTTED), max_size=draw(st.sampled_from([0, 0, 1, 2]))))
    sets = [f"{key}={value_for(draw, key)}" if draw(st.integers(0, 5)) else
            draw(st.sampled_from(["=", "max-num-seqs", "=3", "a=", " = "])) for key in keys]
    set_args = [a for s in sets for a in ("--set", s)]
    out, plot = draw(st.sampled_from(TARGETS)), None
    if command == "plan":
        args = ["plan", "{recipe}", *set_args, "-f", draw(st.sampled_from(["table", "json", "csv", "markdown"]))]
        args += draw(st.sampled_from([[], ["--explain"]]))
    elif command == "sweep":
        args = ["sweep", "{recipe}", *(a for v in draw(varies()) for a in ("--vary", v))]
        args += [a for b in draw(st.lists(st.sampled_from(["auto", "deep_select", "aiter", "fastest"]), max_size=2))
                 for a in ("--backend", b)]
        args += draw(st.sampled_from([[], ["-f", "csv"], ["-f", "jsonl"], ["-f", "table"]]))
        plot = draw(st.sampled_from([None] * len(TARGETS) + TARGETS[1:]))
    elif command == "recommend":
        numbers = st.sampled_from([64, 1, 0, -1, 10 ** 30, 1_000_000])
        args = ["recommend", "{recipe}", "--target-concurrency", draw(numbers), "--min-kv-tokens", draw(numbers)]
        args += draw(st.sampled_from([[], ["--max-spec-tokens", 2], ["--max-spec-tokens", 65], ["--backend", "auto"]]))
        out = "stdout"
    elif command == "calibrate":
        args = ["calibrate", "{log}", *draw(st.sampled_from([[], ["--recipe", "{recipe}"]])), "--set", "gpu=B200",
                *set_args, *draw(st.sampled_from([[], ["-f", "json"]]))]
    else:
        args = ["schema"]
    if out != "stdout":
        args += ["-o", "{out}"]
    if plot:
        args += ["--plot", "{plot}"]
    return args, draw(hostile_recipes()), out, plot


def check_run(folder: Path, inputs: list[Path], code: int, stderr: str, before: dict) -> None:
    """The contract of every run: exit 0-4; on 2 one line `error: ...`, and on 4 (vLLM would refuse the recipe: plan
    writes its answer, then says why) too; on failure nothing touched; on success the inputs, links and modes kept and
    no temporary left behind."""
    assert code in (0, 1, 2, 3, 4), stderr
    assert "Traceback" not in stderr
    if code in (2, 4):
        one_line(stderr, "error: ")
    after = state(folder, "/dev/null")
    if code not in (0, 4):
        assert after == before, stderr
        return
    for path, (kind, *_) in before.items():
        if stat.S_ISLNK(kind) or Path(path) in inputs:
            assert after[path][:4] == before[path][:4], path  # type, mode, owner, content or link target
    assert stat.S_IMODE(os.stat(folder / "private").st_mode) == 0o600
    assert hidden(folder) == []


def fill(args: list, **paths) -> list[str]:
    return [str(paths[a[1:-1]]) if isinstance(a, str) and a[1:-1] in paths else str(a) for a in args]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))  # cli() bounds the CPU
@given(invocations())
def test_hostile_input_in_process_ends_in_0_to_4_with_one_line_and_harms_nothing(invocation):
    args, text, out, plot = invocation
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        recipe, log = write(folder, text), write(folder, RTX.read_text(), "startup.log")
        make_targets(folder, recipe)
        paths = {"recipe": recipe, "log": log, "out": target(folder, recipe, log, out),
                 "plot": plot and target(folder, recipe, log, plot, ".png")}
        before = state(folder, "/dev/null")
        result = cli(*fill(args, **paths))
        inputs = [paths[name] for name in ("recipe", "log") if f"{{{name}}}" in args]
        check_run(folder, inputs, result.exit_code, result.stderr, before)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before  # KiB
    assert grown < 512 << 10, f"memory grew by {grown >> 10} MiB"


USAGE_JUNK = [["--bogus"], ["-f"], ["-f", "xml"], ["--set"], ["--vary"], ["--target-concurrency", "x"], ["extra"],
              ["--max-spec-tokens", "-5"], ["--output"], ["--explain=3"], ["--help"], []]


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["plan", "sweep", "recommend", "calibrate", "verify", "models", "nonsense"]),
       st.sampled_from(USAGE_JUNK), hostile_recipes(), st.sampled_from(TARGETS))
def test_hostile_command_lines_through_the_console_script(command, junk, text, out):
    # main() is what the console script runs: usage errors from typer become one line there, not under CliRunner.
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        recipe, log = write(folder, text), write(folder, RTX.read_text(), "startup.log")
        make_targets(folder, recipe)
        first = {"calibrate": log, "models": None, "nonsense": None}.get(command, recipe)
        path = target(folder, recipe, log, out)
        args = [command, *([first] if first else []), *junk, *(["-o", path] if path else [])]
        before = state(folder, "/dev/null")
        started = time.monotonic()
        done = child(*args)
        assert time.monotonic() - started < CHILD_SECONDS, args
        check_run(folder, [p for p in (first,) if p], done.returncode, done.stderr, before)


# Thousands of generated recipes, valid and broken: each ends in a plan or one clean error, never a traceback ----------

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
        plan = planning.plan(load(raw))
    except RecipeError as error:
        assert error.key and str(error).count("\n") == 0
        return
    data = report.plan_json(plan)
    for backend in data["backends"]:
        if backend["available"]:
            assert backend["kv_cache_tokens"] >= 0 and backend["reserved_bytes"] >= backend["prefill_budget_bytes"] \
                or plan.recipe.engine.profile_holds_decode_logits




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


def test_a_swept_value_that_yaml_decodes_to_a_surrogate_is_refused_in_one_line():
    # found by the hostile-input fuzz test: "\ud800\udc00" in double quotes is a YAML escape that decodes to two lone
    # surrogates, which no UTF-8 terminal can print; the sweep's table raised UnicodeEncodeError on its error row
    fails(cli("sweep", SEED, "--vary", 'memory.cudagraph_gib.auto="\\ud800\\udc00"'), "--vary", "not UTF-8 text")
