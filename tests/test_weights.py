"""Weights per rank (dsa_kvcalc/weights.py): vLLM's model classes built on the meta device (weights.json), sharded as
vLLM shards them, against every "Model loading took" line of the records and against vLLM's own rules.

The construction buffers' formulas are checked against the meta build of the release itself (marked vllm_oracle).
"""

import sys

import pytest

from conftest import ROOT
from dsa_kvcalc import memory_terms, planning, weights
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.recipe import load
from dsa_kvcalc.records import RECORDS
from dsa_kvcalc.units import GIB

sys.path.insert(0, str(ROOT / "oracle"))
sys.path.insert(0, str(ROOT / "tools"))


def weights_of(**raw) -> int:
    return planning.plan(load(raw)).memory.weights.bytes


@pytest.mark.parametrize("layers, stages, partitions", [
    # vllm==0.33.0 vllm/distributed/utils.py:225-230: an even share, the remainder one layer each to the stages before
    # the last, from the second-to-last back: 61 = 15 + 15 + 16 + 15; 43 = 14 + 15 + 14; 78 = 39 + 39
    (61, 4, [15, 15, 16, 15]), (43, 3, [14, 15, 14]), (78, 2, [39, 39]), (61, 1, [61])])
def test_pipeline_stages_split_the_layers_as_get_pp_indices(layers, stages, partitions):
    assert weights.pp_partitions(layers, stages) == partitions


@pytest.mark.parametrize("experts, ranks, local", [(256, 8, 32), (256, 3, 86), (288, 64, 5), (384, 1, 384)])
def test_rank_zero_takes_one_of_the_remainder_experts(experts, ranks, local):
    # vllm==0.33.0 vllm/model_executor/layers/fused_moe/expert_map_manager.py:67-69: base + 1 while rank < remainder
    assert weights.local_experts(experts, ranks) == local


def test_data_parallel_without_expert_parallel_shards_the_experts_over_dp():
    # `vllm serve deepseek-ai/DeepSeek-V3.2 -dp 8` on H200: FusedMoEParallelConfig.make's docstring, "TP = 1, DP = 2
    # and EP = False ... the tensors are sharded across 2 devices" (vllm==0.33.0
    # vllm/model_executor/layers/fused_moe/config.py:1154-1159, flatten_tp_across_dp_and_pcp :1106-1114). It starts,
    # holding what -dp 8 --enable-expert-parallel holds: each rank 1/8 of the 609 GiB of routed experts.
    dp8 = dict(model="deepseek-ai/DeepSeek-V3.2", gpu="H200", **{"data-parallel-size": 8})
    plan = planning.plan(load(dp8))
    assert plan.backend("auto").kv_cache_tokens > 0
    assert plan.memory.weights.bytes == weights_of(**dp8, **{"enable-expert-parallel": True})
    experts = sum(weights.data()["models"]["deepseek-ai/DeepSeek-V3.2"]["expert_layer_bytes"])
    assert 600 * GIB < experts < 620 * GIB
    assert plan.memory.weights.bytes < experts // 8 + 25 * GIB  # the rest, TP 1's 15.3 GiB, replicated


