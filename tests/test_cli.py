"""The command line as a user meets it: exit codes, one-line errors, the JSON contract, formats, --output."""

import csv
import io
import json
import math
import re
import subprocess
import sys

import pytest
import yaml

from conftest import RECIPES, SEED, fails, run


def write(tmp_path, text, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = "model: DeepSeek-V3.2\ngpu: H200\ntensor-parallel-size: 8\n"


@pytest.mark.parametrize("text, field", [
    ("model: DeepSeek-V3.2\ngpu: H200\nmax-num-seqs: [1\n", "YAML error"),
    ("model: Llama-3\ngpu: H200\n", "model:"),
    ("model: DeepSeek-V3.2\ngpu: H300\n", "gpu:"),
    (BASE + "max-num-seqs: many\n", "max-num-seqs:"),
    (BASE + "max-num-seqs: 0\n", "max-num-seqs:"),
    (BASE + "max-num-seqs: -4\n", "max-num-seqs:"),
    (BASE + "max-model-len: 0\n", "max-model-len:"),
    (BASE + "max-model-len: 4M\n", "max-model-len:"),  # beyond the model's 163,840
    (BASE + "gpu-memory-utilization: 0\n", "gpu-memory-utilization:"),
    (BASE + "gpu-memory-utilization: 1.2\n", "gpu-memory-utilization:"),
    (BASE + "tensor-parallel-size: 2.5\n", "tensor-parallel-size:"),
    (BASE + "enable-expert-parallel: maybe\n", "enable-expert-parallel:"),
    (BASE + "speculative-config:\n  num_speculative_tokens: -1\n", "speculative-config.num_speculative_tokens:"),
    (BASE + "speculative-config: '{not json'\n", "speculative-config:"),
    (BASE + "compilation-config:\n  cudagraph_mode: SOMETIMES\n", "compilation-config.cudagraph_mode:"),
    (BASE + "kv-cache-memory-bytes: -5\n", "kv-cache-memory-bytes:"),
    (BASE + "memory:\n  weights_gib: -1\n", "memory.weights_gib:"),
    (BASE + "memory:\n  weights: 40\n", "memory.weights:"),
    (BASE + "memory:\n  cudagraph_gib: {fast: 3}\n", "memory.cudagraph_gib.fast:"),
    (BASE + "env:\n  VLLM_SPARSE_INDEXER_MAX_LOGITS_MB: 0\n", "env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB:"),
    (BASE + "max-num-seq: 256\n", "max-num-seq: unknown key (did you mean max-num-seqs?)"),
    (BASE + "deepgemm: '2.7'\n", "deepgemm:"),
    (BASE + "pipeline-parallel-size: 2000\n", "pipeline-parallel-size:"),
    ("gpu: H200\n", "model: missing"),
    ("- a\n- list\n", "recipe:"),
])
def test_bad_input_is_one_line_naming_the_field(tmp_path, text, field):
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], result.output


def test_weights_that_leave_no_room_are_a_refusal(tmp_path):
    # DeepSeek-V3.2's 671B parameters (690 GB of FP8 checkpoint) on one 80 GB H100: vLLM finds no memory for the
    # cache blocks and refuses to start (vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:50-58): exit 4, one line
    result = run("plan", write(tmp_path, "model: DeepSeek-V3.2\ngpu: H100\n"))
    assert result.exit_code == 4, result.output
    assert result.output.startswith("error: model: deepseek-ai/DeepSeek-V3.2 needs") and result.output.count("\n") == 1


def test_a_missing_recipe_file_exits_2(tmp_path):
    result = run("plan", tmp_path / "nope.yaml")
    assert result.exit_code == 2 and "No such file or directory" in result.output


def test_bad_set_override_names_it():
    result = run("plan", SEED, "--set", "max-num-seqs")
    assert result.exit_code == 2 and result.output.startswith("error: --set:")


