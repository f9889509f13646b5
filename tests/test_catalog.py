"""catalog.py's data, each against its source: a config.json, a torch or vLLM print, DeepGEMM's layout rules."""

import dataclasses
import json

import pytest

from conftest import ROOT
from dsa_kvcalc import capacity, choices, memory_terms, weights
from dsa_kvcalc.catalog import GPUS, KPOOL_INDEXER, LAYOUTS, MODELS
from dsa_kvcalc.recipe import RecipeError, load

MIB = 1 << 20
MODEL = {m.name: m for m in MODELS}


@pytest.mark.parametrize("name, fields", [
    # DeepSeek's reference config (config_671B_v3.2.json): 61 layers, 1 MTP layer, hidden 7168, an indexer of 64
    # heads of 128 picking 2048, 163,840 positions
    ("deepseek-ai/DeepSeek-V3.2", (61, 1, 7168, 64, 128, 2048, 163_840)),
    ("deepseek-ai/DeepSeek-V3.2-Exp", (61, 1, 7168, 64, 128, 2048, 163_840)),
    # ai-dynamo/aiconfigurator zai-org--GLM-5-FP8_config.json: 78 layers, hidden 6144, 202,752 positions; the
    # glm_moe_dsa config's indexer: index_n_heads 32, index_head_dim 128, index_topk 2048, one MTP layer
    ("zai-org/GLM-5-FP8", (78, 1, 6144, 32, 128, 2048, 202_752)),
    ("zai-org/GLM-5.1-FP8", (78, 1, 6144, 32, 128, 2048, 202_752)),
    ("nvidia/GLM-5.1-NVFP4", (78, 1, 6144, 32, 128, 2048, 202_752)),
    # GLM-5.2's config.json: 1,048,576 positions, index_topk_freq 4, index_skip_topk_offset 3
    ("zai-org/GLM-5.2-FP8", (78, 1, 6144, 32, 128, 2048, 1_048_576)),
    ("nvidia/GLM-5.2-NVFP4", (78, 1, 6144, 32, 128, 2048, 1_048_576)),
    # SyFI-ServingStudio/ServingStudioSim model/config/glm53_nvfp4.json (bee7da91): GLM-5.2's numbers again
    ("zai-org/GLM-5.3", (78, 1, 6144, 32, 128, 2048, 1_048_576)),
    # model/config/glm53_flash.json (d8fc2f3a): 45 layers, one MTP layer, hidden 4096, 32 x 128 indexer heads
    ("zai-org/GLM-5.3-Flash", (45, 1, 4096, 32, 128, 2048, 1_048_576)),
    # aiconfigurator nvidia--DeepSeek-V4-Flash-NVFP4_config.json (the same architecture): 43 layers, hidden 4096,
    # 64 x 128 indexer heads, topk 512, 1,048,576 positions; -Pro: 61 layers, hidden 7168, topk 1024
    ("deepseek-ai/DeepSeek-V4-Flash", (43, 1, 4096, 64, 128, 512, 1_048_576)),
    ("deepseek-ai/DeepSeek-V4-Flash-0731", (43, 1, 4096, 64, 128, 512, 1_048_576)),
    ("deepseek-ai/DeepSeek-V4-Pro", (61, 1, 7168, 64, 128, 1024, 1_048_576)),
    # DeepSeek-V4.1-Flash's config (the catalog's copies): 40 layers, 3 MTP layers, hidden 5120
    ("deepseek-ai/DeepSeek-V4.1-Flash", (40, 3, 5120, 32, 128, 512, 1_048_576)),
])
def test_models_as_their_configs_give_them(name, fields):
    m = MODEL[name]
    assert (m.num_layers, m.mtp_layers, m.hidden_size, m.index_n_heads, m.index_head_dim, m.index_topk,
            m.max_position_embeddings) == fields


@pytest.mark.parametrize("model", ["DeepSeek-V4-Flash", "DeepSeek-V4-Flash-0731", "DeepSeek-V4-Pro"])
def test_deepseek_v4_windows_and_indexer_keys(model):
    # config.json sliding_window 128; vLLM's indexer, and DeepInfer's, score the ratio-4 compressed keys:
    # 1,048,576 // 4 = 262,144 columns
    assert MODEL[f"deepseek-ai/{model}"].sliding_window == 128
    for engine in ("vllm", "deepinfer"):
        plan = capacity.plan(load({"model": model, "gpu": "B300", "tensor-parallel-size": 8, "engine": engine}))
        assert plan.backends[0].decode_logits.columns == 262_144


