"""Every command vLLM accepts is read (issue 27, items 4 and 5): every argument of the release, in the shell forms
people paste (docker run, bash -lc, a full path, python -m, variables set earlier), a prefill/decode pair side by
side, max-model-len auto fitted as vLLM fits it; and names as people write them. Expected values come from vLLM's
own parser and code (vllm_cli.json is generated from each release: tests/test_vllm_args.py checks it against the
release), the commands' sources, and hand derivations written out here."""

import json

import pytest
import yaml

from conftest import RECIPES, SEED, fails, run
from dsa_kvcalc import engine, launch_script, planning, vllm_cli
from dsa_kvcalc.names import find_gpu
from dsa_kvcalc.recipe import load_recipe
from dsa_kvcalc.render.plan import side_by_side_rows

GLM = "vllm serve zai-org/GLM-5-FP8 -tp 8"


def planned(*args, gpu: str = "B200") -> dict:
    result = run("plan", *args, "--set", f"gpu={gpu}", "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def command(line: str, *sets: str, gpu: str = "B200") -> dict:
    return planned("--command", line, *(a for s in sets for a in ("--set", s)), gpu=gpu)


def script(tmp_path, text: str, *sets: str, gpu: str = "B200") -> dict:
    path = tmp_path / "serve.sh"
    path.write_text(text)
    return planned(path, *(a for s in sets for a in ("--set", s)), gpu=gpu)


# Every argument of the release ------------------------------------------------------------------------------------

def test_the_argument_table_holds_every_release_modelled():
    assert vllm_cli.RELEASES == list(engine.RELEASES)


@pytest.mark.parametrize("arguments, ignored", [
    # the flags vLLM takes and dsa-kvcalc did not list; each changes no memory
    ("--chat-template-content-format string --nnodes 2 --node-rank 0 --headless",
     ["chat-template-content-format", "nnodes", "node-rank", "headless"]),
    ("--no-enable-flashinfer-autotune --model-loader-extra-config '{\"a\": 1}'",
     ["no-enable-flashinfer-autotune", "model-loader-extra-config"]),
    ("--reasoning-config '{\"reasoning_parser\": \"glm45\"}' --kernel-config.enable_flashinfer_autotune=False",
     ["reasoning-config", "kernel-config.enable_flashinfer_autotune"]),
])
def test_every_argument_of_the_release_is_read_or_listed_as_ignored(arguments, ignored):
    data = command(f"{GLM} {arguments}")
    assert data["ignored_keys"] == ignored


def test_an_argument_the_release_has_not_is_refused_naming_the_releases_that_have_it():
    # vllm==0.33.0 adds --disable-X for every --enable-X (EnableDisableAction, vllm/utils/argparse_utils.py:121-146)
    fails(run("plan", "--command", f"{GLM} --disable-log-requests", "--set", "gpu=B200", "--set",
              "vllm-version=0.32.0"),
          "error: --disable-log-requests: not an argument of vLLM 0.32.0: vLLM 0.33.0 has it")
    assert command(f"{GLM} --disable-log-requests")["ignored_keys"] == ["disable-log-requests"]
    fails(run("plan", "--command", f"{GLM} --sparse-indexer-topk-backend persistent", "--set", "gpu=B200", "--set",
              "vllm-version=0.29.0"), "--sparse-indexer-topk-backend: not an argument of vLLM 0.29.0: vLLM "
                                      "0.30.0 - 0.33.0 have it")
    fails(run("plan", "--command", f"{GLM} --max-num-seqz 4", "--set", "gpu=B200"),
          "error: --max-num-seqz: not a vLLM argument (did you mean --max-num-seqs?): no vLLM release")


def test_a_recipe_files_vllm_arguments_are_the_releases_too(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: GLM-5-FP8\ngpu: B200\ntensor-parallel-size: 8\nvllm-version: 0.32.0\n"
                      "disable-log-requests: true\n")
    fails(run("plan", recipe), "error: disable-log-requests: not an argument of vLLM 0.32.0: vLLM 0.33.0 has it")
    # another spelling of a flag that changes memory is read, as vLLM passes a config file's true flag as --key
    recipe.write_text("model: GLM-5-FP8\ngpu: B200\ntensor-parallel-size: 8\ndisable-expert-parallel: true\n")
    assert planned(recipe)["recipe"]["enable-expert-parallel"] is False


def test_a_command_for_an_older_vllm_is_read_as_the_newest_release_that_takes_it():
    # use_fp4_indexer_cache is an AttentionConfig field of vLLM 0.20.0 - 0.29.0 (vllm/config/attention.py); "True"
    # is what pydantic's lax mode reads as true
    data = command("vllm serve deepseek-ai/DeepSeek-V4-Flash -dp 4 -ep --kv-cache-dtype fp8 "
                   "--attention_config.use_fp4_indexer_cache True", gpu="B200")  # an MXFP4 indexer cache: SM10x
    assert data["recipe"]["vllm-version"] == "0.29.0"
    assert data["recipe"]["attention-config"]["indexer_kv_dtype"] == "mxfp4"
    assert "planned as 0.29.0, the newest release that takes every argument given" in data["summary"]["notes"][0]


def test_a_kernel_config_top_k_backend_is_read_and_the_flag_wins_over_it():
    # vllm==0.33.0 vllm/engine/arg_utils.py:2804-2805: the flag replaces the kernel config's when it is not auto
    kernel = "--kernel-config '{\"sparse_indexer_topk_backend\": \"deep_select\"}'"
    assert command(f"{GLM} {kernel}")["summary"]["backend"] == "deep_select"
    assert command(f"{GLM} {kernel} --sparse-indexer-topk-backend persistent")["summary"]["backend"] == "persistent"
    assert command(f"{GLM} {kernel} --sparse-indexer-topk-backend auto")["summary"]["backend"] == "deep_select"


def test_num_gpu_blocks_override_gives_the_blocks():
    # vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:243-247: the cache holds the blocks given. GLM-5's one group of
    # 64-token pages: at a max-model-len of whole pages, tokens = blocks / (L / 64) x L = blocks x 64
    data = command(f"{GLM} --max-model-len 65536 --num-gpu-blocks-override 2000")
    assert data["summary"]["kv_cache_tokens"] == 2000 * 64


# Shell forms -------------------------------------------------------------------------------------------------------

GLM_ARGS = "zai-org/GLM-5-FP8 --tensor-parallel-size 8 --max-num-seqs 64"


@pytest.mark.parametrize("text, sets", [
    (f"docker run --gpus all -p 8000:8000 --ipc=host -v ~/.cache:/root/.cache -e HF_TOKEN=x "
     f"vllm/vllm-openai:v0.30.0 {GLM_ARGS}", []),
    (f"docker run --gpus all --entrypoint bash vllm/vllm-openai:v0.30.0 -lc 'pip install -U transformers && "
     f"vllm serve {GLM_ARGS}'", []),
    (f"bash -lc \"vllm serve {GLM_ARGS}\"", ["vllm-version=0.30.0"]),
    (f"/opt/venv/bin/vllm serve {GLM_ARGS}", ["vllm-version=0.30.0"]),
    (f"python3 -m vllm.entrypoints.openai.api_server --model {GLM_ARGS}", ["vllm-version=0.30.0"]),
    (f"sudo -E env FOO=1 nohup vllm serve {GLM_ARGS} > serve.log 2>&1 &", ["vllm-version=0.30.0"]),
])
def test_every_way_to_start_the_server_is_read(tmp_path, text, sets):
    data = script(tmp_path, text, *sets)
    assert (data["recipe"]["vllm-version"], data["recipe"]["tensor-parallel-size"], data["recipe"]["max-num-seqs"]) \
        == ("0.30.0", 8, 64)


def test_an_image_tag_that_names_no_release_is_said(tmp_path):
    data = script(tmp_path, f"docker run --gpus all vllm/vllm-openai:latest {GLM_ARGS}")
    assert data["engine"]["version"] == engine.NEWEST_VLLM
    assert data["summary"]["notes"][0].startswith("the image vllm/vllm-openai:latest names no vLLM release")


def test_a_here_document_bash_reads_is_read(tmp_path):
    text = ("docker run --rm -i -e PORT=\"${PORT:-8000}\" --entrypoint /bin/bash vllm/vllm-openai:v0.30.0 -s <<'EOF'\n"
            "MODEL=zai-org/GLM-5-FP8\nexec vllm serve \"$MODEL\" --port \"$PORT\" -tp 8 --max-num-seqs 64\nEOF\n")
    data = script(tmp_path, text)
    assert data["recipe"]["model"] == "zai-org/GLM-5-FP8" and data["recipe"]["max-num-seqs"] == 64


def test_variables_set_earlier_are_expanded(tmp_path):
    text = ("#!/bin/bash\nTP=8\nexport VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=1024\nSEQS=\"${SEQS:-96}\"\n"
            "ARGS=\"--max-model-len 131072 --kv-cache-dtype fp8\"\n"
            "vllm serve zai-org/GLM-5-FP8 -tp $TP --max-num-seqs ${SEQS} $ARGS \\\n"
            "  --speculative-config '{\n    \"method\": \"mtp\",\n    \"num_speculative_tokens\": 3\n  }'\n")
    recipe = script(tmp_path, text)["recipe"]
    assert (recipe["tensor-parallel-size"], recipe["max-num-seqs"], recipe["max-model-len"], recipe["kv-cache-dtype"],
            recipe["speculative-config"]["num_speculative_tokens"],
            recipe["env"]["VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"]) == (8, 96, 131072, "fp8", 3, 1024)


def test_a_variable_the_script_does_not_set_is_asked_for_with_set(tmp_path):
    line = "vllm serve $MODEL -tp $TP --port $PORT --speculative-config.num_speculative_tokens $N"
    fails(run("plan", "--command", line, "--set", "gpu=B200"),
          "error: model: shell variables are not expanded: give $MODEL's value with --set model=VALUE; also -tp: "
          "shell variables are not expanded: give $TP's value with --set tensor-parallel-size=VALUE")
    data = command(line, "model=GLM-5-FP8", "tensor-parallel-size=8", "speculative-config.num_speculative_tokens=2")
    assert data["recipe"]["tensor-parallel-size"] == 8  # --port $PORT changes no memory: not asked for
    fails(run("plan", "--command", f"{GLM} $EXTRA_ARGS", "--set", "gpu=B200"),
          "error: $EXTRA_ARGS: shell variables are not expanded: give the arguments it holds with --set KEY=VALUE")


def test_a_file_that_starts_no_server_says_so(tmp_path):
    path = tmp_path / "serve.sh"
    path.write_text("#!/bin/bash\necho vllm serve zai-org/GLM-5-FP8\npip install vllm\n")
    fails(run("plan", path, "--set", "gpu=B200"), "starts no vLLM server", "and is no recipe")


PREFILL = ("vllm serve zai-org/GLM-5-FP8 -tp 4 --max-num-seqs 16 --max-model-len 65536 "
           "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\"}'")
DECODE = ("vllm serve zai-org/GLM-5-FP8 -tp 4 --max-num-seqs 256 --max-model-len 65536 "
          "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\"}'")


def test_a_prefill_decode_pair_is_planned_side_by_side(tmp_path):
    path = tmp_path / "pd.sh"
    path.write_text(f"# prefill\nCUDA_VISIBLE_DEVICES=0,1,2,3 {PREFILL} &\n"
                    f"# decode\nCUDA_VISIBLE_DEVICES=4,5,6,7 {DECODE}\n")
    servers = planned(path, gpu="B300")["servers"]
    assert [s["label"] for s in servers] == ["prefill", "decode"]
    assert [s["summary"]["kv_cache_tokens"] for s in servers] == \
        [command(line, gpu="B300")["summary"]["kv_cache_tokens"] for line in (PREFILL, DECODE)]
    table = run("plan", path, "--set", "gpu=B300")
    assert table.exit_code == 0 and "prefill" in table.stdout and "decode" in table.stdout
    fails(run("fit", path, "--set", "gpu=B300"), "error: command: 2 vLLM servers (prefill, decode): plan plans each")


V32_H200 = "deepseek-v3.2-8xh200-tp8.yaml"


def test_every_side_by_side_row_is_filled_for_servers_that_start():
    # The seed (V4.1-Flash DEP4 on B200, its decode died at 131: OOM above 129, tests/test_seed.py derives it) beside
    # V3.2 on H200 (1,024 decodes against room for 19,100: no risk). A row that no plan fills prints nothing: each row
    # has a figure for each server, the OOM verdict included
    rows = side_by_side_rows([planning.plan(load_recipe(SEED)), planning.plan(load_recipe(RECIPES / V32_H200))])
    assert [row for row in rows if not all(row[1:])] == []
    assert ["OOM above", "129 (safe 129)", "no risk"] in rows


# max-model-len auto ------------------------------------------------------------------------------------------------

V32 = "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 --gpu-memory-utilization 0.64"


@pytest.mark.parametrize("auto", ["auto", "-1"])
def test_max_model_len_auto_is_the_longest_length_that_fits(auto):
    # vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:1337-1405: the profile runs at the model's 163,840, then the
    # longest length whose one request fits what it left. V3.2 has one group of 64-token pages: a request of L takes
    # cdiv(L, 64) blocks, so L = (left // block bytes) x 64.
    at_most = json.loads(run("plan", "--command", f"{V32} --max-model-len 163840", "--set", "gpu=H200", "-f",
                             "json").stdout)
    left = next(b["kv_cache_bytes"] for b in at_most["backends"] if b["selected"])
    fitted = command(f"{V32} --max-model-len {auto}", gpu="H200")
    assert fitted["recipe"]["max-model-len"] == left // at_most["kv_cache"]["block_bytes"] * 64
    assert fitted["summary"]["refused"] is None and "vLLM fits it to" in fitted["summary"]["notes"][0]
    # without it, the model's maximum, which does not fit: vLLM refuses to start
    assert run("plan", "--command", V32, "--set", "gpu=H200").exit_code == 4


def test_max_model_len_auto_keeps_the_models_maximum_where_it_fits():
    data = command(f"{GLM} --max-model-len auto")
    assert data["recipe"]["max-model-len"] == 202752
    assert data["summary"]["notes"][0] == ("max-model-len auto: the model's maximum, 202,752, fits (vllm==0.33.0 "
                                                   "vllm/v1/core/kv_cache_planning.py:1337-1405)")


# Names -------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, planned_as, note", [
    ("zai-org/GLM-5.1", "zai-org/GLM-5.1-FP8",
     "zai-org/GLM-5.1 is planned as zai-org/GLM-5.1-FP8: the BF16 checkpoint"),
    ("zai-org/GLM-5", "zai-org/GLM-5-FP8", "zai-org/GLM-5 is planned as zai-org/GLM-5-FP8: the BF16 checkpoint"),
    ("DeepSeek-V3.2-FP8", "deepseek-ai/DeepSeek-V3.2",
     "DeepSeek-V3.2-FP8 is planned as deepseek-ai/DeepSeek-V3.2, whose checkpoint is FP8"),
    ("RedHatAI/GLM-5.2-NVFP4-FP8", "nvidia/GLM-5.2-NVFP4", "RedHatAI/GLM-5.2-NVFP4-FP8 is planned as "
                                                           "nvidia/GLM-5.2-NVFP4"),
    ("GLM-5.1-FP8", "zai-org/GLM-5.1-FP8", None),
])
def test_a_name_planned_as_another_checkpoint_says_so_first(name, planned_as, note):
    data = command(f"vllm serve {name} -tp 8")
    assert data["model"]["name"] == planned_as
    assert len(data["summary"]["notes"]) == (note is not None)
    if note:
        assert data["summary"]["notes"][0].startswith(note)
        screen = run("plan", "--command", f"vllm serve {name} -tp 8", "--set", "gpu=B200").stdout
        assert screen.startswith(f"note: {name} is planned as")
        serve = run("plan", "--command", f"vllm serve {name} -tp 8", "--set", "gpu=B200", "-f", "serve").stdout
        assert f"vllm serve {name} " in serve  # the checkpoint the user serves


