"""catalog.py's data, each against its source: a config.json, a torch or vLLM print, DeepGEMM's layout rules."""

import dataclasses
import json

import pytest

from conftest import ROOT
from dsa_kvcalc import capacity, deployment, memory_terms, planning, weights
from dsa_kvcalc.catalog import GPUS, KPOOL_INDEXER, LAYOUTS, MODELS
from dsa_kvcalc.recipe import RecipeError, load
from dsa_kvcalc.vllm_log import read_log_file

MIB = 1 << 20
MODEL = {m.name: m for m in MODELS}


CONFIGS = ROOT / "oracle" / "configs"  # the config.json of each catalog model, as its source gives it (SOURCES.md)


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name.replace('/', '--')}.json").read_text())


COPIED = [m.name for m in MODELS if (CONFIGS / f"{m.name.replace('/', '--')}.json").exists()]
# Re-quantizations of another catalog model: the same config but its quantization_config (vllm-project/recipes
# models/zai-org/GLM-5.1.yaml and GLM-5.2.yaml, variant mxfp4: AMD Quark's MXFP4 re-quantization; GLM-5.3.yaml,
# variant nvfp4: Inferact's NVFP4 re-quantization)
REQUANTIZED = {"amd/GLM-5.1-MXFP4": "zai-org/GLM-5.1-FP8", "amd/GLM-5.2-MXFP4": "zai-org/GLM-5.2-FP8",
               "Inferact/GLM-5.3-NVFP4": "zai-org/GLM-5.3"}
# the catalog's field -> the config.json key vLLM's config classes read it from: every config gives these
GIVEN = {"num_layers": "num_hidden_layers", "mtp_layers": "num_nextn_predict_layers", "hidden_size": "hidden_size",
         "index_n_heads": "index_n_heads", "index_head_dim": "index_head_dim", "index_topk": "index_topk",
         "max_position_embeddings": "max_position_embeddings", "num_attention_heads": "num_attention_heads"}
# and these where the config gives them
WHERE_GIVEN = {"sliding_window": "sliding_window", "index_topk_freq": "index_topk_freq",
               "index_skip_topk_offset": "index_skip_topk_offset", "index_kpool": "index_kpool",
               "kv_source_layers": "kv_source_layer_ids", "index_source_layers": "index_source_layer_ids",
               "candidate_topk_blocks": "candidate_topk_blocks"}


def shape(model) -> dict:
    return {field: getattr(model, field) for field in (*GIVEN, *WHERE_GIVEN, "compress_ratios", "linear_layers",
                                                        "linear_heads", "linear_head_dim", "linear_conv_kernel")}


@pytest.mark.parametrize("name", COPIED, ids=lambda name: name.split("/")[-1])
def test_models_as_their_config_json_gives_them(name):
    model, given = MODEL[name], config(name)
    for field, key in GIVEN.items():
        assert getattr(model, field) == given[key], field
    for field, key in WHERE_GIVEN.items():
        if key in given:
            value = given[key]
            assert getattr(model, field) == (tuple(value) if isinstance(value, list) else value), field
    # compress_ratios lists the target layers, then the MTP (and DSpark) layers'
    assert model.compress_ratios == tuple(given.get("compress_ratios", ())[:given["num_hidden_layers"]])
    # GLM-5.3-Flash's linear_attn_config: KDA layers where layer_types says linear_attention, their heads and conv
    linear = given.get("linear_attn_config", {})
    assert model.linear_layers == tuple(n for n, kind in enumerate(given.get("layer_types", ()))
                                        if kind == "linear_attention") == tuple(linear.get("kda_layers", ()))
    assert (model.linear_heads, model.linear_head_dim, model.linear_conv_kernel) == (
        linear.get("num_heads", 0), linear.get("head_dim", 0), linear.get("short_conv_kernel_size", 0))


def test_every_model_has_its_config_json_or_is_a_requantization_of_one():
    assert sorted(COPIED + list(REQUANTIZED)) == sorted(m.name for m in MODELS)
    for name, base in REQUANTIZED.items():
        assert shape(MODEL[name]) == shape(MODEL[base]), name


@pytest.mark.parametrize("model", ["DeepSeek-V4-Flash", "DeepSeek-V4-Flash-0731", "DeepSeek-V4-Pro"])
def test_deepseek_v4_windows_and_indexer_keys(model):
    # vLLM's indexer, and DeepInfer's, score the ratio-4 compressed keys: config.json's 1,048,576 positions // 4 =
    # 262,144 columns
    assert config(f"deepseek-ai/{model}")["max_position_embeddings"] // 4 == 262_144
    for engine in ("vllm", "deepinfer"):
        plan = planning.plan(load({"model": model, "gpu": "B300", "tensor-parallel-size": 8, "engine": engine}))
        assert plan.backends[0].decode_logits.columns == 262_144


