"""The setups issue 25 found vLLM refusing where plan said they start: plan refuses each as a keys.Refusal (exit 4),
with the release's own words and the file it cites; the neighbouring setup that vLLM starts, plan starts. Where the
releases' sources are here (~/.cache/vllm-releases, a git repo with one tag a release), the words are checked
against the cited file of that release."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from dsa_kvcalc import planning
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.keys import Refusal
from dsa_kvcalc.recipe import load

RELEASES = Path(os.environ.get("VLLM_RELEASES_REPO", Path.home() / ".cache" / "vllm-releases"))

V4 = {"model": "DeepSeek-V4-Flash", "tensor-parallel-size": 8, "enable-expert-parallel": True,
      "kv-cache-dtype": "fp8"}
V41 = {"model": "DeepSeek-V4.1-Flash", "tensor-parallel-size": 8, "enable-expert-parallel": True}

# (what, the refused recipe, the one vLLM starts beside it, the key, vLLM's words, the release and file they are in)
REFUSED = [
    ("DeepSeek-V4 with DCP", V4 | {"gpu": "H200", "decode-context-parallel-size": 2, "vllm-version": "0.33.0"},
     {"decode-context-parallel-size": 1}, "decode-context-parallel-size", "DCP not support sliding window.",
     "vllm/v1/kv_cache_interface.py"),
    ("DeepSeek-V4.1 with DCP", V41 | {"gpu": "B200", "decode-context-parallel-size": 2, "vllm-version": "0.30.0"},
     {"decode-context-parallel-size": 1}, "decode-context-parallel-size", "DCP not support sliding window.",
     "vllm/v1/kv_cache_interface.py"),
    ("DeepSeek-V4.1 with a bfloat16 cache", V41 | {"gpu": "B200", "kv-cache-dtype": "bfloat16",
                                                  "vllm-version": "0.31.0"},
     {"kv-cache-dtype": "fp8"}, "kv-cache-dtype", "DeepseekV4 packed KV layouts only support fp8 kv-cache, got ",
     "vllm/models/deepseek_v41/attention.py"),
    ("DeepSeek-V4.1 on SM90 with nvfp4_ds_mla", V41 | {"gpu": "H200", "kv-cache-dtype": "nvfp4_ds_mla",
                                                      "vllm-version": "0.33.0"},
     {"gpu": "B200"}, "kv-cache-dtype", "FlashMLA decodes only on SM100.", "vllm/models/deepseek_v41/attention.py"),
    ("DeepSeek-V4's MXFP4 indexer cache on SM90", V4 | {"gpu": "H200", "attention-config": {"indexer_kv_dtype": "mxfp4"},
                                                       "vllm-version": "0.33.0"},
     {"gpu": "B200"}, "attention-config.indexer_kv_dtype", "Blackwell datacenter GPUs",
     "vllm/v1/attention/backends/mla/indexer.py"),
    # found by the table: 40 layers over 3 stages are 13 + 14 + 13 (get_pp_indices), so the second stage starts on
    # layer 13, a ratio-2 layer whose compressed KV is kv source 8's (kv_source_layer_ids 2, 8, 14, 20 in the
    # config.json oracle/configs keeps); over 2 stages the second starts on kv source 20
    ("DeepSeek-V4.1 with a pipeline stage inside a kv-sharing group",
     V41 | {"gpu": "B300", "tensor-parallel-size": 2, "pipeline-parallel-size": 3, "kv-cache-dtype": "fp8",
            "vllm-version": "0.31.0"},
     {"pipeline-parallel-size": 2}, "pipeline-parallel-size",
     "PP splits inside a v4.1 kv-sharing group are not supported.", "vllm/models/deepseek_v41/attention.py"),
    # the class the last stands for: GLM-5's indexer refuses it where its metadata builder resolves the dtype
    ("GLM-5's MXFP4 indexer cache on SM90", {"model": "GLM-5", "gpu": "H200", "tensor-parallel-size": 8,
                                             "attention-config": {"indexer_kv_dtype": "mxfp4"}, "vllm-version": "0.33.0"},
     {"gpu": "B200"}, "attention-config.indexer_kv_dtype", "Blackwell datacenter GPUs",
     "vllm/v1/attention/backends/mla/indexer.py"),
]


def release_text(version: str, path: str) -> str:
    if not (RELEASES / ".git").exists() and not (RELEASES / "HEAD").exists():
        pytest.skip(f"no vLLM release sources at {RELEASES}")
    return subprocess.run(["git", "-C", str(RELEASES), "show", f"v{version}:{path}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("what, refused, started, key, words, path", REFUSED, ids=[r[0] for r in REFUSED])
def test_plan_refuses_with_the_releases_reason(what, refused, started, key, words, path):
    with pytest.raises(Refusal) as error:
        planning.plan(load(refused))
    assert error.value.key == key
    assert words in error.value.problem and path in error.value.problem, error.value.problem
    planning.plan(load(refused | started))  # the setup beside it starts


@pytest.mark.parametrize("what, refused, started, key, words, path", REFUSED, ids=[r[0] for r in REFUSED])
def test_the_reason_is_the_releases_own(what, refused, started, key, words, path):
    # vLLM's words are split over string literals in its source: joined, the release's file holds them
    source = release_text(refused["vllm-version"], path)
    joined = re.sub(r'"\s*\n\s*f?"', "", source)
    assert words.rstrip(" ") in joined.replace("{kv_cache_dtype}", "").replace("\\n", ""), (what, path)


def test_flashmla_sparses_bf16_path_refuses_dcp_from_029():
    # vllm==0.29.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:604-610 (vllm==0.33.0 :784-790): GLM-5.1 NVFP4
    # on H100 at TP8 with DCP 2 and a BF16 cache: vLLM's SM90 candidates (FlashInfer's SM90 kernel, FlashAttention's
    # sparse MLA, FlashMLA-sparse) pass over the first two under DCP and FlashMLA-sparse's implementation refuses
    raw = {"model": "GLM-5.1-NVFP4", "gpu": "H100", "tensor-parallel-size": 8, "enable-expert-parallel": True,
           "decode-context-parallel-size": 2, "kv-cache-dtype": "bfloat16"}
    with pytest.raises(Refusal, match="decode-context-parallel-size: 2 with a bfloat16 cache on FLASHMLA_SPARSE"):
        planning.plan(load(raw | {"vllm-version": "0.33.0"}))
    assert planning.plan(load(raw | {"vllm-version": "0.28.0"})).memory.sparse_mla_backend == "FLASHMLA_SPARSE"
    assert planning.plan(load(raw | {"vllm-version": "0.33.0", "kv-cache-dtype": "fp8_ds_mla"}))
    assert "DCP for FlashMLA sparse requires an fp8_ds_mla kv-cache" in re.sub(
        r'"\s*\n\s*f?"', "", release_text("0.33.0", "vllm/v1/attention/backends/mla/flashmla_sparse.py"))


def test_v41_dspark_takes_whole_blocks_of_draft_tokens_in_030_only():
    # vllm==0.30.0 vllm/config/speculative.py:1431-1486: V4.1's DSpark draft config takes n_predict from its
    # config.json's dspark_block_size (5), and k > n_predict must be a multiple of it; 0.31.0 skips the check for DSpark
    # (vllm==0.31.0 :1475-1482)
    raw = {"model": "DeepSeek-V4.1-Flash", "gpu": "GB300", "tensor-parallel-size": 4, "vllm-version": "0.30.0"}
    for k in (1, 5, 10):
        resolve(load(raw | {"speculative-config": {"method": "dspark", "num_speculative_tokens": k}}))
    with pytest.raises(Refusal, match="num_speculative_tokens: 6: .*must be divisible by n_predict=5"):
        resolve(load(raw | {"speculative-config": {"method": "dspark", "num_speculative_tokens": 6}}))
    resolve(load(raw | {"vllm-version": "0.31.0", "speculative-config": {"method": "dspark",
                                                                         "num_speculative_tokens": 6}}))
    source = release_text("0.30.0", "vllm/config/speculative.py")
    assert '"dspark_block_size", None' in source and "must be divisible by {n_predict=}" in source
    assert "must be divisible by {n_predict=}" in source.split("if self.use_dspark():")[0] \
        and "if self.use_dspark():" in release_text("0.31.0", "vllm/config/speculative.py")


def test_v4_on_sm12x_stores_fp8_ds_mla_too():
    # vllm==0.31.0 vllm/models/deepseek_v4/nvidia/model.py:1146-1177: SM12x runs DeepseekV4FlashInferSM120Attention,
    # whose layout is fp8_ds_mla (flashinfer_sparse.py:619-624), so _resolve_dsv4_kv_cache_dtype refuses bfloat16
    # (vllm/models/deepseek_v4/attention.py:106-117), as FlashMLA's does on SM90 and SM10x
    raw = {"model": "DeepSeek-V4-Flash", "gpu": "RTX PRO 6000", "tensor-parallel-size": 8, "vllm-version": "0.31.0"}
    with pytest.raises(Refusal, match="kv-cache-dtype: bfloat16: vLLM 0.31.0 refuses to start: .* fp8_ds_mla"):
        planning.plan(load(raw | {"kv-cache-dtype": "bfloat16"}))
    planning.plan(load(raw | {"kv-cache-dtype": "fp8"}))
    source = release_text("0.31.0", "vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py")
    sm120 = source.split("class DeepseekV4FlashInferSM120Attention")[1].split("\nclass ")[0]
    assert "use_fp8_ds_mla_layout: ClassVar[bool] = True" in sm120


def test_dcp_divides_the_tp_size():
    # vllm==0.33.0 vllm/config/parallel.py:596-600 (vllm==0.19.0 :391-395): DCP reuses the TP ranks
    raw = {"model": "GLM-5.1-NVFP4", "gpu": "B200", "tensor-parallel-size": 4, "vllm-version": "0.32.0"}
    with pytest.raises(Refusal, match="decode-context-parallel-size: 8: .*tp_size=4 must be divisible by dcp_size=8"):
        resolve(load(raw | {"decode-context-parallel-size": 8}))
    resolve(load(raw | {"decode-context-parallel-size": 4}))
    assert "must be divisible by dcp_size={dcp}." in release_text("0.33.0", "vllm/config/parallel.py")


def test_v32_takes_a_bfloat16_cache_as_auto_so_sm120_starts_on_fp8_ds_mla():
    # vllm==0.33.0 vllm/model_executor/models/config.py:83-86: DeepseekV32ForCausalLM's hook turns bfloat16 into auto,
    # which FlashInfer's SM120 sparse MLA takes (as fp8_ds_mla: mla_attention.py:359-376), so vLLM starts where a
    # bfloat16 cache has no SM120 backend; GLM-5 has no such hook. vLLM 0.33.0's own start-up (oracle/harness.py,
    # V3.2 on RTX PRO 6000 at TP4 DP8, max-model-len 76,589): cache dtype auto, a block of 3,076,352 B.
    raw = {"model": "DeepSeek-V3.2", "gpu": "RTX PRO 6000", "tensor-parallel-size": 4, "data-parallel-size": 8,
           "kv-cache-dtype": "bfloat16", "max-model-len": 76589, "vllm-version": "0.33.0"}
    recipe = load(raw)
    assert recipe.cache_dtype == "auto" and planning.plan(recipe).memory.kv.block_bytes == 3_076_352
    with pytest.raises(Refusal, match="no valid attention backend"):
        planning.plan(load(raw | {"model": "GLM-5", "tensor-parallel-size": 8, "data-parallel-size": 4}))
    hook = release_text("0.19.0", "vllm/model_executor/models/config.py").split("class DeepseekV32ForCausalLM")[1]
    assert 'if cache_config.cache_dtype == "bfloat16":\n            cache_config.cache_dtype = "auto"' in hook


def test_v41_stages_of_sliding_window_layers_alone_are_passed_over():
    # 40 layers over 40 stages: stage 1 is layer 1, a sliding-window layer (compress ratio 0) with no kv source at or
    # below it, which builds no compressed cache; the first refused stage is layer 3's, whose source (2) is on stage 2
    raw = V41 | {"gpu": "B300", "tensor-parallel-size": 1, "pipeline-parallel-size": 40, "kv-cache-dtype": "fp8",
                 "vllm-version": "0.31.0"}
    with pytest.raises(Refusal, match="the stage of layers 3-3 holds layer 3, whose compressed KV is layer 2's"):
        resolve(load(raw))