def test_speculative_methods_load_their_draft_layers():
    # V4-Flash-0731 TP8 EP on H200: no drafter, the MTP layer (num_nextn_predict_layers 1) or DSpark's three layers
    # (dspark_target_layer_ids 40-42): each build's drafter, less the embedding and LM head the proposer shares
    v4 = dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="H200", **{
        "tensor-parallel-size": 8, "enable-expert-parallel": True, "kv-cache-dtype": "fp8"})
    none = weights_of(**v4)
    mtp = weights_of(**v4, **{"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}})
    dspark = weights_of(**v4, **{"speculative-config": {"method": "dspark", "num_speculative_tokens": 7}})
    assert none < mtp < dspark
    draft = weights.data()["models"]["deepseek-ai/DeepSeek-V4-Flash-0731"]["drafts"]
    assert draft["dspark"]["expert_bytes"] > 2.5 * draft["mtp"]["expert_bytes"]  # 3 MoE layers against 1


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"])
def test_a_drafter_the_checkpoint_lacks_is_refused_with_vllms_reason(model):
    # DeepSeek-V4's DSpark drafter reads the config's dspark_target_layer_ids (vllm==0.33.0
    # vllm/models/deepseek_v4/nvidia/dspark.py:100); the preview V4-Flash and V4-Pro configs have none, and vLLM's
    # build of it fails there (weights.json)
    assert "dspark_target_layer_ids" in str(weights.data()["models"][model]["drafts"]["dspark"]["refused"])
    with pytest.raises(RecipeError, match="no dspark drafter"):
        planning.plan(load(dict(model=model, gpu="H200", **{
            "tensor-parallel-size": 8, "enable-expert-parallel": True, "kv-cache-dtype": "fp8",
            "speculative-config": {"method": "dspark", "num_speculative_tokens": 3}})))


@pytest.mark.parametrize("model", [m.name for m in MODELS], ids=lambda name: name.split("/")[-1])
def test_every_catalog_model_has_weights_with_their_source(model):
    family = next(m.family for m in MODELS if m.name == model)
    raw = dict(model=model, gpu="B200", **{"tensor-parallel-size": 8})
    if family in ("deepseek_v4", "deepseek_v41"):
        raw |= {"enable-expert-parallel": True, "kv-cache-dtype": "fp8"}
    term = planning.plan(load(raw)).memory.weights
    if model in weights.data()["models"]:
        assert term.provenance == "derived" and "meta device" in term.source, term
    else:  # GLM-5.3-Flash: no config copy built (oracle/configs/SOURCES.md)
        assert term.provenance == "estimated" and "config's shapes" in term.source, term


@pytest.mark.parametrize("record", [r for r in RECORDS if r.weights_gib is not None and not r.fork],
                         ids=lambda r: r.name)
def test_derived_weights_against_every_model_loading_line(record):
    # "Model loading took X GiB" on rank 0 of each log of a vLLM release; vLLM 0.33.0's parameters with the
    # construction buffers of the record's release: within 0.5 % (benchmarks/leave_one_out.py prints the table)
    derived = weights_of(**record.recipe)
    assert abs(derived / (record.weights_gib * GIB) - 1) <= 0.005, derived / GIB


def test_the_forks_checkpoint_is_not_nvidias():
    # The fork's record loads lukealonso/GLM-5.1-NVFP4-MTP, which the catalog takes as nvidia/GLM-5.1-NVFP4 for its KV
    # layout: 70.14 GiB a rank against NVIDIA's derived 58.2 (its own config.json is not stored, so no weights of its
    # own are derived; its B12X kernels allocate an arena besides)
    fork = next(r for r in RECORDS if r.fork)
    assert weights_of(**fork.recipe) < 0.85 * fork.weights_gib * GIB


@pytest.mark.parametrize("raw, construction", [
    # V3.2 TP8 on H200, vLLM 0.33.0, BF16 cache (FlashAttention's sparse MLA: no FlashMLA workspace), 8192 tokens, 256
    # sequences: the top-k buffer 8192 x 2048 x 4 = 67,108,864; W_UK_T and W_UV, 128 / 8 heads x 512 x (128 + 128) x 2
    # = 4,194,304 a layer x 61 = 255,852,544; 61 index groups (every layer indexes) of (min(8192, 256) + 1) rows x
    # (2048 + 1) x 4 = 128,488,692
    (dict(model="deepseek-ai/DeepSeek-V3.2", gpu="H200", **{"tensor-parallel-size": 8, "max-model-len": 131072,
                                                             "max-num-seqs": 256, "vllm-version": "0.33.0"}),
     67_108_864 + 255_852_544 + 128_488_692),
    # GLM-5.1-FP8 TP8 on H200, vLLM 0.20.0, BF16 cache on FlashMLA-sparse: the top-k buffer; 64 / 8 heads x 512 x
    # (192 + 256) x 2 = 3,670,016 a layer x 78 = 286,261,248; the unpadded queries 8192 x 8 x 576 x 2 = 75,497,472; no
    # index groups before 0.30.0
    (dict(model="zai-org/GLM-5.1-FP8", gpu="H200", **{"tensor-parallel-size": 8, "max-num-seqs": 1024,
                                                       "vllm-version": "0.20.0"}),
     67_108_864 + 286_261_248 + 75_497_472),
    # GLM-5.2-NVFP4 TP4 on H200, vLLM 0.33.0, fp8_ds_mla on FlashMLA-sparse: queries 8192 x 16 x 576 x 2 =
    # 150,994,944, the gather 5 x 131,072 x 576 x 2 = 754,974,720, the padded prefill queries and latents 8192 x
    # (64 x 576 + 64 x 512 + 16 x 512) x 2 = 1,275,068,416 (the meta build's 2,181,038,080 B workspace); the top-k
    # buffer; 7,340,032 x 78 = 572,522,496 absorbed; 21 index groups (layers 0-2 and 6, 10, ..., 74) x 257 x 2049 x 4
    # = 44,233,812
    (dict(model="nvidia/GLM-5.2-NVFP4", gpu="H200", **{"tensor-parallel-size": 4, "kv-cache-dtype": "fp8",
                                                        "max-model-len": 131072, "max-num-seqs": 256,
                                                        "vllm-version": "0.33.0"}),
     2_181_038_080 + 67_108_864 + 572_522_496 + 44_233_812),
])
def test_construction_buffers_by_hand(raw, construction):
    recipe = load(raw | {"max-num-batched-tokens": 8192})
    assert weights.construction_bytes(recipe, weights.data()["models"][recipe.model.name]) == construction


def test_v4s_drafter_adds_its_layers_and_the_mtp_hidden_state_buffer():
    # V4-Flash-0731 TP8 EP: the MTP layer (its dense part at TP 8, its 256 experts over 8 ranks) and, with any drafter,
    # the residual stream buffer max_num_batched_tokens x hc_mult 4 x hidden 4096 x 2 B = 268,435,456 at 8192 tokens
    # (vllm==0.33.0 vllm/models/deepseek_v4/nvidia/model.py:903-912)
    v4 = dict(model="deepseek-ai/DeepSeek-V4-Flash-0731", gpu="H200", **{
        "tensor-parallel-size": 8, "enable-expert-parallel": True, "kv-cache-dtype": "fp8",
        "max-num-batched-tokens": 8192})
    mtp = weights.data()["models"]["deepseek-ai/DeepSeek-V4-Flash-0731"]["drafts"]["mtp"]
    mtp_weights = weights_of(**v4, **{"speculative-config": {"method": "mtp", "num_speculative_tokens": 1}})
    added = mtp_weights - weights_of(**v4)
    assert added == mtp["dense_bytes"]["8"] + mtp["expert_bytes"] // 8 + 268_435_456


def test_a_tensor_parallel_size_not_built_takes_the_configs_shapes_and_a_refused_one_is_refused():
    # built at TP 1, 2, 4, 8, 16: TP 32 falls back, estimated; V4.1 at TP 16 vLLM refuses (Engram hash heads)
    term = planning.plan(load(dict(model="DeepSeek-V3.2", gpu="B200", **{"tensor-parallel-size": 32}))).memory.weights
    assert term.provenance == "estimated" and "not built for this checkpoint at this TP size" in term.source
    with pytest.raises(RecipeError, match="Engram sharding leaves ranks without hash heads"):
        planning.plan(load(dict(model="DeepSeek-V4.1-Flash", gpu="B200", **{
            "tensor-parallel-size": 16, "enable-expert-parallel": True, "kv-cache-dtype": "fp8"})))


# The construction buffers against the release's own build ---------------------------------------------------------

def meta_build(release: str, cases: list[dict]) -> list[dict]:
    import derive_weights

    if not (derive_weights.ORACLE_HOME / "releases" / release / ".ready").exists():
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    return derive_weights.build(release, cases)


CONSTRUCTION_CASES = [
    # (recipe, release): FlashMLA-sparse on SM90, a BF16 cache (the queries padded from 0.29.0) and an fp8_ds_mla one
    # (the prefill gather; the padded prefill queries from 0.31.0); the index groups from 0.30.0
    (dict(model="deepseek-ai/DeepSeek-V3.2", gpu="H200", **{"tensor-parallel-size": 8, "max-model-len": 131072,
                                                             "max-num-seqs": 256}), "0.33.0"),
    (dict(model="zai-org/GLM-5.1-FP8", gpu="H200", **{"tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                                                       "max-model-len": 202752, "max-num-seqs": 512}), "0.33.0"),
    (dict(model="nvidia/GLM-5.2-NVFP4", gpu="H200", **{"tensor-parallel-size": 4, "kv-cache-dtype": "fp8",
                                                        "max-model-len": 131072, "max-num-seqs": 256}), "0.33.0"),
    (dict(model="zai-org/GLM-5.1-FP8", gpu="H200", **{"tensor-parallel-size": 8, "max-model-len": 202752}), "0.20.0"),
]


@pytest.mark.vllm_oracle
@pytest.mark.parametrize("raw, release", CONSTRUCTION_CASES, ids=lambda c: str(c) if isinstance(c, str) else c["model"])
def test_construction_buffers_are_what_the_release_allocates_when_it_builds_the_model(raw, release):
    # Every tensor the build leaves that no module holds (oracle/weights.py "unowned"): the top-k buffer, the
    # FlashMLA-sparse workspace, the index groups. The absorbed W_UK_T / W_UV come from weight post-processing, which
    # the meta build does not run: left out of the comparison.
    import derive_weights

    recipe = load(raw | {"vllm-version": release})
    model = recipe.model.name
    case = {"name": model, "config": derive_weights.hf_config(model), "serving": {
        "arch": recipe.gpu.arch, "gpu_memory_bytes": recipe.gpu.total_memory_bytes,
        "tensor_parallel_size": recipe.tensor_parallel_size, "data_parallel_size": 1, "pipeline_parallel_size": 1,
        "enable_expert_parallel": False, "max_model_len": recipe.max_model_len,
        "max_num_batched_tokens": recipe.max_num_batched_tokens, "max_num_seqs": recipe.max_num_seqs,
        "kv_cache_dtype": recipe.kv_cache_dtype, "speculative": None}}
    built = meta_build(release, [case])[0]
    entry = weights.data()["models"][model]
    heads = entry["shape"]["num_attention_heads"] // recipe.tensor_parallel_size
    absorbed = heads * 512 * (entry["shape"]["qk_nope_head_dim"] + entry["shape"]["v_head_dim"]) * 2
    expected = weights.construction_bytes(recipe, entry) - recipe.model.num_layers * absorbed
    # besides: a few float32 scalars, and on FlashAttention's sparse MLA 32 KiB a layer (not modelled: 2 MB on V3.2)
    assert 0 <= built["unowned_bytes"] - expected < 4 * 2**20, built["unowned_largest"]


# A model whose weights are not derived: the estimate its basis cites --------------------------------------------------

def test_a_model_not_built_holds_an_eighth_of_the_checkpoint_its_basis_cites_on_tp8():
    # GLM-5.3-Flash, whose weights are not derived (oracle/configs/SOURCES.md): "about 306 GiB for the default native
    # FP8 checkpoint" (vllm-project/recipes); TP8 without expert parallelism: dense / 8 + experts / 8
    recipe = load({"model": "GLM-5.3-Flash", "gpu": "B300", "tensor-parallel-size": 8})
    weights = memory_terms.rank_memory(resolve(recipe)).weights
    assert abs(weights.bytes - 306 * GIB // 8) <= 1 and weights.provenance == "estimated"


def test_a_model_not_built_adds_its_mtp_layer_to_the_estimate_and_an_ngram_drafter_nothing():
    # GLM-5.3-Flash at TP8 (306 GiB = 328,564,998,144 B, of which 304,480,124,928 B routed experts, as above): a rank
    # holds 24,084,873,216 // 8 + 304,480,124,928 // 8 = 41,070,624,768 B for the 45 target layers; MTP (one layer,
    # config.json num_nextn_predict_layers) loads its layer too: 41,070,624,768 x 46 // 45 = 41,983,305,318 B; an ngram
    # drafter loads no layer
    glm = {"model": "GLM-5.3-Flash", "gpu": "B300", "tensor-parallel-size": 8}
    for drafter, weights_bytes in (({"method": "mtp", "num_speculative_tokens": 1}, 41_983_305_318),
                                   ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4},
                                    41_070_624_768)):
        weights = memory_terms.rank_memory(resolve(load(glm | {"speculative-config": drafter}))).weights
        assert (weights.bytes, weights.provenance) == (weights_bytes, "estimated")
