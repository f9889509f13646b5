"""The vLLM rules as the releases apply them to a recipe, each case worked out by hand from the release lines that
engine.py cites (the release before a change and the first after it)."""

import json
from pathlib import Path

import pytest

from conftest import LOGS
from dsa_kvcalc import capacity, deployment, planning
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.keys import RecipeError, Refusal
from dsa_kvcalc.recipe import load
from dsa_kvcalc.vllm_log import read_log_file


def planned(**keys) -> tuple:
    recipe = load(keys)
    return recipe, planning.plan(recipe)


GLM5_B200 = {"model": "GLM-5", "gpu": "B200", "tensor-parallel-size": 8}


def test_glm5_runs_fp8_for_auto_on_sm10x_from_032():
    # vllm==0.32.0 vllm/model_executor/models/config.py:49-55: auto -> fp8_e4m3 on SM10x, then FlashInfer's sparse MLA
    # keeps standard fp8: 78 x 576 + 78 x 132 = 55,224 B a token; 0.31.0 keeps BF16: 78 x (1152 + 132) = 100,152.
    old, new = (planned(**GLM5_B200, **{"vllm-version": v}) for v in ("0.31.0", "0.32.0"))
    assert old[0].cache_dtype == "auto" and old[1].memory.kv.groups[0].page_bytes == 64 * 100_152
    assert new[0].cache_dtype == "fp8_e4m3" and new[1].memory.kv.groups[0].page_bytes == 64 * 55_224
    assert new[1].memory.sparse_mla_backend == "FLASHINFER_MLA_SPARSE"
    hopper = planned(**GLM5_B200 | {"gpu": "H200"}, **{"vllm-version": "0.33.0"})[0]
    assert hopper.cache_dtype == "auto"  # SM90 is not SM10x


def test_a_cache_dtype_the_backend_refuses_is_an_error_not_a_silent_swap():
    # RTX PRO 6000 (SM120) runs FLASHINFER_MLA_SPARSE_SM120, whose supported dtypes lack bfloat16
    # (vllm==0.33.0 vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py:168-173): vLLM would not start.
    with pytest.raises(RecipeError, match="kv-cache-dtype: .*no valid attention backend.*bfloat16.*FLASHINFER_MLA_SPARSE_SM120"):
        planned(**GLM5_B200 | {"gpu": "RTX PRO 6000", "kv-cache-dtype": "bfloat16"})
    with pytest.raises(RecipeError, match="turboquant_k8v4"):  # a CacheDType no sparse-MLA backend takes
        planned(**GLM5_B200 | {"kv-cache-dtype": "turboquant_k8v4"})


def test_a_sparse_mla_backend_the_gpu_cannot_run_refuses_the_plan():
    # Before 0.24.0 SM12x falls to FLASHMLA_SPARSE (vllm==0.23.0 vllm/platforms/cuda.py:123-130), which runs on
    # major 9 or 10 only (flashmla_sparse.py:129-130): no valid backend, vLLM does not start. 0.24.0 adds
    # FLASHINFER_MLA_SPARSE_SM120 (major 12, flashinfer_mla_sparse.py:170-171).
    sm120 = GLM5_B200 | {"gpu": "RTX PRO 6000", "kv-cache-dtype": "fp8", "enable-expert-parallel": True,
                         "data-parallel-size": 2}
    with pytest.raises(RecipeError, match="gpu: .*FLASHMLA_SPARSE runs on sm90, sm100, sm103 only"):
        planned(**sm120 | {"vllm-version": "0.23.0"})
    assert planned(**sm120 | {"vllm-version": "0.24.0"})[1].memory.sparse_mla_backend == "FLASHINFER_MLA_SPARSE_SM120"
    # a named backend: FlashInfer's TRTLLM sparse MLA is major 10 only, FlashAttention's sparse MLA major 9 only
    # (vllm==0.33.0 flashinfer_mla_sparse.py:105-106, flashattn_mla_sparse.py:82-83)
    with pytest.raises(RecipeError, match="attention-backend: .*FLASHINFER_MLA_SPARSE runs on sm100, sm103 only"):
        planned(**GLM5_B200 | {"gpu": "H200", "attention-backend": "FLASHINFER_MLA_SPARSE"})
    with pytest.raises(RecipeError, match="attention-backend: .*FLASH_ATTN_MLA_SPARSE runs on sm90 only"):
        planned(**GLM5_B200 | {"kv-cache-dtype": "bfloat16", "attention-backend": "FLASH_ATTN_MLA_SPARSE"})
    assert planned(**GLM5_B200 | {"gpu": "H200", "kv-cache-dtype": "bfloat16",
                                  "attention-backend": "FLASH_ATTN_MLA_SPARSE"})[1].memory.kv.block_bytes > 0
    # FA4's sparse MLA is FlashInfer's TRTLLM backend's, major 10: SM103 (B300) too, where 0.33.0 picks it for BF16 at
    # <= 16 heads a rank (vllm==0.33.0 vllm/platforms/cuda.py:107-115; flashattn_mla_sparse.py:275)
    assert planned(**GLM5_B200 | {"gpu": "B300", "kv-cache-dtype": "bfloat16"})[1].memory.sparse_mla_backend == \
        "FLASH_ATTN_MLA_SPARSE_FA4"