def test_shared_and_compressed_layers_as_the_configs_list_them():
    # GLM-5.2's config: index_topk_freq 4, index_skip_topk_offset 3
    for name in ("zai-org/GLM-5.2-FP8", "nvidia/GLM-5.2-NVFP4", "zai-org/GLM-5.3"):  # GLM-5.3: glm53_nvfp4.json
        assert (MODEL[name].index_topk_freq, MODEL[name].index_skip_topk_offset) == (4, 3)
    # glm53_flash.json linear_attn_config: full_attn_layers 3, 7, ..., 43; kda_layers the other 34 of 45
    full = (3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43)
    assert MODEL["zai-org/GLM-5.3-Flash"].linear_layers == tuple(layer for layer in range(45) if layer not in full)
    # aiconfigurator's V4-Flash config.json: compress_ratios 0, 0, 20 x (4, 128), 4 over the 43 layers
    assert MODEL["deepseek-ai/DeepSeek-V4-Flash"].compress_ratios == (0, 0) + (4, 128) * 20 + (4,)
    # V4.1-Flash: codes 0, 0, 18 x 2, 20 x 1; kv sources 2, 8, 14, 20; index layers 2, 8, 14, 20, 24, 28, 32, 36
    # (vllm==0.33.0 vllm/models/deepseek_v41/amd/mono/keylist.py:5); a 128-token window
    v41 = MODEL["deepseek-ai/DeepSeek-V4.1-Flash"]
    assert v41.compress_ratios == (0, 0) + (2,) * 18 + (1,) * 20 and v41.sliding_window == 128
    assert (v41.kv_source_layers, v41.index_source_layers) == ((2, 8, 14, 20), (2, 8, 14, 20, 24, 28, 32, 36))


