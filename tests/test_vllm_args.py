"""The `vllm serve` line both ways. In: a launch script of every bundled recipe, written by hand from the recipe's
own source, plans to the recipe's figures; every spelling vLLM's parser takes reads the same. Out: plan --format
serve (and vllm-config) plans back to the same figures, and vLLM's own parser of the release (marked vllm_oracle,
run on a CPU from the release's Python files) accepts it with the same values.

The oracle tests need the Python and the releases' files that oracle/setup.sh sets up (docs/validation.md, "vLLM's
own code"; VLLM_ORACLE_PYTHON and VLLM_ORACLE_RELEASES point elsewhere):
    bash oracle/setup.sh && .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_args.py
(VLLM_ORACLE_RELEASE=0.33.0,0.29.0 checks more releases, about 15 s each)."""

import functools
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import RECIPES, ROOT, fails, run
from dsa_kvcalc import launch_script, vllm_args, vllm_cli
from dsa_kvcalc.keys import KEYS, RecipeError
from dsa_kvcalc.recipe import load, read_command

GPU = {"deepseek-v3.2-8xb200-tp8": "B200", "deepseek-v3.2-8xh200-tp8": "H200", "deepseek-v4-flash-4xh200-dep4": "H200",
       "deepseek-v4.1-flash-4xb200-dep4": "B200", "glm-5-8xb200-tp8": "B200"}
# Each bundled recipe as a launch script, from the recipe's own source (its header comment, or the seed's text), in
# the spellings vLLM takes: aliases, --flag=value, underscores, JSON, dotted keys, shorthands, env prefixes, exports.
SCRIPTS = {
    "deepseek-v3.2-8xh200-tp8": "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 --tokenizer-mode deepseek_v32 "
                                "--tool-call-parser deepseek_v32 \\\n  --enable-auto-tool-choice --reasoning-parser "
                                "deepseek_v3\n",
    "deepseek-v3.2-8xb200-tp8": "#!/bin/sh\nset -e\nexec vllm serve deepseek-ai/DeepSeek-V3.2 --tensor_parallel_size=8 "
                                "--kv_cache_dtype fp8 \\\n    --speculative-config '{\"method\": \"mtp\", "
                                "\"num_speculative_tokens\": 1}' --tokenizer-mode=deepseek_v32 > serve.log 2>&1\n",
    "deepseek-v4-flash-4xh200-dep4": "export VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=512 HF_HOME=/models\n"
                                     "vllm serve --model deepseek-ai/DeepSeek-V4-Flash -dp 4 --enable-expert-parallel "
                                     "--max-model-len 1048576 \\\n  --max-num-seqs 128 --kv-cache-dtype fp8 "
                                     "-sc '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}' "
                                     "--tokenizer-mode deepseek_v4 &\n",
    "deepseek-v4.1-flash-4xb200-dep4": "VLLM_LOGGING_LEVEL=DEBUG vllm serve deepseek-ai/DeepSeek-V4.1-Flash "
                                       "--max-num-seqs 256 --max-model-len 1M --max-num-batched-tokens 8K \\\n"
                                       "  -dp 4 -ep --gpu-memory-utilization 0.97 --kv-cache-dtype fp8 "
                                       "--spec-method dspark --spec-tokens 5 \\\n  -ac.indexer_kv_dtype mxfp4 "
                                       "-ac.indexer_sparse_logits true -cc.cudagraph_mode FULL_AND_PIECEWISE "
                                       "-cc.max_cudagraph_capture_size=1536\n",
    "glm-5-8xb200-tp8": "vllm serve zai-org/GLM-5-FP8 -tp 8 --kv-cache-dtype fp8 --speculative-config.method mtp "
                        "\\\n    --speculative-config.num_speculative_tokens 3 --tool-call-parser glm47 "
                        "--reasoning-parser glm45 --enable-auto-tool-choice\n",
}
BUNDLED = sorted(RECIPES.glob("*.yaml"))


def memory_sets(recipe: Path) -> list[str]:
    """A recipe's measured memory block as --set, which no serve line can hold (measured on the recipe's GPU)."""
    raw = yaml.safe_load(recipe.read_text())
    return ["--set", f"memory={json.dumps(raw['memory'] | {'gpu': raw['gpu']})}"] if "memory" in raw else []


def planned(*args) -> dict:
    result = run("plan", *args, "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def figures(data: dict) -> tuple:
    return data["recipe"], data["backends"]


@pytest.mark.parametrize("recipe", BUNDLED, ids=lambda p: p.stem)
def test_a_launch_script_plans_like_its_recipe(tmp_path, recipe):
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPTS[recipe.stem])
    assert figures(planned(script, "--set", f"gpu={GPU[recipe.stem]}", *memory_sets(recipe))) == \
        figures(planned(recipe))