def test_plan_json_holds_the_gpu_the_recipe_and_every_backend_field(tmp_path):
    result = run("plan", SEED, "--format", "json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["gpu"] == {"name": "B200", "arch": "sm100", "total_memory_bytes": 182631 * 2**20}
    assert data["recipe"]["max-num-seqs"] == 256 and data["recipe"]["max-model-len"] == 1_048_576
    fields = {"backend", "available", "reason", "decode_logits", "prefill_budget_bytes", "reserved_bytes",
              "cudagraph_logits_bytes", "kv_cache_bytes", "kv_cache_tokens", "max_concurrency", "other_side_of_fix",
              "oom"}
    for backend in data["backends"]:
        assert fields <= set(backend)
        if backend["available"]:
            assert set(backend["decode_logits"]) >= {"rows", "padded_columns", "bytes_per_element", "bytes"}
            for key in ("reserved_bytes", "kv_cache_bytes", "kv_cache_tokens"):
                assert type(backend[key]) is int and type(backend["other_side_of_fix"][key]) is int
    aiter = next(b for b in data["backends"] if b["backend"] == "aiter")
    assert aiter["available"] is False and "gfx942" in aiter["reason"]


@pytest.mark.parametrize("version, rows", [("0.29.0", 16_384), ("0.30.0", 1_024)])
def test_rocm_locks_the_indexer_workspace_before_and_after_the_fix(version, rows):
    # vLLM issue #55132: AITER's indexer locks an FP32 (rows, max_model_len) buffer while profiling, with or without
    # #62860. MI300X (191.98 GiB, so vLLM 0.28+ batches 16,384 tokens), V3.2 at 163,840. Rows: max_num_batched_tokens
    # (vllm==0.29.0 rocm_aiter_mla_sparse.py:867-868), then min(tokens, max_num_seqs x (1 + k)) = min(16,384, 1,024)
    # (vllm==0.30.0 :949-972). 16,384 x 163,840 x 4 B = 10,737,418,240 B, or 1,024 x 163,840 x 4 B = 671,088,640 B,
    # on top of the 512 MiB prefill budget, both times; so the fix changes nothing there.
    data = json.loads(run("plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", "--set", "gpu=MI300X",
                          "--set", f"vllm-version={version}", "--format", "json").output)
    for backend in (b for b in data["backends"] if b["available"]):
        assert backend["reserved_bytes"] == backend["other_side_of_fix"]["reserved_bytes"] == \
            rows * 163_840 * 4 + 512 * 2**20
        assert backend["kv_cache_tokens"] == backend["other_side_of_fix"]["kv_cache_tokens"]


def test_set_overrides_any_key_like_a_vllm_flag():
    result = run("plan", SEED, "--format", "json", "--set", "max-num-seqs=128",
                 "--set", "speculative_config.num_speculative_tokens=3", "--set", "max-model-len=128k")
    data = json.loads(result.output)
    auto = next(b for b in data["backends"] if b["backend"] == "auto")
    # 128 x (1 + 3) rows; 128k = 128,000 columns, padded to 84 x 1536 = 129,024
    assert auto["decode_logits"]["rows"] == 512
    assert auto["decode_logits"]["padded_columns"] == 129_024


def test_vllm_serve_config_loads_as_is_with_underscores(tmp_path):
    text = ("model: deepseek-ai/DeepSeek-V3.2\ngpu: h200\ntensor_parallel_size: 8\nmax_num_seqs: 64\n"
            "port: 8000\nserved-model-name: ds\ntrust-remote-code: true\n")
    result = run("plan", write(tmp_path, text), "--format", "json")
    data = json.loads(result.output)
    assert data["recipe"]["max-num-seqs"] == 64
    assert data["ignored_keys"] == ["port", "served-model-name", "trust-remote-code"]


def test_vllms_defaults_fill_the_keys_a_recipe_leaves_out(tmp_path):
    data = json.loads(run("plan", write(tmp_path, BASE), "--format", "json").output)["recipe"]
    assert (data["max-num-seqs"], data["max-num-batched-tokens"], data["max-model-len"],
            data["gpu-memory-utilization"]) == (1024, 8192, 163_840, 0.92)


def test_local_config_json_is_a_model(tmp_path):
    config = {"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64, "index_head_dim": 128,
              "index_topk": 2048, "n_routed_experts": 256, "moe_intermediate_size": 2048, "first_k_dense_replace": 3,
              "num_nextn_predict_layers": 1, "max_position_embeddings": 163840, "vocab_size": 129280}
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    text = "model: model\ngpu: H200\ntensor-parallel-size: 8\nkv-cache-dtype: fp8\n"
    data = json.loads(run("plan", write(tmp_path, text), "--format", "json").output)
    assert data["model"]["kv_bytes_per_token"] == 61 * (656 + 132)  # 48,068 (docs/design.md, KV-cache groups)


def test_output_is_written_atomically_and_only_when_asked(tmp_path):
    target = tmp_path / "plan.json"
    result = run("plan", SEED, "--format", "json", "--output", target)
    assert result.exit_code == 0 and result.output == ""
    assert json.loads(target.read_text())["backends"]
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]
    failed = run("plan", tmp_path / "missing.yaml", "--format", "json", "--output", target)
    assert failed.exit_code == 2 and json.loads(target.read_text())["backends"]  # the old file stays whole