def test_v41_runs_from_030():
    # vllm==0.30.0 vllm/model_executor/models/registry.py:379 adds DeepseekV41ForCausalLM (0.29.0 has none)
    v41 = {"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 4, "enable-expert-parallel": True}
    with pytest.raises(RecipeError, match="predates"):
        load(v41 | {"vllm-version": "0.29.0"})
    load(v41 | {"vllm-version": "0.30.0"})


def test_v4_pro_compresses_as_its_config_lists():
    # compress_ratios: 128, 128, then 29 pairs of 4, 128, then 4 (and the MTP layer's 0): 30 ratio-4 layers of
    # (37,440 + 8,640) B and 31 ratio-128 layers of 1,728 B a 256-token block: 1,435,968 B, the largest group
    assert MODEL["deepseek-ai/DeepSeek-V4-Pro"].compress_ratios == (128, 128) + (4, 128) * 29 + (4,)
    plan = capacity.plan(load({"model": "DeepSeek-V4-Pro", "gpu": "B200", "tensor-parallel-size": 8,
                               "kv-cache-dtype": "fp8", "vllm-version": "0.28.0"}))
    assert plan.memory.kv.block_bytes == 30 * (37_440 + 8640) + 31 * 1728


@pytest.mark.parametrize("model", [m.name for m in MODELS if m.name in weights.data()["models"]],
                         ids=lambda name: name.split("/")[-1])
def test_vllms_routed_experts_are_the_configs_arithmetic(model):
    # vLLM's RoutedExperts at one expert rank (weights.json, the meta build; V4.1's DSpark experts beside them) against
    # the config's shapes (catalog.py): MoE layers x n_routed_experts x 3 x hidden x moe_intermediate_size, FP8 with a
    # 4 B scale per 128 x 128 block, MXFP4 at 17/32 B, NVFP4 at 9/16 of FP8's. NVFP4's global scales and V4.1's
    # per-32 UE8M0 scales (the recipe guide's rounded table) come within 0.03 %.
    entry = weights.data()["models"][model]
    built = sum(entry["expert_layer_bytes"]) + entry["drafts"].get("dspark", {}).get("expert_bytes", 0) * (
        MODEL[model].family == "deepseek_v41")
    assert abs(built / MODEL[model].routed_expert_bytes - 1) < 0.0003


def test_a_model_not_built_shards_its_config_shapes_over_tp_x_dp():
    # GLM-5.3-Flash (no config copy built: oracle/configs/SOURCES.md): (45 - 3) x 288 x 3 x 4096 x 2048 x 4097 / 4096 =
    # 304,480,124,928 of its 306 GiB (328,564,998,144 B), split over DP 4 with expert parallelism or without
    for expert_parallel in (True, False):
        recipe = load({"model": "GLM-5.3-Flash", "gpu": "B300", "data-parallel-size": 4,
                       "enable-expert-parallel": expert_parallel})
        estimate = memory_terms.weights_estimate(recipe).bytes
        assert estimate == 328_564_998_144 - 304_480_124_928 + 304_480_124_928 // 4 and type(estimate) is int


@pytest.mark.parametrize("name, arch, total", [
    # torch's total_memory in MiB, or the GiB (2^30) that torch OOM messages and vLLM's "Free memory on device
    # (free/total GiB)" print, as each GPU's source in the catalog quotes them
    ("H100", "sm90", 81_089 * MIB), ("H100 PCIe", "sm90", 81_008 * MIB), ("H100 NVL", "sm90", 93.00),
    ("H200", "sm90", 150_109_880_320), ("H200 NVL", "sm90", 150_109_880_320),  # measured on the lent H200
    ("H20", "sm90", 97_285 * MIB), ("GH200", "sm90", 94.88), ("B200", "sm100", 182_631 * MIB),
    ("GB200", "sm100", 184.31), ("B300", "sm103", 267.69), ("GB300", "sm103", 276.50),
    ("RTX PRO 6000", "sm120", 97_250 * MIB), ("GB10", "sm121", 121.69), ("MI300X", "gfx942", 196_592 * MIB),
    ("MI325X", "gfx942", 255.98), ("MI355X", "gfx950", 287.98),
])
def test_gpu_memory_as_torch_and_vllm_print_it(name, arch, total):
    gpu = next(g for g in GPUS if g.name == name)
    assert (gpu.arch, gpu.total_memory_bytes) == (arch, total if isinstance(total, int) else round(total * 2**30))


@pytest.mark.parametrize("layout, columns, stride", [
    # DeepGEMM 2.1-2.6: whole 256-column splits at a 1024 B FP32 stride: 256 stays 256 (255- or 257-column splits
    # would pad it to 510 or 257, then 512)
    (("2.6", "sm100"), 256, 256), (("2.6", "sm90"), 256, 256), (("2.2", "sm100"), 256, 256),
    (("2.2", "sm90"), 256, 256),
    (("rocm", "rocm"), 256, 256),  # the seed: 256-column padding off SM100
    (("nv_dev", "sm120"), 128, 128),  # nv_dev attention.hpp:410-414: align(L, 128)
])
def test_a_width_of_whole_splits_is_not_padded(layout, columns, stride):
    assert capacity.padded_columns(columns, LAYOUTS[layout]) == stride


@pytest.mark.parametrize("gpu, versions", [
    ("MI300X", "ROCm (no DeepGEMM)"),  # ROCm has no DeepGEMM: vLLM's rocm_fp8_paged_mqa_logits
    ("RTX PRO 6000", "nv_dev (vLLM's pin)"),  # SM12x builds only DeepGEMM's nv_dev branch
])
def test_gpus_without_a_deepgemm_release_get_their_own_layout(gpu, versions):
    recipe = load({"model": "DeepSeek-V3.2", "gpu": gpu, "tensor-parallel-size": 8, "enable-expert-parallel": True})
    assert recipe.layout.versions == versions


def test_deepseek_v4_runs_from_020_and_drafts_three_dspark_layers():
    # vllm==0.20.0 vllm/model_executor/models/registry.py adds DeepseekV4ForCausalLM; DSpark drafts n_mtp_layers or 3
    # layers (vllm==0.26.0 vllm/models/deepseek_v4/nvidia/dspark.py:69) for V4-Flash-0731, whose config gives
    # dspark_noise_token_id 128799; the preview V4-Flash's gives none, and vLLM refuses it
    # (vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/utils.py:92-113)
    v4 = {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 4}
    with pytest.raises(RecipeError, match="predates"):
        load(v4 | {"vllm-version": "0.19.1"})
    assert load(v4 | {"vllm-version": "0.20.0"}).model.first_release == "0.20.0"
    # the preview checkpoint has no DSpark block (no dspark_target_layer_ids, which the drafter reads, and no
    # parallel-drafting token, whose absence vLLM's runner refuses first): 0731 has
    dspark = load(v4 | {"model": "DeepSeek-V4-Flash-0731",
                        "speculative-config": {"method": "dspark", "num_speculative_tokens": 3}})
    assert choices.draft_layers(dspark) == 3
    with pytest.raises(RecipeError, match="dspark_noise_token_id"):
        load(v4 | {"speculative-config": {"method": "dspark", "num_speculative_tokens": 3}})


def test_only_glm5_runs_fp8_for_auto_on_sm10x():
    # vllm==0.32.0 vllm/model_executor/models/config.py:49-55 names GlmMoeDsaForCausalLM only: V3.2 stays BF16
    assert load({"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8}).cache_dtype == "auto"


def test_deepinfer_scores_every_key_of_an_mla_model():
    # the seed: max_kv_len = max_model_len // kv_compress_ratio; V3.2 compresses no keys: all 163,840
    plan = capacity.plan(load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8,
                               "engine": "deepinfer"}))
    assert plan.backends[0].decode_logits.columns == 163_840


@pytest.mark.parametrize("name, heads", [
    ("deepseek-ai/DeepSeek-V3.2-Exp", 128),  # config_671B_v3.2.json n_heads 128
    ("zai-org/GLM-5.3", 64),  # glm53_nvfp4.json num_attention_heads 64
    ("zai-org/GLM-5.3-Flash", 64),  # glm53_flash.json num_attention_heads 64
])
def test_attention_heads_as_the_configs_give_them(name, heads):
    assert MODEL[name].num_attention_heads == heads


def test_any_pooled_indexer_is_the_kpool_indexer():
    # vLLM pools the indexer's keys for any index_kpool > 1 (vllm==0.33.0 vllm/models/glm5next/nvidia/sparse_indexer.py:
    # 381-382); a local config may give 2 (hf_config takes powers of two)
    assert dataclasses.replace(MODEL["zai-org/GLM-5.3-Flash"], index_kpool=2).indexer is KPOOL_INDEXER


@pytest.mark.parametrize("model, fp8", [("nvidia/GLM-5.1-NVFP4", True), ("nvidia/GLM-5.2-NVFP4", True),
                                        ("zai-org/GLM-5.1-FP8", False), ("zai-org/GLM-5.3", False)])
def test_a_modelopt_checkpoint_with_an_fp8_kv_scheme_runs_fp8_for_auto(tmp_path, model, fp8):
    # vllm==0.19.0 vllm/utils/torch_utils.py:262-340 (vllm==0.33.0 :443-516): EngineArgs resolves auto from a ModelOpt
    # quantization_config's kv_cache_scheme {dynamic false, num_bits 8, type float} -> "fp8" -> fp8_e4m3, before any
    # model rule, on every GPU. The configs are the oracle's copies of the catalog's sources: the NVFP4 ones give that
    # scheme; GLM-5.1-FP8's is fp8 block quantization (no kv scheme), GLM-5.3's a kv_cache_dtype key vLLM does not read.
    config = json.loads((ROOT / "oracle" / "configs" / f"{model.replace('/', '--')}.json").read_text())
    scheme = config["quantization_config"].get("kv_cache_scheme")
    assert (scheme == {"dynamic": False, "num_bits": 8, "type": "float"}) == fp8
    (tmp_path / "config.json").write_text(json.dumps(config))
    for name in (model, str(tmp_path)):
        for gpu, version in (("H200", "0.19.0"), ("H200", "0.33.0"), ("MI300X", "0.30.0")):
            cache_dtype = load({"model": name, "gpu": gpu, "tensor-parallel-size": 8, "vllm-version": version}).cache_dtype
            assert cache_dtype == ("fp8_e4m3" if fp8 else "auto"), (name, gpu, version)