@pytest.mark.parametrize("backend, before, first", [
    # vllm/v1/attention/backends/registry.py of each release: the first to list the backend, and the one before
    ("FLASH_ATTN_MLA_SPARSE", "0.24.0", "0.25.0"), ("FLASHINFER_MLA_SPARSE_SM120", "0.23.0", "0.24.0"),
    ("FLASHINFER_MLA_SPARSE_SM90", "0.29.0", "0.30.0"), ("FLASH_ATTN_MLA_SPARSE_FA4", "0.32.0", "0.33.0"),
    ("FLASHMLA_SPARSE_DSV4", "0.22.1", "0.23.0"), ("FLASHINFER_MLA_SPARSE_DSV4", "0.22.1", "0.23.0"),
    ("FLASHMLA_SPARSE_DSV41", "0.29.0", "0.30.0"), ("FLASHINFER_MLA_SPARSE_DSV41", "0.29.0", "0.30.0"),
    ("FLASHMLA_MEGA_ATTN_DSV41", "0.30.0", "0.31.0")])
def test_a_backend_the_release_does_not_have_is_refused(backend, before, first):
    with pytest.raises(RecipeError, match=f"attention-backend: {backend} is not a backend of vLLM {before}: "
                                          f"vLLM {first} adds it"):
        load({"model": "GLM-5", "gpu": "B200", "attention-backend": backend, "vllm-version": before})
    load({"model": "GLM-5", "gpu": "B200", "attention-backend": backend, "vllm-version": first})


def test_nvfp4_ds_mla_is_352_bytes_on_sm100_from_030():
    # 256 B e2m1 NoPE + 64 B FP8 RoPE + 32 B scales (vllm==0.30.0 flashmla_sparse.py:108-121): 78 x (352 + 132)
    _, plan = planned(**GLM5_B200, **{"kv-cache-dtype": "nvfp4_ds_mla", "vllm-version": "0.30.0"})
    assert plan.memory.kv.groups[0].page_bytes == 64 * 78 * (352 + 132)
    for refused in ({"vllm-version": "0.29.0"}, {"gpu": "H200"}):
        with pytest.raises(RecipeError, match="nvfp4_ds_mla"):
            planned(**GLM5_B200 | {"kv-cache-dtype": "nvfp4_ds_mla"} | refused)


def test_rocm_keeps_standard_fp8_and_takes_it_from_021():
    # ROCM_AITER_MLA_SPARSE: no fp8_ds_mla conversion, (num_blocks, block, 576) standard fp8: 78 x (576 + 132)
    _, plan = planned(**GLM5_B200 | {"gpu": "MI300X", "kv-cache-dtype": "fp8", "vllm-version": "0.21.0"})
    assert plan.memory.kv.groups[0].page_bytes == 64 * 78 * (576 + 132)
    with pytest.raises(RecipeError, match="kv-cache-dtype"):  # vllm==0.20.2 rocm_aiter_mla_sparse.py:85-89
        planned(**GLM5_B200 | {"gpu": "MI300X", "kv-cache-dtype": "fp8", "vllm-version": "0.20.2"})


@pytest.mark.parametrize("version, seqs, tokens", [("0.32.0", 1024, 8192), ("0.33.0", 256, 2048)])
def test_gb10_falls_to_the_small_tier_in_033(version, seqs, tokens):
    # GB10: 121.69 GiB, so the >= 70 GiB tier, which 0.33.0 closes to cc 12.1 (vllm/engine/arg_utils.py:2961-2996)
    recipe, _ = planned(**GLM5_B200 | {"gpu": "GB10", "kv-cache-dtype": "fp8", "vllm-version": version})
    assert (recipe.max_num_seqs, recipe.max_num_batched_tokens) == (seqs, tokens)