def test_csv_has_one_row_per_backend():
    rows = list(csv.DictReader(io.StringIO(run("plan", SEED, "--format", "csv").output)))
    assert [r["backend"] for r in rows] == ["auto", "persistent", "cooperative", "deep_select", "flashinfer", "torch",
                                            "aiter"]
    assert rows[0]["decode_logits.bytes"] == "9668395008"
    assert "decode_logits" not in rows[0]  # aiter's null logits add no always-empty column


def test_explain_is_text_and_refuses_another_format():
    fails(run("plan", SEED, "--explain", "--format", "json"), "error: --explain:", "drop --format json")


def test_markdown_and_table_show_the_backends():
    markdown = run("plan", SEED, "--format", "markdown").output
    assert "| rows | 1,536 |" in markdown and "deep_select" in markdown
    table = run("plan", SEED).output
    assert "1,049,088" in table and "unavailable: aiter" in table


def test_explain_substitutes_the_numbers():
    text = run("plan", SEED, "--explain").output
    assert "min(256, 8192) x 6 = 1,536" in text  # the seed's 8192 batched tokens
    assert "1,536 x 1,049,088 x 6 = 9,668,395,008 B" in text


def numbers(line: str) -> list[int]:
    """The whole numbers of an --explain line, without the GiB figures in brackets (for people), PR numbers and the
    0 of max(0, ...)."""
    line = re.sub(r"\([^()]*(GiB|does not subtract)[^()]*\)|#\d+", "", line).replace("max(0,", "max(")
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", line)]


@pytest.mark.parametrize("recipe, settings", [(r, []) for r in sorted(RECIPES.glob("*.yaml"))] + [
    (RECIPES / "glm-5-8xb200-tp8.yaml", ["vllm-version=0.30.0"]),  # graphs not subtracted
    (RECIPES / "glm-5-8xb200-tp8.yaml", ["gpu=MI300X"]),  # ROCm's locked workspace
    (RECIPES / "glm-5-8xb200-tp8.yaml", ["engine=deepinfer"]),
    (RECIPES / "glm-5-8xb200-tp8.yaml", ["vllm-version=0.20.0"]),  # tokens as blocks x block tokens
    (RECIPES / "deepseek-v4-flash-4xh200-dep4.yaml", ["vllm-version=0.20.0"]),  # five groups, the smallest block 4
    *((RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", [f"vllm-version={v}", "decode-context-parallel-size=2",
                                                    "kv-cache-dtype=fp8"]) for v in ("0.19.0", "0.20.0", "0.33.0"))])