@pytest.mark.parametrize("recipe", BUNDLED, ids=lambda p: p.stem)
def test_the_serve_line_plans_back_to_the_same_figures(tmp_path, recipe):
    out = tmp_path / "serve.sh"
    assert run("plan", recipe, "-o", out).exit_code == 0  # .sh: the serve format
    header = " ".join(line[2:] for line in out.read_text().splitlines() if line.startswith("# "))
    again = shlex.split(header.split("plan it again: dsa-kvcalc plan FILE ", 1)[1])
    assert figures(planned(out, *again)) == figures(planned(recipe))
    config = tmp_path / "serve.yaml"
    assert run("plan", recipe, "-o", config).exit_code == 0  # .yaml: vllm-config
    assert yaml.safe_load(config.read_text())["model"] == planned(recipe)["model"]["name"]


GLM = "vllm serve zai-org/GLM-5-FP8 -tp 8 --kv-cache-dtype fp8 -sc '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'"
SPELLINGS = [  # each is GLM as vLLM's parser reads it
    GLM,
    "vllm serve zai-org/GLM-5-FP8 --tensor_parallel_size=8 --kv_cache_dtype=fp8 --spec-method mtp --spec-tokens 3",
    "vllm serve -tp=8 --model zai-org/GLM-5-FP8 --kv-cache-dtype fp8 --speculative-config.method=mtp "
    "--speculative_config.num_speculative_tokens 3",
    "python3 -m vllm.entrypoints.openai.api_server --model=zai-org/GLM-5-FP8 -tp 8 --kv-cache-dtype fp8 "
    "-sc.method mtp -sc.num_speculative_tokens=3 --no-enable-expert-parallel --async-scheduling",
    # a whole JSON argument is replaced by its dotted keys, which vLLM passes after it
    "vllm serve zai-org/GLM-5-FP8 -tp 8 --kv-cache-dtype fp8 -sc '{\"num_speculative_tokens\": 9}' "
    "-sc.method mtp -sc.num_speculative_tokens 3",
]


@pytest.mark.parametrize("line", SPELLINGS)
def test_every_spelling_reads_the_same(line):
    assert load(read_command(line, ["gpu=B200"])).resolved() == load(read_command(GLM, ["gpu=B200"])).resolved()


@pytest.mark.parametrize("line, problem", [
    ("vllm serve X -tp eight", "error: -tp: expected a whole number, got 'eight'"),
    ("vllm serve X --enforce-eager=true", "error: --enforce-eager: takes no value"),
    ("vllm serve X --max-num-seqs", "error: --max-num-seqs: expects a value"),
    ("vllm serve X --gpu B200", "error: --gpu: not a vLLM argument: give it with --set gpu=..."),
    ("vllm serve X --bogus 1", "error: --bogus: not a vLLM argument: no vLLM release from 0.19.0 to 0.33.0 has it"),
    ("vllm serve X -sc '{\"method\": \"mtp\"", "error: command: line 1: no closing quotation"),
    ("echo vllm serve X", "error: command: no vllm serve (or docker run of vLLM's OpenAI image"),
    ("vllm serve X A", "error: command: unexpected argument 'A'"),
    ("vllm serve X --spec-tokens 3 -sc '{\"num_speculative_tokens\": 2}'",
     "error: --spec-tokens: and --speculative-config's num_speculative_tokens exclude each other"),
])
def test_a_bad_line_is_one_error_naming_the_argument(line, problem):
    fails(run("plan", "--command", line, "--set", "gpu=B200"), problem)


def test_a_serve_line_needs_its_gpu_from_set():
    fails(run("plan", "--command", GLM), "error: gpu: missing: a vllm serve line does not name its GPU")
    fails(run("plan"), "error: recipe: missing: a recipe file or launch script, or --command")


def test_other_commands_take_a_launch_script(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPTS["glm-5-8xb200-tp8"])
    sets = ["--set", "gpu=B200"]
    rows = run("sweep", script, *sets, "--vary", "max-num-seqs=64,128", "--format", "jsonl")
    assert rows.exit_code == 0 and len(rows.output.splitlines()) == 2 * 6  # every backend but aiter (ROCm) on B200
    assert run("fit", script, *sets, "--format", "json").exit_code == 0
    pick = run("recommend", script, *sets, "--target-concurrency", 64, "--min-kv-tokens", 1000, "-f", "serve")
    assert pick.exit_code == 0 and "vllm serve zai-org/GLM-5-FP8" in pick.output


# vLLM's own parser ---------------------------------------------------------------------------------------------