def test_batched_dp_moe_defaults_to_256_tokens_and_throughput_doubles_the_tier():
    v32 = {"model": "DeepSeek-V3.2", "gpu": "H200"}
    # DP 8 + EP + deepep_low_latency: 256 tokens (vllm==0.20.0 arg_utils.py:2354-2358), then seqs = min(1024, 256)
    dp = load(v32 | {"data-parallel-size": 8, "enable-expert-parallel": True, "all2all-backend": "deepep_low_latency"})
    assert (dp.max_num_seqs, dp.max_num_batched_tokens) == (256, 256)
    assert load(v32 | {"data-parallel-size": 8, "enable-expert-parallel": True, "all2all-backend": "deepep_low_latency",
                       "vllm-version": "0.19.1"}).max_num_batched_tokens == 8192
    # H200 >= 70 GiB: 1024 sequences, 8192 tokens, doubled by performance-mode throughput (arg_utils.py:3183-3188)
    fast = load(v32 | {"tensor-parallel-size": 8, "performance-mode": "throughput"})
    assert (fast.max_num_seqs, fast.max_num_batched_tokens) == (2048, 16384)


@pytest.mark.parametrize("model, version, subtracted", [
    ("DeepSeek-V4-Flash", "0.27.1", True),  # V1, which estimates
    ("DeepSeek-V4-Flash", "0.28.0", False),  # Model Runner V2 (vllm/config/vllm.py:69-80), whose estimate is 0
    ("DeepSeek-V4-Flash", "0.29.0", True),  # V2 estimates (vllm/v1/worker/gpu/model_runner.py:896-898)
    ("DeepSeek-V3.2", "0.28.0", True),  # still V1 in 0.28.0
    ("DeepSeek-V3.2", "0.19.1", False),  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (envs.py:1654-1655)
])
def test_graphs_are_subtracted_where_the_runner_estimates_them(model, version, subtracted):
    recipe, _ = planned(model=model, gpu="H200", **{"tensor-parallel-size": 8, "vllm-version": version,
                                                    "kv-cache-dtype": "fp8"})
    assert resolve(recipe).cudagraph_estimate.subtracted is subtracted


def test_deepseek_v4s_flashmla_attention_takes_fp8_only_and_auto_from_030():
    # vllm==0.29.0 vllm/models/deepseek_v4/attention.py:102-108: the fp8_ds_mla layout asserts an fp8 dtype, so auto
    # stops vLLM; vllm==0.30.0 :107-117 takes auto as fp8 and refuses bfloat16. FlashMLA is V4's attention on SM90 and
    # SM10x unless FlashInfer's is named (vllm/models/deepseek_v4/nvidia/model.py); SM12x runs FlashInfer's SM120
    # attention, whose layout is fp8_ds_mla too (vllm==0.29.0 vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py:533).
    v4 = {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 8, "enable-expert-parallel": True}
    with pytest.raises(RecipeError, match="kv-cache-dtype: auto: vLLM 0.29.0 refuses to start: DeepSeek-V4's attention on H200") as refused:
        planned(**v4 | {"vllm-version": "0.29.0"})
    assert "(vllm==0.29.0 vllm/models/deepseek_v4/attention.py:102-108" in str(refused.value)  # the release's rule
    assert planned(**v4 | {"vllm-version": "0.30.0"})[1].backend("auto").kv_cache_tokens > 0
    assert planned(**v4 | {"vllm-version": "0.29.0", "kv-cache-dtype": "fp8"})[1].backend("auto").kv_cache_tokens > 0
    with pytest.raises(RecipeError, match="kv-cache-dtype: bfloat16"):
        planned(**v4 | {"gpu": "B200", "kv-cache-dtype": "bfloat16"})
    assert planned(**v4 | {"gpu": "B200", "vllm-version": "0.29.0", "attention-backend": "FLASHINFER_MLA_SPARSE_DSV4"}
                   )[1].backend("auto").kv_cache_tokens > 0
    sm120 = v4 | {"gpu": "RTX PRO 6000", "vllm-version": "0.29.0", "tensor-parallel-size": 4}
    with pytest.raises(RecipeError, match="kv-cache-dtype: auto: .*RTX PRO 6000 stores fp8_ds_mla"):
        planned(**sm120)
    assert planned(**sm120 | {"kv-cache-dtype": "fp8"})[1].backend("auto").kv_cache_tokens > 0


def test_rocm_dspark_before_029_runs_v2_which_estimates_nothing():
    # DSpark forces Model Runner V2 from 0.25.0 (vllm/config/vllm.py:524-532); V2's estimate is 0 until 0.29.0
    v4 = {"model": "DeepSeek-V4-Flash-0731", "gpu": "MI300X", "tensor-parallel-size": 4,
          "speculative-config": {"method": "dspark", "num_speculative_tokens": 3}}
    assert not resolve(load(v4 | {"vllm-version": "0.28.0"})).cudagraph_estimate.subtracted
    assert resolve(load(v4 | {"vllm-version": "0.29.0"})).cudagraph_estimate.subtracted