def test_every_explained_line_adds_up(recipe, settings):
    """Each line's printed numbers give its printed result, redone here from the text alone."""
    text = run("plan", recipe, "--explain", *(a for s in settings for a in ("--set", s))).output
    checked = 0
    for line in text.splitlines():
        values = numbers(line)
        if line.startswith("  decode logits ="):
            rows, width, element, logits = values[:4]
            assert rows * width * element == logits, line
        elif line.startswith("  reserved = decode logits"):  # DeepInfer's profile run holds them
            assert values[0] == logits, line
        elif line.startswith("  peak activation ="):
            base, reserved, headroom, result = values
            assert base + max(0, reserved - headroom) == result, line
        elif line.startswith("  KV cache = requested"):
            requested, weights, peak, non_torch, graphs, result = values
            assert max(0, requested - weights - peak - non_torch - graphs) == result, line
        elif line.startswith("  reserved = max("):
            budget, logits, result, before = values
            assert max(budget, logits) == result and before == budget, line
        elif line.startswith("  reserved = the prefill budget"):  # a release without #62860
            budget, budget_with_fix, logits, with_fix = values
            assert budget_with_fix == budget and with_fix == max(budget, logits), line
        elif line.startswith("  reserved = prefill budget"):
            budget, workspace, result = values
            assert budget + workspace == result, line
        elif line.startswith("  padded width = align(L, lcm("):  # whole splits and whole 1024-byte strides
            split, stride_bytes, element, stride, multiple = values[:5]
            assert stride_bytes // element == stride and math.lcm(split, stride) == multiple, line
        elif line.startswith("  held = KV"):
            kv, weights, peak, non_torch, pool, held = values
            assert kv + weights + peak + non_torch + pool == held, line
        elif line.startswith("  graph logits ="):
            rows, width, element, result, _ = values
            assert rows * width * element == result, line
        elif line.startswith("  KV tokens =") and "pages a request" in line:
            kv_bytes, block_bytes, pages, length, tokens, _ = values
            assert int(kv_bytes // block_bytes / pages * length) == tokens, line
        elif line.startswith("  KV tokens ="):  # blocks // groups x block tokens x DCP (before vLLM 0.20.1)
            kv_bytes, block_bytes, groups, block_tokens, dcp, tokens, _ = values
            assert kv_bytes // block_bytes // groups * block_tokens * dcp == tokens, line
        elif line.startswith("  pages a request =") and "/" not in line:  # one block size among the full groups
            pages, length, block_tokens, dcp, window_state = values
            assert (pages - window_state) % -(-length // (block_tokens * dcp)) == 0, line
        elif line.startswith("  outside CUDA graphs:"):
            free, per_decode, decodes = values
            assert free // per_decode == decodes, line
        else:
            continue
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("release", ["0.19.0", "0.20.0", "0.33.0"])
def test_explained_kv_tokens_hold_the_dcp_factor_of_each_release(release):
    # DeepSeek-V3.2, one MLA group of 64-token blocks, 163,840 tokens, DCP 2 (an fp8 cache: 0.33.0's FlashMLA sparse
    # takes no other under DCP). vLLM 0.19.0-0.20.0 log num_blocks // groups x the smallest block x pcp x dcp
    # (vllm==0.20.0 vllm/v1/core/kv_cache_utils.py:1689-1711); from 0.20.1 int(concurrency x max_model_len), a
    # request holding cdiv(cdiv(163,840, DCP 2), 64) = 1,280 pages (vllm==0.33.0 vllm/v1/kv_cache_interface.py:643-648;
    # vllm==0.20.1 vllm/v1/core/kv_cache_utils.py:1699-1706)
    settings = [f"vllm-version={release}", "decode-context-parallel-size=2", "kv-cache-dtype=fp8"]
    args = [a for s in settings for a in ("--set", s)]
    text = run("plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", "--explain", *args).output
    planned = json.loads(run("plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", "--format", "json", *args).output)
    line = next(line for line in text.splitlines() if line.startswith("  KV tokens ="))
    values = numbers(line)
    blocks = values[0] // values[1]
    if release == "0.33.0":
        pages, length = values[2:4]
        assert (pages, length) == (1_280, 163_840) and "DCP 2)" in text
        explained = int(blocks / pages * length)
    else:
        groups, block_tokens, dcp = values[2:5]
        assert (groups, block_tokens, dcp) == (1, 64, 2), line
        explained = blocks // groups * block_tokens * dcp
    assert explained == values[-2] == planned["summary"]["kv_cache_tokens"]


def test_models_gpus_and_schema_list_the_catalog_and_every_recipe_key():
    assert "DeepSeek-V4.1-Flash" in run("models").output
    assert "gfx950" in run("gpus").output
    schema = json.loads(run("schema").output)
    assert schema["required"] == ["model", "gpu"]
    # every bundled recipe's keys are known to the schema
    for recipe in RECIPES.glob("*.yaml"):
        assert set(yaml.safe_load(recipe.read_text())) <= set(schema["properties"])


def test_plan_never_imports_torch():
    # a fresh interpreter plans the seed, then prints which of torch and DeepGEMM it imported
    code = ("import sys; from dsa_kvcalc.cli import app\n"
            "try: app(['plan', sys.argv[1], '--format', 'json'])\nexcept SystemExit as done: code = done.code\n"
            "print(code, sorted({'torch', 'deep_gemm'} & set(sys.modules)), file=sys.stderr)")
    child = subprocess.run([sys.executable, "-c", code, str(SEED)], capture_output=True, text=True)
    assert child.stderr.splitlines()[-1] == "0 []", child.stderr


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_recipe_plans(recipe):
    result = run("plan", recipe, "--format", "json")
    assert result.exit_code == 0
    assert any(b["available"] and b["kv_cache_tokens"] > 0 for b in json.loads(result.output)["backends"])