@pytest.mark.parametrize("gpu, name", [
    ("NVIDIA H200 141GB HBM3e", "H200"), ("H200 SXM 141GB", "H200"), ("NVIDIA H100 SXM5 80GB HBM3", "H100"),
    ("H100 NVL 94GB", "H100 NVL"), ("NVIDIA H20 141GB", "H20 141GB"), ("NVIDIA H20", "H20"),
    ("NVIDIA H800 80GB HBM3", "H800"), ("AMD Instinct MI350X 288GB HBM3E", "MI350X"),
    ("NVIDIA B200 192GB HBM3e", "B200"),
])
def test_a_gpus_marketing_name_is_accepted(gpu, name):
    assert find_gpu(gpu).name == name


def test_a_memory_the_gpu_is_not_sold_with_is_refused_naming_the_one_that_is():
    fails(run("plan", "--command", GLM, "--set", "gpu=H100 94GB"),
          "error: gpu: H100 94GB: no 94 GB edition in the catalog; it has the H100 (80 GB); 94 GB: H100 NVL")


@pytest.mark.parametrize("path", ["recipe", "--set", "--command", "--vary"])
def test_a_typo_gets_the_same_suggestion_on_every_path(tmp_path, path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({"model": "GLM-5-FP8", "gpu": "B200"} | (
        {"max-num-seqz": 4} if path == "recipe" else {})))
    result = {"recipe": lambda: run("plan", recipe),
              "--set": lambda: run("plan", recipe, "--set", "max-num-seqz=4"),
              "--command": lambda: run("plan", "--command", f"{GLM} --max-num-seqz 4", "--set", "gpu=B200"),
              "--vary": lambda: run("sweep", SEED, "--vary", "max-num-seqz=4,8")}[path]()
    line = fails(result)
    assert "did you mean " in line and "max-num-seqs?)" in line