ORACLE_HOME = Path(os.environ.get("DSA_KVCALC_ORACLE_HOME", Path.home() / ".cache" / "dsa-kvcalc-oracle"))
ORACLE_PYTHON = Path(os.environ.get("VLLM_ORACLE_PYTHON", ORACLE_HOME / "venv" / "bin" / "python"))
ORACLE_RELEASES = Path(os.environ.get("VLLM_ORACLE_RELEASES", ORACLE_HOME / "releases"))
RELEASES = os.environ.get("VLLM_ORACLE_RELEASE", "0.33.0").split(",")


def importable(release: str) -> bool:
    return ORACLE_PYTHON.exists() and (ORACLE_RELEASES / release / "vllm" / "__init__.py").exists()


oracle_releases = pytest.mark.parametrize("release", [
    pytest.param(r, marks=[pytest.mark.vllm_oracle,
                           pytest.mark.skipif(not importable(r), reason=f"no importable vLLM {r} (see module doc)")])
    for r in RELEASES])


@functools.cache
def oracle(release: str, cases: str) -> list[dict]:
    """vLLM's parser of the release on the cases (JSON text), in one process."""
    done = subprocess.run([str(ORACLE_PYTHON), str(ROOT / "tests" / "vllm_parser.py"), str(ORACLE_RELEASES / release)],
                          input=cases, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def serve_words(text: str) -> tuple[dict, list[str]]:
    """A serve line's environment and the words after `vllm serve`, as a shell splits them."""
    lines = text.replace("\\\n", " ").splitlines()  # a backslash at the end of a line continues it
    words = shlex.split("\n".join(line for line in lines if not line.startswith("#")))
    env = dict(w.split("=", 1) for w in words[:words.index("vllm")])
    return env, words[words.index("vllm") + 2:]


# The config objects' fields that are recipe keys
CONFIG_KEYS = {top: [k.name.split(".")[1] for k in KEYS.values() if k.name.startswith(top + ".")]
               for top in ("compilation-config", "attention-config")}


def from_namespace(namespace: dict, defaults: dict) -> dict:
    """What vLLM's parser read, as a raw recipe: the keys it holds that are not its defaults, the shorthands merged
    as vLLM merges them (EngineArgs.create_speculative_config, create_engine_config)."""
    raw = {"model": namespace["model_tag"] or namespace["model"]}
    for k in KEYS.values():
        dest = k.name.replace("-", "_")
        if "." not in k.name and k.kind != "model" and dest in namespace and namespace[dest] != defaults[dest]:
            raw[k.name] = namespace[dest]
    speculative = dict(namespace["speculative_config"] or {})
    for key, dest in (("method", "spec_method"), ("model", "spec_model"), ("num_speculative_tokens", "spec_tokens")):
        if namespace.get(dest) is not None:
            speculative[key] = namespace[dest]
    configs = {top: {inner: namespace[dest].get(inner) for inner in keys
                     if namespace[dest].get(inner) != defaults[dest].get(inner)}
               for top, keys in CONFIG_KEYS.items() for dest in [top.replace("-", "_")]}
    for key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size"):
        if namespace.get(key) is not None:
            configs["compilation-config"][key] = namespace[key]
    return raw | ({"speculative-config": speculative} if speculative else {}) | {
        top: mapping for top, mapping in configs.items() if mapping}


def as_planned(raw: dict, gpu: str, release: str, env: dict) -> dict:
    """The recipe as planned, but for the memory block, which is no vLLM argument."""
    resolved = load({k: v for k, v in raw.items() if k != "memory"} | {"gpu": gpu, "vllm-version": release,
                                                                       "env": env}).resolved()
    return resolved | {"memory": None}


@oracle_releases
def test_vllms_parser_takes_the_serve_line_of_every_bundled_recipe_with_the_same_values(tmp_path, release):
    lines, configs = {}, {}
    for recipe in BUNDLED:
        lines[recipe.stem] = run("plan", recipe, "--set", f"vllm-version={release}", "-f", "serve").stdout
        configs[recipe.stem] = tmp_path / f"{recipe.stem}.yaml"
        assert run("plan", recipe, "--set", f"vllm-version={release}", "-o", configs[recipe.stem]).exit_code == 0
    cases = [{"argv": ["x"]}] + [{"argv": serve_words(lines[r.stem])[1]} for r in BUNDLED] + [
        {"config": str(configs[r.stem])} for r in BUNDLED]
    defaults, *parsed = oracle(release, json.dumps(cases))
    for recipe, line, config in zip(BUNDLED, parsed, parsed[len(BUNDLED):]):
        assert "error" not in line and "error" not in config, (recipe.stem, line, config)
        env = serve_words(lines[recipe.stem])[0]
        expected = as_planned(yaml.safe_load(recipe.read_text()), GPU[recipe.stem], release, env)
        for namespace in (line["namespace"], config["namespace"]):
            assert as_planned(from_namespace(namespace, defaults["namespace"]), GPU[recipe.stem], release, env) \
                == expected, recipe.stem


@oracle_releases
def test_vllms_parser_reads_every_spelling_as_dsa_kvcalc_does(release):
    lines = SPELLINGS + [SCRIPTS[name] for name in sorted(SCRIPTS)] + [
        "vllm serve zai-org/GLM-5-FP8 -tp 8 --disable-expert-parallel --no-async-scheduling --enforce-eager "
        "--max-model-len 128k --kv-cache-memory-bytes 40G --sparse-indexer-topk-backend DEEP-select",
        "vllm serve zai-org/GLM-5-FP8 -tp 4 -dcp 2 --max-num-batched-tokens 8K --cudagraph-capture-sizes 1 2 4 8 "
        "--compilation-config '{\"cudagraph_mode\": \"full_decode_only\"}' --served-model-name a b --port 8000"]
    cases = [{"argv": ["x"]}] + [{"argv": [w.text for w in launch_script.servers(line)[0].args]} for line in lines]
    defaults, *parsed = oracle(release, json.dumps(cases))
    for line, result in zip(lines, parsed):
        if "error" in result:  # an argument of another release: dsa-kvcalc reads the release's and refuses it too
            with pytest.raises(RecipeError):
                read_command(line, ["gpu=B200", f"vllm-version={release}"])
            continue
        mine = read_command(line, ["gpu=B200", f"vllm-version={release}"])
        theirs = from_namespace(result["namespace"], defaults["namespace"])
        assert resolved(theirs, "B200", release, mine.get("env", {})) == \
            resolved(mine, "B200", release, mine.get("env", {})), line


@oracle_releases
def test_the_argument_tables_are_the_releases(release):
    """vllm_cli.json holds every option string of the release's serve parser, each setting the same argument with
    the same number of values (a flag none), and nothing else."""
    (options,) = oracle(release, json.dumps([{"options": True}]))
    theirs = {name: (o["dest"], o["nargs"]) for name, o in options["options"].items() if o["dest"] != "help"}
    ours = {name: (a.dest, a.nargs) for name, a in vllm_cli.arguments(release).items()}
    assert ours == theirs


COMMANDS = Path(__file__).parent / "fixtures" / "commands"
EXPECTED = yaml.safe_load((COMMANDS / "expected.yaml").read_text())
# Refusals that vLLM makes after its parser, where dsa-kvcalc makes them while reading: SpeculativeConfig forbids
# other keys when the engine config is built (vllm==0.33.0 vllm/config/utils.py ConfigDict(extra="forbid"))
LATER = ("SpeculativeConfig",)


def corpus_servers():
    """Every server the corpus's scripts start, with the words after `vllm serve` as the shell gives them."""
    for path in sorted(COMMANDS.glob("*.sh")):
        try:
            found = launch_script.servers(path.read_text())
        except RecipeError:  # the shell would not run it (tests/test_command_corpus.py)
            continue
        yield from ((path.name, server) for server in found)


@oracle_releases
def test_vllms_parser_reads_the_corpus_as_dsa_kvcalc_does(release):
    """Each real command's arguments, as the release's own parser reads them: it refuses those dsa-kvcalc refuses,
    and where it takes them, the keys that change memory hold the same values."""
    read = []
    for name, server in corpus_servers():
        try:
            read.append((name, server, vllm_args.read_server(server, release)[0], None))
        except RecipeError as error:
            read.append((name, server, None, error))
    defaults, *parsed = oracle(release, json.dumps([{"argv": ["x"]}] + [
        {"argv": [w.text for w in server.args]} for _, server, _, _ in read]))
    assert len(read) > 100
    for (name, server, mine, error), theirs in zip(read, parsed):
        if error is not None:
            assert "error" in theirs or any(later in str(error) for later in LATER), (name, str(error))
            continue
        assert "error" not in theirs, (name, theirs)
        vllm_read = from_namespace(theirs["namespace"], defaults["namespace"])
        if "model" not in mine:  # vLLM serves its default model; dsa-kvcalc asks for one
            assert vllm_read["model"] == defaults["namespace"]["model"], name
        elif "$" not in json.dumps(vllm_read):  # a value a shell variable holds: dsa-kvcalc asks for it (--set)
            env = mine.get("env", {})
            assert resolved(vllm_read, EXPECTED[name]["gpu"], release, env) == \
                resolved(mine, EXPECTED[name]["gpu"], release, env), name


def resolved(raw: dict, gpu: str, release: str, env: dict):
    """The recipe as planned on a GPU, or why it is not."""
    try:
        return as_planned(raw, gpu, release, env)
    except RecipeError as error:
        return str(error)