@pytest.mark.parametrize("version, width, element", [("0.32.0", 163_840, 4), ("0.33.0", 164_352, 6)])
def test_decode_logits_are_fp32_before_033_and_bf16_plus_copy_on_sm100_after(version, width, element):
    # 0.32.0: FP32 logits on every arch (vllm/utils/deep_gemm.py:730-732), DeepGEMM's 256-column splits:
    # 163,840 = 640 x 256. 0.33.0: BF16 on SM100, 1536-column strides: 164,352 = 107 x 1536; + the FP32 copy.
    _, plan = planned(model="DeepSeek-V3.2", gpu="B200", **{"tensor-parallel-size": 8, "vllm-version": version})
    logits = plan.backend("auto").decode_logits
    assert (logits.padded_columns, logits.bytes_per_element) == (width, element)


@pytest.mark.parametrize("settings, rows", [
    # max-num-seqs 100, no speculation, B200 (ceiling 1024): limit min(100 x 2, 1024) = 200; the grid's largest
    # multiple of 8 up to min(100, 200) is 96; 0.31.0 also captures max_num_seqs itself (vllm/config/vllm.py:2539)
    ({"max-num-seqs": 100, "vllm-version": "0.30.0"}, 96),
    ({"max-num-seqs": 100, "vllm-version": "0.31.0"}, 100),
    # max-num-seqs 100, k = 2 (3 tokens a request): limit min(100 x 3 x 2, 1024) = 600, worst case 300 rows; the
    # grid's largest multiple of 3 up to 300 is 288; from 0.29.0 whole requests n x 3 with n = 100 (the request
    # grid's top, min(max_num_seqs, 1024)) give 300 (vllm/config/vllm.py:2030-2037)
    ({"max-num-seqs": 100, "vllm-version": "0.28.0", "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}},
     288),
    ({"max-num-seqs": 100, "vllm-version": "0.29.0", "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}},
     300),
    # max-num-batched-tokens 400 below the limit (min(512 x 2, 512) = 512 on SM90 at 0.20.x), 512 seqs: the grid's
    # largest is 400 (a multiple of 16 from 256) either way; 392 max tokens shows the difference: 0.20.1 captures
    # max_num_batched_tokens itself (vllm==0.20.1 vllm/config/vllm.py:1527-1532), 0.20.0 only the grid's 384
    ({"gpu": "H200", "max-num-seqs": 512, "max-num-batched-tokens": 392, "vllm-version": "0.20.0"}, 384),
    ({"gpu": "H200", "max-num-seqs": 512, "max-num-batched-tokens": 392, "vllm-version": "0.20.1"}, 392),
])
def test_the_largest_capture_size_follows_each_releases_grid(settings, rows):
    recipe = load({"model": "GLM-5", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8"} | settings)
    assert resolve(recipe).cudagraph_logits_rows == rows


def test_block_stride_aligned_to_656_bytes_from_031_on_sm10x_flashmla():
    # fp8_ds_mla on FlashMLA-sparse, SM10x: 61 x (656 + 132) x 64 = 3,076,352 B a block, rounded up to a multiple
    # of 656 from 0.31.0 (vllm/v1/core/kv_cache_utils.py:1622-1632): 4,690 x 656 = 3,076,640
    v32 = {"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8_ds_mla"}
    assert planning.plan(load(v32 | {"vllm-version": "0.30.0"})).memory.kv.block_bytes == 3_076_352
    assert planning.plan(load(v32 | {"vllm-version": "0.31.0"})).memory.kv.block_bytes == 3_076_640


def test_before_0201_the_logged_tokens_are_blocks_times_block_tokens_times_dcp():
    # vllm==0.20.0 vllm/v1/core/kv_cache_utils.py:1694-1711: num_blocks // groups x 64, x PCP x DCP. GLM-5.1 bf16 on
    # H200 (FLASHMLA_SPARSE), an indexer on every layer before 0.24.0: 78 x (1152 + 132) x 64 = 6,409,728 B a block;
    # 10 GiB // 6,409,728 = 1,675 blocks, one group: 1,675 x 64 = 107,200 tokens, x DCP 2 = 214,400.
    glm = {"model": "GLM-5.1-FP8", "gpu": "H200", "tensor-parallel-size": 8, "vllm-version": "0.20.0",
           "kv-cache-memory-bytes": 10 * 2**30}
    plan = planning.plan(load(glm))
    assert (plan.memory.kv.block_bytes, plan.backend("auto").kv_cache_tokens) == (6_409_728, 107_200)
    assert planning.plan(load(glm | {"decode-context-parallel-size": 2})).backend("auto").kv_cache_tokens == 214_400


@pytest.mark.parametrize("log, releases", [
    ("glm-5.1-fp8-8xh200-tp8-v0.20.0.log", ["0.20.0"]),  # gpu_worker.py:440, kv_cache_utils.py:1711
    ("glm-5.1-fp8-8xh200-tp8-v0.19.1rc1.log", ["0.19.0", "0.19.1"]),  # gpu_worker.py:436, kv_cache_utils.py:1319
    ("deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log", ["0.25.0", "0.25.1"]),
])
def test_the_log_stamps_name_the_release(log, releases):
    assert read_log_file(LOGS / log, "log").releases == releases


def test_the_stamp_table_is_read_from_every_release():
    table = json.loads((Path(capacity.__file__).parent / "log_stamps.json").read_text())["releases"]
    from dsa_kvcalc.engine import RELEASES
    assert list(table) == list(RELEASES)
    assert table["0.26.0"]["gpu_worker.py:560"] == "Available KV cache memory"  # the GLM-5.2 GB200 log's stamp


@pytest.mark.parametrize("spelled, gpu", [
    ("NVIDIA H100", "H100"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200 SXM", "H200"), ("NVIDIA GH200", "GH200"), ("NVIDIA DGX Spark", "GB10"), ("DGX Spark", "GB10"),
    ("NVIDIA RTX PRO 6000 Blackwell", "RTX PRO 6000"), ("AMD_Instinct_MI300X", "MI300X"),
    # as the development records write them (dsa_kvcalc/records.py)
    ("NVIDIA RTX PRO 6000 Blackwell (96 GB)", "RTX PRO 6000"), ("NVIDIA H200 NVL (143,771 MiB)", "H200 NVL"),
    ("NVIDIA H100 Mega 80GB", "H100"), ("NVIDIA GH200 (96 GB)", "GH200"), ("NVIDIA H20 (SM90, 95 GiB)", "H20"),
    ("2x NVIDIA DGX Spark / GB10", "GB10"), ("NVIDIA H200 SXM (143,771 MiB), NVLink mesh", "H200"),
])
def test_gpu_names_as_people_and_vllm_write_them(spelled, gpu):
    assert load({"model": "DeepSeek-V3.2", "gpu": spelled, "tensor-parallel-size": 8}).gpu.name == gpu


def test_an_unknown_gpu_gets_the_closest_and_an_unsupported_one_the_reason():
    with pytest.raises(RecipeError, match="closest: H200"):
        load({"model": "DeepSeek-V3.2", "gpu": "H2000"})
    with pytest.raises(RecipeError, match="sm80"):
        load({"model": "DeepSeek-V3.2", "gpu": "NVIDIA A100-SXM4-80GB"})


def test_a_default_that_moves_the_answer_is_named_with_how_far():
    # DeepSeek-V4's window pages grow with max-num-batched-tokens (cdiv(127 + 2 x tokens, 64) + 1 pages a window
    # group): at 1,048,576 tokens on H20 the default 8192 against 2048 moves the logged tokens by far more than 1 %.
    recipe = load({"model": "DeepSeek-V4-Flash", "gpu": "H20", "tensor-parallel-size": 2, "max-model-len": 131072})
    moved = {(i.field, i.other) for i in planning.default_impacts(recipe)}
    assert ("max_num_batched_tokens", 2048) in moved and ("async_scheduling", False) in moved
    given = load({"model": "DeepSeek-V4-Flash", "gpu": "H20", "tensor-parallel-size": 2, "max-model-len": 131072,
                  "max-num-batched-tokens": 8192, "async-scheduling": True})
    assert planning.default_impacts(given) == []


def test_pipeline_stages_split_the_layers_as_vllm_does_and_the_fullest_stage_decides():
    # get_pp_indices (vllm==0.33.0 vllm/distributed/utils.py:198-239): 61 // 4 = 15 a stage, the one left over on
    # the second-last: [15, 15, 16, 15]. V3.2 bf16 on H200: 16 x (1152 + 132) x 64 = 1,314,816 B a block; the MTP
    # layer joins the last stage: 15 + 1 layers, no stage above 16.
    from dsa_kvcalc.kv_cache import stage_layers
    assert [len(s) for s in stage_layers(61, 4)] == [15, 15, 16, 15]
    assert [len(s) for s in stage_layers(78, 2)] == [39, 39]
    v32 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "pipeline-parallel-size": 4,
           "vllm-version": "0.30.0"}  # before the block stride alignments of 0.31.0
    assert planning.plan(load(v32)).memory.kv.block_bytes == 16 * (1152 + 132) * 64
    mtp = v32 | {"speculative-config": {"method": "mtp", "num_speculative_tokens": 1}, "pipeline-parallel-size": 2}
    # PP2: [31, 30], the one left over on the second-last (the first); the last holds 30 + the MTP layer: 31 either way
    assert planning.plan(load(mtp)).memory.kv.block_bytes == 31 * (1152 + 132) * 64


def test_glm51_pp2_record_is_one_stage_of_39_layers():
    # records.py (a GitHub README on GKE's A3 Mega): GLM-5.1 fp8 on H100 (A3 Mega) TP8 x PP2, vLLM 0.19.0: 858,048 tokens = 13,407 blocks x 64 (before
    # 0.20.1 the tokens are blocks x block tokens), 4.23x at 202,752 = 13,407 / 3,168 pages. A stage of 39 layers of
    # fp8_ds_mla and indexer pages costs 39 x (656 + 132) x 64 B a block: 13,407 of them are 24.56 GiB.
    recipe = load({"model": "GLM-5.1-FP8", "gpu": "NVIDIA H100 Mega 80GB", "tensor-parallel-size": 8,
                   "pipeline-parallel-size": 2, "kv-cache-dtype": "fp8", "vllm-version": "0.19.0",
                   "kv-cache-memory-bytes": 13_407 * 39 * 788 * 64})
    plan = planning.plan(recipe)
    assert plan.memory.kv.block_bytes == 39 * 788 * 64
    assert plan.backend("auto").kv_cache_tokens == 858_048


@pytest.mark.parametrize("settings, backend, block", [
    # V3.2, BF16 cache, H200: FlashAttention's sparse MLA from 0.25.0 (vllm==0.25.0 vllm/platforms/cuda.py:134-142);
    # 61 x (1152 + 132) x 64 = 5,012,736 B. From 0.32.0 V3.2's layer-outer layout pads each layer's page alone
    # (vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1515-1531): the MLA page, 64 x 1152 = 73,728 B, is already a
    # multiple of its 1152-B row and the indexer's 8,448 B aligns to 1, so the sum is unchanged (rounding the sum to
    # 1152, as 0.31.0's rule would, gives 4,352 x 1152 = 5,013,504)
    ({"gpu": "H200", "vllm-version": "0.31.0"}, "FLASH_ATTN_MLA_SPARSE", 5_012_736),
    ({"gpu": "H200", "vllm-version": "0.32.0"}, "FLASH_ATTN_MLA_SPARSE", 5_012_736),
    # ... and FlashMLA's in 0.24.0, which 0.31.0 already aligns as a flat cache (mla_attention.py:751-756)
    ({"gpu": "H200", "vllm-version": "0.24.0"}, "FLASHMLA_SPARSE", 5_012_736),
    # V3.2, fp8 on B200: FlashInfer's standard fp8, 61 x (576 + 132) x 64 = 2,764,032 B; one 576-B row in 0.31.0:
    # 4,799 x 576 = 2,764,224; from 0.32.0 each layer's page alone is padded to 32 rows (18,432 B, its kernel's
    # MultipleOf(32) pages), which 64 x 576 = 36,864 already is: 61 x (36,864 + 8,448) = 2,764,032 again (the
    # whole sum rounded to 18,432 would be 150 x 18,432 = 2,764,800)
    ({"gpu": "B200", "kv-cache-dtype": "fp8", "vllm-version": "0.30.0"}, "FLASHINFER_MLA_SPARSE", 2_764_032),
    ({"gpu": "B200", "kv-cache-dtype": "fp8", "vllm-version": "0.31.0"}, "FLASHINFER_MLA_SPARSE", 2_764_224),
    ({"gpu": "B200", "kv-cache-dtype": "fp8", "vllm-version": "0.32.0"}, "FLASHINFER_MLA_SPARSE", 2_764_032),
])
def test_mla_blocks_align_to_the_rows_each_backend_reads(settings, backend, block):
    plan = planning.plan(load({"model": "DeepSeek-V3.2", "tensor-parallel-size": 8} | settings))
    assert (plan.memory.sparse_mla_backend, plan.memory.kv.block_bytes) == (backend, block)


@pytest.mark.parametrize("model, heads", [("GLM-5", 64), ("DeepSeek-V3.2", 128), ("GLM-5.3", 64),
                                          ("DeepSeek-V4-Flash", 64), ("DeepSeek-V4-Pro", 128)])
def test_tensor_parallelism_must_divide_the_attention_heads(model, heads):
    # vllm==0.33.0 vllm/config/model.py:1557-1564 (vllm==0.19.0 :1111-1116): "Total number of attention heads must be
    # divisible by tensor parallel size"; the heads are each config's num_attention_heads
    with pytest.raises(RecipeError, match=f"tensor-parallel-size: 3 does not divide .*'s {heads} attention heads"):
        resolve(load({"model": model, "gpu": "B200", "tensor-parallel-size": 3}))
    resolve(load({"model": model, "gpu": "B200", "tensor-parallel-size": 4}))


CAPTURE = "compilation-config.max_cudagraph_capture_size"


@pytest.mark.parametrize("compilation, refused", [
    # vllm==0.33.0 vllm/config/vllm.py:2560-2624: given sizes are de-duplicated and cut to max_num_batched_tokens
    # (8192 here); a max_cudagraph_capture_size given beside them must equal the largest left, or ValueError
    ({"cudagraph_capture_sizes": [1, 2, 4, 8, 1536], "max_cudagraph_capture_size": 1536}, None),
    ({"cudagraph_capture_sizes": [1, 2, 4, 8], "max_cudagraph_capture_size": 1536}, "1536 is not 8, the largest"),
    ({"cudagraph_capture_sizes": [4, 8192, 8192], "max_cudagraph_capture_size": 8192}, None),
    ({"cudagraph_capture_sizes": [4, 8193], "max_cudagraph_capture_size": 8193}, "8193 is not 4, the largest"),
    # only the sizes given: vLLM sets the largest itself; only the largest given: it builds its grid below it
    ({"cudagraph_capture_sizes": [1, 2, 4, 8]}, None),
    ({"max_cudagraph_capture_size": 1}, None),
    # :2552-2557: min(max_num_batched_tokens, 0) = 0 fails "Maximum cudagraph size should be greater than or equal
    # to 1 when using cuda graph"
    ({"max_cudagraph_capture_size": 0}, "0 captures no CUDA graph"),
    # :2447-2451: without CUDA graphs none of this is checked
    ({"cudagraph_mode": "NONE", "max_cudagraph_capture_size": 0}, None),
    ({"cudagraph_mode": "NONE", "cudagraph_capture_sizes": [8], "max_cudagraph_capture_size": 16}, None),
])
def test_vllm_refuses_capture_sizes_it_cannot_reconcile(compilation, refused):
    recipe = {"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "max-num-batched-tokens": 8192,
              "compilation-config": compilation}
    if refused is None:
        resolve(load(recipe))
    else:
        with pytest.raises(RecipeError, match=f"{CAPTURE}: {refused}"):
            resolve(load(recipe))


@pytest.mark.parametrize("keys, largest", [
    # sizes given up to max_num_batched_tokens itself (vllm==0.33.0 vllm/config/vllm.py:2567-2569: i <= max_num_tokens)
    ({"max-num-batched-tokens": 256, "compilation-config": {"cudagraph_capture_sizes": [64, 256]}}, 256),
    # a largest size of 1: the one graph of one token (:2552-2557 needs >= 1)
    ({"compilation-config": {"max_cudagraph_capture_size": 1}}, 1),
    # a largest size of 601 takes the grid's 592 below it (multiples of 16 from 256), then 512 decode rows
    ({"compilation-config": {"max_cudagraph_capture_size": 601}}, 512),
    # 0.29.0+, k = 2, 100 sequences, 80 batched tokens: the sizes stop at 80 (captured itself); 78 = 26 x 3 and
    # 75 = 25 x 3 are no grid size rounded up (73-78 hold no multiple of 8) and 25, 26 no request count on its grid
    # (1, 2, 4, multiples of 8, and the count 100 itself): 72 = 24 x 3
    ({"max-num-seqs": 100, "max-num-batched-tokens": 80, "performance-mode": "interactivity",
      "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}}, 72),
])
def test_capture_sizes_at_their_edges(keys, largest):
    recipe = {"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "max-num-seqs": 512} | keys
    assert resolve(load(recipe)).cudagraph_logits_rows == largest


def test_enforce_eager_and_deepinfer_are_not_held_to_vllms_capture_sizes():
    # under enforce-eager vLLM drops CUDA graphs before the check (vllm==0.33.0 vllm/config/vllm.py:2005-2010): a
    # largest size of 0 loads, and no graph is captured or subtracted. The check is vLLM's, not DeepInfer's: sizes
    # [8] with a largest of 16 load, and the one size given, 8, is the largest graph
    eager = load({"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "enforce-eager": True,
                  "compilation-config": {"max_cudagraph_capture_size": 0}})
    eager_deployment = resolve(eager)
    assert (eager_deployment.cudagraph_logits_rows, eager_deployment.cudagraph_estimate.subtracted) == (0, False)
    deepinfer = load({"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "engine": "deepinfer",
                      "compilation-config": {"cudagraph_capture_sizes": [8], "max_cudagraph_capture_size": 16}})
    assert resolve(deepinfer).cudagraph_logits_rows == 8


@pytest.mark.parametrize("keys", [{"enforce-eager": True}, {"compilation-config": {"cudagraph_mode": "NONE"}}])
def test_no_graph_estimate_is_subtracted_where_no_graph_is_captured(keys):
    # vllm==0.20.0 vllm/v1/worker/gpu_worker.py:379-385 (vllm==0.33.0 :700-709): profile_cudagraph_memory runs only
    # where cudagraph_mode is not NONE, which enforce-eager makes it
    glm = {"model": "GLM-5.1-FP8", "gpu": "H200", "tensor-parallel-size": 8}
    assert resolve(load(glm)).cudagraph_estimate.subtracted
    assert not resolve(load(glm | keys)).cudagraph_estimate.subtracted


# The sparse MLA backend a release picks -------------------------------------------------------------------------------

def test_sm10x_bf16_picks_flashinfer_at_16_heads_a_rank_and_flashmla_above():
    # vllm==0.32.0 vllm/platforms/cuda.py:109-117: a BF16 cache on SM10x prefers FLASHINFER_MLA_SPARSE when the layer
    # has num_heads <= 16 (per rank), else FLASHMLA_SPARSE. DeepSeek-V3.2 has 128 heads: TP8 gives 16, TP4 gives 32.
    base = {"model": "DeepSeek-V3.2", "gpu": "B200", "vllm-version": "0.32.0"}
    assert deployment.sparse_mla_backend(load(base | {"tensor-parallel-size": 8})) == "FLASHINFER_MLA_SPARSE"
    assert deployment.sparse_mla_backend(load(base | {"tensor-parallel-size": 4})) == "FLASHMLA_SPARSE"


def test_sm10x_bf16_takes_flashmla_from_17_heads_a_rank(tmp_path):
    # vllm==0.32.0 vllm/platforms/cuda.py:109-117 (num_heads <= 16 prefers FlashInfer): a local config of 34 heads at
    # TP2 runs 17 a rank, FLASHMLA_SPARSE; 32 heads at TP2 run 16, FLASHINFER_MLA_SPARSE
    for heads, backend in ((34, "FLASHMLA_SPARSE"), (32, "FLASHINFER_MLA_SPARSE")):
        config = tmp_path / str(heads) / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64,
                                      "index_head_dim": 128, "index_topk": 2048, "num_attention_heads": heads}))
        recipe = load({"model": str(config), "gpu": "B200", "tensor-parallel-size": 2, "vllm-version": "0.32.0"})
        assert deployment.sparse_mla_backend(recipe) == backend


# vLLM's defaults as the release derives them --------------------------------------------------------------------------

V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}


def test_the_default_batched_tokens_are_capped_by_the_given_max_num_seqs():
    # vllm==0.33.0 vllm/engine/arg_utils.py:3219-3224: the default max_num_batched_tokens is at most max_num_seqs x
    # max_model_len, with max_num_seqs as given: the H200's tier (>= 70 GiB: 8192 tokens, vllm/engine/arg_utils.py
    # get_batch_defaults) capped at 4 x 1024 = 4096 (the tier's own 1024 sequences would leave 8192)
    recipe = load(V32_H200 | {"max-model-len": 1024, "max-num-seqs": 4})
    assert (recipe.max_num_batched_tokens, recipe.max_num_seqs) == (4096, 4)


def test_batched_dp_moe_needs_more_than_one_data_parallel_rank():
    # vllm==0.33.0 vllm/config/parallel.py:796-805: use_batched_dp_moe needs deepep_low_latency or nixl_ep, expert
    # parallelism and data_parallel_size > 1; at DP 1 the H200's tier stays, 8192 tokens (not 256)
    recipe = load(V32_H200 | {"enable-expert-parallel": True, "all2all-backend": "deepep_low_latency"})
    assert recipe.max_num_batched_tokens == 8192
    dp2 = load(V32_H200 | {"tensor-parallel-size": 4, "data-parallel-size": 2, "enable-expert-parallel": True,
                           "all2all-backend": "deepep_low_latency"})
    assert dp2.max_num_batched_tokens == 256


def test_an_mxfp4_indexer_cache_off_sm10x_is_refused_from_020():
    # vllm==0.20.0 vllm/v1/attention/backends/mla/indexer.py:255-265: DeepseekV32IndexerMetadataBuilder.__init__
    # asserts "use_fp4_indexer_cache requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200)", and
    # DeepseekV4IndexerBackend (:158) keeps that builder: DeepSeek-V4 (0.20.0+) with the flag stops on an H200 in
    # every release that has it, and plans on a B200
    v4 = {"model": "DeepSeek-V4-Flash", "data-parallel-size": 4, "enable-expert-parallel": True,
          "kv-cache-dtype": "fp8", "attention-config": {"use_fp4_indexer_cache": True}}
    for version in ("0.20.0", "0.21.0", "0.22.0"):
        with pytest.raises(Refusal, match="use_fp4_indexer_cache: mxfp4 on H200 .sm90.: .* needs Blackwell"):
            planning.plan(load(v4 | {"gpu": "H200", "vllm-version": version}))
        assert planning.plan(load(v4 | {"gpu": "B200", "vllm-version": version})).memory.kv.block_bytes > 0