@pytest.mark.parametrize("text, words", [  # what bash hands the server, written out by hand
    ("TP=8\nvllm serve m -tp ${TP:-4}", ["m", "-tp", "8"]),
    ("D=2\nvllm serve m -tp ${TP:-$D}", ["m", "-tp", "2"]),
    ("vllm serve m \"$@\" --x", ["m", "--x"]),
    ("E=1\nvllm serve m --a 'b c' \"d $E\" d\\ e", ["m", "--a", "b c", "d 1", "d e"]),
    ("ARGS='--a 1'\nvllm serve m $ARGS \"$ARGS\"", ["m", "--a", "1", "--a 1"]),
    ("vllm serve m --json '{\n  \"a\": 1\n}'", ["m", "--json", "{\n  \"a\": 1\n}"]),
    ("cat <<EOF > x.sh\nvllm serve not-this-one\nEOF\nvllm serve m", ["m"]),
    ("vllm serve m -tp 8 2>&1 | tee serve.log", ["m", "-tp", "8"]),
    ("if true; then vllm serve m; fi", ["m"]),
    ("nohup vllm serve m \\\n  -tp 8 \\\n  --port 1 &> log &", ["m", "-tp", "8", "--port", "1"]),
])
def test_the_shell_hands_the_server_what_bash_would(text, words):
    (server,) = launch_script.servers(text)
    assert [w.text for w in server.args] == words


def test_max_model_len_auto_where_not_one_page_fits_stops_vllm():
    # vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:1380-1384: "Cannot auto-fit max_model_len"
    result = run("plan", "--command", "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 --gpu-memory-utilization 0.6 "
                                      "--max-model-len auto", "--set", "gpu=H200", "-f", "json")
    assert result.exit_code == 4
    assert json.loads(result.stdout)["summary"]["notes"][0].startswith("max-model-len auto: not one token fits")