def test_v41_runs_from_030():
    # vllm==0.30.0 vllm/model_executor/models/registry.py:379 adds DeepseekV41ForCausalLM (0.29.0 has none)
    v41 = {"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 4, "enable-expert-parallel": True}
    with pytest.raises(RecipeError, match="predates"):
        load(v41 | {"vllm-version": "0.29.0"})
    load(v41 | {"vllm-version": "0.30.0"})


def test_v4_pro_compresses_as_its_config_lists():
    # config.json's compress_ratios: 128, 128, then 29 pairs of 4, 128, then 4 (and the MTP layer's 0): 30 ratio-4
    # layers of (37,440 + 8,640) B and 31 ratio-128 layers of 1,728 B a 256-token block: 1,435,968 B, the largest group
    assert config("deepseek-ai/DeepSeek-V4-Pro")["compress_ratios"] == [128, 128] + [4, 128] * 29 + [4, 0]
    plan = planning.plan(load({"model": "DeepSeek-V4-Pro", "gpu": "B200", "tensor-parallel-size": 8,
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
    # (free/total GiB)" print, as each GPU's source in the catalog quotes them (no measurement of these here; the
    # H200, GB200 and B300 are checked against one below)
    ("H100", "sm90", 81_089 * MIB), ("H100 PCIe", "sm90", 81_008 * MIB), ("H100 NVL", "sm90", 93.00),
    ("H20", "sm90", 97_285 * MIB), ("GH200", "sm90", 94.88), ("B200", "sm100", 182_631 * MIB),
    ("GB300", "sm103", 276.50),
    ("RTX PRO 6000", "sm120", 97_250 * MIB), ("GB10", "sm121", 121.69), ("MI300X", "gfx942", 196_592 * MIB),
    ("MI325X", "gfx942", 255.98), ("MI355X", "gfx950", 287.98),
])
def test_gpu_memory_as_torch_and_vllm_print_it(name, arch, total):
    gpu = next(g for g in GPUS if g.name == name)
    assert (gpu.arch, gpu.total_memory_bytes) == (arch, total if isinstance(total, int) else round(total * 2**30))


@pytest.mark.parametrize("names, measured", [
    # verify --gpu on the lent H200 (tests/fixtures/verify/h200-builtin.json): torch's total_memory; the H200 NVL is
    # the same 141 GB part
    (("H200", "H200 NVL"), ("verify", "h200-builtin.json")),
    # the total of vLLM's "Free memory on device (free/total GiB)" in a startup log (tests/fixtures/vllm_logs)
    (("GB200",), ("log", "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log")),
    (("B300",), ("log", "deepseek-v4-flash-0731-1xb300-tp1-dspark7-v0.26.0.log")),
])
def test_gpu_memory_as_a_measurement_here_gives_it(names, measured):
    kind, file = measured
    if kind == "verify":
        total = json.loads((ROOT / "tests" / "fixtures" / "verify" / file).read_text())["gpu"]["total_memory_bytes"]
    else:
        reading = read_log_file(ROOT / "tests" / "fixtures" / "vllm_logs" / file, "log")
        total_gib, = {rank.total_memory_gib for rank in reading.ranks if rank.total_memory_gib}
        total = round(total_gib * 2**30)
    for name in names:
        assert next(g for g in GPUS if g.name == name).total_memory_bytes == total


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
    load(v4 | {"vllm-version": "0.20.0"})
    # the preview checkpoint has no DSpark block (no dspark_target_layer_ids, which the drafter reads, and no
    # parallel-drafting token, whose absence vLLM's runner refuses first): 0731 has
    dspark = load(v4 | {"model": "DeepSeek-V4-Flash-0731",
                        "speculative-config": {"method": "dspark", "num_speculative_tokens": 3}})
    assert deployment.draft_layers(dspark) == 3
    with pytest.raises(RecipeError, match="dspark_noise_token_id"):
        deployment.resolve(load(v4 | {"speculative-config": {"method": "dspark", "num_speculative_tokens": 3}}))


def test_only_glm5_runs_fp8_for_auto_on_sm10x():
    # vllm==0.32.0 vllm/model_executor/models/config.py:49-55 names GlmMoeDsaForCausalLM only: V3.2 stays BF16
    assert load({"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8}).cache_dtype == "auto"


def test_deepinfer_scores_every_key_of_an_mla_model():
    # the seed: max_kv_len = max_model_len // kv_compress_ratio; V3.2 compresses no keys: all 163,840
    plan = planning.plan(load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8,
                               "engine": "deepinfer"}))
    assert plan.backends[0].decode_logits.columns == 163_840


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
