"""KV-cache groups against figures vLLM printed or that follow by hand from its source, never from this code."""

import ast
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import SEED
from dsa_kvcalc import engine, kv_cache, memory_terms, planning
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.deployment import kv_spec, resolve, sparse_mla_backend
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load, load_recipe


def groups(recipe: dict) -> list[int]:
    kv = resolve(load(recipe)).kv
    return [g.page_bytes for g in kv.groups]


V4_FLASH = {"model": "deepseek-ai/DeepSeek-V4-Flash", "gpu": "B200", "tensor-parallel-size": 4,
            "kv-cache-dtype": "fp8", "max-model-len": 1048576}


def test_v4_flash_groups_as_a_vllm_0281_user_printed_them():
    # vllm-project/vllm#54703 (a v0.28.1-based build, no MTP) printed the group page sizes 1,002,240 / 823,680 /
    # 786,240 / 870,912 / 656,640 B: the compressed + indexer group, two sliding-window groups, and the ratio-4 and
    # ratio-128 compressor states.
    assert sorted(groups(V4_FLASH | {"vllm-version": "0.28.1"})) == sorted(
        [1_002_240, 823_680, 786_240, 870_912, 656_640])


def test_v4_flash_pages_by_hand():
    # Per 256 tokens a ratio-4 layer holds 64 compressed entries of 584 B (37,376 B, padded to 65 x 576 = 37,440)
    # and 64 indexer entries of 132 B (8,448 B -> 15 x 576 = 8,640); a ratio-128 layer 2 entries (1,168 -> 1,728).
    # V4-Flash has 21 ratio-4 and 20 ratio-128 layers: 21 x (37,440 + 8,640) + 20 x 1,728 = 1,002,240 B a block
    # since vLLM PR #48993 (the largest group).
    kv = resolve(load(V4_FLASH | {"vllm-version": "0.28.0"})).kv
    assert kv.block_bytes == 21 * (37_440 + 8_640) + 20 * 1_728
    # Pages a 1M-token request holds: cdiv(1,048,576, 256) = 4,096 compressed pages; each window group
    # cdiv(127 + 2 x 16,384, 64) + 1 = 515 (64-token pages, window 128, two batches of 16,384 tokens in flight on a
    # B200 since v0.28), the ratio-4 states cdiv(7 + 32,768, 4) + 1 = 8,195, the ratio-128 states
    # cdiv(127 + 32,768, 8) + 1 = 4,113.
    assert kv.pages_per_request == 4_096 + 2 * 515 + 8_195 + 4_113


def test_gh200_refusal_needs_22_layer_tuples_of_47808_bytes():
    # vLLM's _max_memory_usage_bytes_from_groups for DeepSeek-V4: 22 layer tuples x (37,440 + 8,640 + 1,728) B x the
    # pages one request holds; at 30,000 tokens and 16,384 in flight (vLLM 0.22): 118 + 2 x 259 + 4,099 + 2,065 =
    # 6,800 pages -> 7,152,076,800 B, the 6.66 GiB of vllm-project/vllm#44376.
    kv = resolve(load(dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
        "tensor-parallel-size": 2, "enable-expert-parallel": True, "kv-cache-dtype": "fp8", "max-model-len": 30000,
        "max-num-batched-tokens": 16384, "vllm-version": "0.22.0"}))).kv
    assert kv.request_bytes == 22 * 47_808 * 6_800 == 7_152_076_800


def test_mla_models_are_one_group_of_mla_and_indexer_pages():
    # 64-token pages: V3.2 on an H200 with fp8 (FLASHMLA_SPARSE, fp8_ds_mla 656 B) keeps 61 x (656 + 132) B a token;
    # on a B200 FlashInfer's sparse MLA keeps standard fp8 (576 B): 61 x (576 + 132).
    v32 = {"model": "DeepSeek-V3.2", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8"}
    assert groups(v32 | {"gpu": "H200"}) == [64 * 61 * (656 + 132)]
    assert groups(v32 | {"gpu": "B200"}) == [64 * 61 * (576 + 132)]
    assert groups(v32 | {"gpu": "B200", "attention-backend": "FLASHMLA_SPARSE"}) == [64 * 61 * (656 + 132)]
    # SM12x keeps fp8_ds_mla even for an auto (bf16) cache (FLASHINFER_MLA_SPARSE_SM120)
    assert groups(v32 | {"gpu": "RTX PRO 6000", "kv-cache-dtype": "auto", "tensor-parallel-size": 8,
                         "enable-expert-parallel": True}) == [64 * 61 * (656 + 132)]


def test_glm52_keeps_21_indexers_since_vllm_024():
    # index_topk_freq 4, offset 3: layers 0, 1, 2, 6, 10, ..., 74 own an indexer (21 of 78; the config's
    # indexer_types agree). Before vLLM PR #45895 (v0.24.0) every layer kept one.
    glm = {"model": "GLM-5.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
           "max-model-len": 202752}
    assert groups(glm | {"vllm-version": "0.24.0"}) == [64 * (78 * 576 + 21 * 132)]
    assert groups(glm | {"vllm-version": "0.23.0"}) == [64 * 78 * (576 + 132)]
    # MTP adds a layer that always builds its indexer
    mtp = {"speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}
    assert groups(glm | mtp) == [64 * (79 * 576 + 22 * 132)]


def test_versions_as_they_exist():
    assert engine.NEWEST_VLLM == "0.33.0" and "0.34.0" not in engine.RELEASES
    assert engine.vllm("0.34.0").newer_than_modelled and not engine.vllm("main").newer_than_modelled
    assert engine.vllm("0.34.0").reserves_decode_logits is False  # a newer release: the newest's rules
    assert engine.build_of("0.1.dev7+g4ba787ec9") == "0.33.0"  # vllm==0.33.0 vllm/_version.py commit_id
    assert engine.build_of("0.34.0.dev12+g317081f00") == "main"
    with pytest.raises(ValueError, match="source build"):
        engine.build_of("0.1.dev20051+g487ecf187")
    with pytest.raises(ValueError, match="0.18.1 is older than 0.19.0, the oldest release modelled"):
        engine.build_of("0.18.1")
    assert engine.build_of("0.19.0") == "0.19.0"


@pytest.mark.parametrize("raw, block_bytes", [
    # vLLM's own planner (oracle/table.py, vllm==0.32.0 and 0.33.0) on these recipes. Their backends declare a
    # block-outermost layout (catalog.Model.block_outermost_layout), so the sum of the pages is rounded up to the lcm
    # of the alignments; padding each page alone would give 13,394,304 and 152,064.
    ({"model": "GLM-5.3-Flash", "gpu": "H200", "vllm-version": "0.32.0"}, 13_415_424),
    ({"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "vllm-version": "0.33.0"}, 136_224),
    # V3.2's are layer-outer, so each page is padded alone: on B200 fp8 is FlashInfer's 576 B a token, aligned to
    # 32 rows (18,432 B), which a 64-token page of 36,864 B already is; the indexer's 8,448 B page aligns to 1. With
    # its MTP layer, 62 x (36,864 + 8,448) = 2,809,344, what vLLM's planner gives for recipes/deepseek-v3.2-8xb200-tp8
    # (rounding the sum to 18,432 would give 2,820,096).
    ({"model": "DeepSeek-V3.2", "gpu": "B200", "kv-cache-dtype": "fp8", "vllm-version": "0.33.0",
      "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}, 2_809_344),
])
def test_the_layout_decides_how_a_block_is_padded(raw, block_bytes):
    assert resolve(load(raw | {"tensor-parallel-size": 4})).kv.block_bytes == block_bytes


@pytest.mark.parametrize("spec, block_bytes", [
    ({}, 7_441_280), ({"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}, 8_117_760)])
def test_glm53_flash_latents_align_nothing_before_032(spec, block_bytes):
    # vLLM's own planner (oracle/table.py) on GLM-5.3-Flash, B200, TP8, vllm==0.31.0: its own attention
    # (vllm/models/glm5next/common/) sets no block_stride_alignment, so FlashInfer's flat-cache row alignment (one
    # 512 B record) is not applied; the same block as on H200. Aligning it would give 7,441,408 and 8,118,272.
    raw = {"model": "GLM-5.3-Flash", "gpu": "B200", "tensor-parallel-size": 8, "vllm-version": "0.31.0"}
    assert resolve(load(raw | spec)).kv.block_bytes == block_bytes


def test_a_sweep_shares_a_spec_only_between_recipes_that_agree_on_what_it_read():
    # A sweep builds each KV-cache spec once and gives it to every later point with the same CacheConfig and
    # arguments (deployment.kv_spec): a spec taken from the shared store must be the one built afresh, for every model
    # on each arch family, with the settings its caches depend on, and the store must share (fewer specs built than
    # points).
    settings = [{}, {"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}},
                {"pipeline-parallel-size": 2}, {"kv-cache-dtype": "fp8"}, {"enable-prefix-caching": False},
                {"decode-context-parallel-size": 2}, {"vllm-version": "0.26.0"}, {"vllm-version": "main"},
                {"max-model-len": 65536}, {"max-num-seqs": 7}]
    specs: dict = {}
    points = 0
    for model, gpu, setting in itertools.product(MODELS, ("H200", "B200", "RTX PRO 6000", "MI355X"), settings):
        try:
            recipe = load({"model": model.name, "gpu": gpu, "tensor-parallel-size": 8} | setting)
            backend = sparse_mla_backend(recipe)
        except RecipeError:  # a combination vLLM refuses
            continue
        points += 1
        assert kv_spec(recipe, backend, specs) == kv_spec(recipe, backend), (model.name, gpu, setting)
    assert len(specs) < points


# Pages worked out by hand from the vLLM release lines each rule cites -------------------------------------------------

V41 = {"model": "DeepSeek-V4.1-Flash", "data-parallel-size": 4, "enable-expert-parallel": True}


def v41_specs(recipe, drafts: int = 0) -> Counter:
    return Counter((c.kind, c.block, c.page_bytes, c.stride_alignment) for c in kv_cache.v41_caches(recipe, drafts))


# DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py:521-578, compressor.py:221-233): the kv sources
# 2, 8, 14 (ratio 2) and 20 (ratio 1) keep a compressed cache of block // ratio states and an indexer cache; every
# layer a 32-token window; the ratio-2 sources an FP32 ring of 8 slots x 2 x 512 x 4 B = 32,768 B.
@pytest.mark.parametrize("recipe, drafts, specs", [
    # The seed, 0.33.0 on B200: mega attention (TP 1: 64 heads / 8 groups = 8), so nvfp4_ds_mla 288 B compressed
    # records; MXFP8 528 B window records at 512 B alignment; MXFP4 indexer entries of 68 B. Windows 32 x 528 = 16,896
    # (33 x 512), stride lcm(528, 288) = 3,168; compressed 64 x 288 = 18,432 and 128 x 288 = 36,864; indexer 64 x 68
    # = 4,352 -> 4,608 and 128 x 68 = 8,704, at lcm(256, 1) = 256 (sparse logits). 40 layers + 3 DSpark drafts.
    (("seed", []), 3, {("window", 32, 16_896, 3168): 43, ("full", 128, 18_432, 1): 3, ("full", 128, 4608, 256): 3,
                       ("state", 8, 32_768, 1): 3, ("full", 128, 36_864, 1): 1, ("full", 128, 8704, 256): 1}),
    # 0.32.0: no window stride alignment; the sparse-logits indexer aligned to lcm(512, 512) = 512
    (("seed", ["vllm-version=0.32.0"]), 3, {
        ("window", 32, 16_896, 1): 43, ("full", 128, 18_432, 1): 3, ("full", 128, 4608, 512): 3,
        ("state", 8, 32_768, 1): 3, ("full", 128, 36_864, 1): 1, ("full", 128, 8704, 512): 1}),
    # H200: FlashMLA, V4's 584 B records at 576 B alignment, 64-token blocks, FP8 indexer entries of 132 B:
    # 32 x 584 = 18,688 -> 19,008; 64 x 584 = 37,376 -> 37,440; 32 x 132 = 4,224 -> 4,608; 64 x 132 = 8,448 -> 8,640
    (({"gpu": "H200"}, None), 0, {("window", 32, 19_008, 1): 40, ("full", 64, 19_008, 1): 3, ("full", 64, 4608, 1): 3,
                                  ("state", 8, 32_768, 1): 3, ("full", 64, 37_440, 1): 1, ("full", 64, 8640, 1): 1}),
    # B200 with FlashInfer's V4.1 backend: plain rows of 512 fp8 bytes at 512 B alignment: 32 x 512 = 16,384,
    # 64 x 512 = 32,768, 128 x 512 = 65,536; indexer 64 x 132 = 8,448 -> 8,704 and 128 x 132 = 16,896
    (({"gpu": "B200", "kv-cache-dtype": "fp8", "attention-backend": "FLASHINFER_MLA_SPARSE_DSV41"}, None), 0, {
        ("window", 32, 16_384, 1): 40, ("full", 128, 32_768, 1): 3, ("full", 128, 8704, 1): 3,
        ("state", 8, 32_768, 1): 3, ("full", 128, 65_536, 1): 1, ("full", 128, 16_896, 1): 1}),
    # the same backend with a BF16 cache: rows of 512 x 2 B: 32,768, 65,536 and 131,072
    (({"gpu": "B200", "attention-backend": "FLASHINFER_MLA_SPARSE_DSV41"}, None), 0, {
        ("window", 32, 32_768, 1): 40, ("full", 128, 65_536, 1): 3, ("full", 128, 8704, 1): 3,
        ("state", 8, 32_768, 1): 3, ("full", 128, 131_072, 1): 1, ("full", 128, 16_896, 1): 1}),
    # H200 with the sparse-logits indexer at 0.33.0: the indexer pages align to lcm(256, 576) = 2,304 (only SM100's
    # packed layouts drop the page alignment from it)
    (({"gpu": "H200", "attention-config": {"indexer_sparse_logits": True}}, None), 0, {
        ("window", 32, 19_008, 1): 40, ("full", 64, 19_008, 1): 3, ("full", 64, 4608, 2304): 3,
        ("state", 8, 32_768, 1): 3, ("full", 64, 37_440, 1): 1, ("full", 64, 8640, 2304): 1}),
    # RTX PRO 6000 (SM120): FlashInfer's packed layout with V4's records, 128-token blocks: 128 x 584 = 74,752 ->
    # 74,880; 128 x 132 = 16,896 -> 17,280
    (({"gpu": "RTX PRO 6000"}, None), 0, {
        ("window", 32, 19_008, 1): 40, ("full", 128, 37_440, 1): 3, ("full", 128, 8640, 1): 3,
        ("state", 8, 32_768, 1): 3, ("full", 128, 74_880, 1): 1, ("full", 128, 17_280, 1): 1}),
], ids=["seed", "seed-0.32.0", "h200", "b200-flashinfer", "b200-flashinfer-bf16", "h200-sparse-logits",
        "rtx-pro-6000"])
def test_v41_caches_as_its_attention_builds_them(recipe, drafts, specs):
    keys, overrides = recipe
    built = load_recipe(SEED, overrides) if keys == "seed" else load(V41 | keys)
    assert v41_specs(built, drafts) == specs


@pytest.mark.parametrize("k, slots", [(0, 8), (6, 8), (7, 16)])
def test_v41_compressor_ring_holds_k_plus_2_rows_in_a_power_of_two_of_at_least_8(k, slots):
    # vllm==0.33.0 vllm/models/deepseek_v41/compressor.py:221-223: max(8, 1 << (k + 2 - 1).bit_length())
    speculation = {"speculative-config": {"method": "dspark", "num_speculative_tokens": k}} if k else {}
    rings = [c for c in kv_cache.v41_caches(load(V41 | {"gpu": "B200"} | speculation), 0) if c.kind == "state"]
    assert {(c.block, c.page_bytes) for c in rings} == {(slots, slots * 2 * 512 * 4)}


@pytest.mark.parametrize("keys, attention", [
    # vllm==0.33.0 vllm/models/deepseek_v41/nvidia/flash_mla_mega_attn.py:153-174: mega attention on SM100 where TP
    # divides the 64 heads and 8 wo_a groups and leaves 8 heads a group: TP 1, 2 and 8 do, TP 16 leaves none
    ({"tensor-parallel-size": 1}, "mega"), ({"tensor-parallel-size": 2}, "mega"), ({"tensor-parallel-size": 8}, "mega"),
    ({"tensor-parallel-size": 16}, "flashmla"),
    ({"gpu": "H200"}, "flashmla"),  # SM100 only
    ({"vllm-version": "0.30.0"}, "flashmla"),  # no mega attention before 0.31.0 (model.py:226-236)
    ({"attention-backend": "FLASHINFER_MLA_SPARSE_DSV41"}, "flashinfer"),  # the recipe's backend decides
])
def test_v41_attention_class_follows_the_gpu_tp_release_and_backend(keys, attention):
    recipe = load({"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 1} | keys)
    assert kv_cache.v41_attention(kv_cache.CacheConfig.of(recipe)) == attention


def test_v4_mxfp4_indexer_entries_shrink_pages_from_027():
    # 0.27.0 stores V4's MXFP4 indexer entries at 68 B (0.22.0-0.26.0 at the FP8 size): a ratio-4 layer's 64 indexer
    # entries are 4,352 -> 4,608 B (8 x 576) for 8,448 -> 8,640. The largest group, 21 ratio-4 layers of
    # (37,440 + indexer) + 20 ratio-128 layers of 1,728: 21 x 46,080 + 34,560 = 1,002,240 at 0.26.0, 21 x 42,048 +
    # 34,560 = 917,568 at 0.27.0 (the block under the overlay rule).
    v4 = {"model": "DeepSeek-V4-Flash", "gpu": "B200", "tensor-parallel-size": 4, "kv-cache-dtype": "fp8",
          "attention-config": {"indexer_kv_dtype": "mxfp4"}}
    assert planning.plan(load(v4 | {"vllm-version": "0.27.0"})).memory.kv.block_bytes == 917_568
    assert memory_terms.rank_memory(resolve(load(v4 | {"vllm-version": "0.26.0"}))).kv.groups[0].page_bytes == 1_002_240


def test_before_0201_tokens_are_blocks_per_group_times_the_smallest_block():
    # vllm==0.20.0 vllm/v1/core/kv_cache_utils.py:1694-1711: num_blocks // len(groups) x min block size. V4-Flash at
    # 0.20.0: one full group and, cut by the approximate gcd 22 of the layer counts [21, 43, 21, 20], two sliding-window
    # groups (43 layers), one of the ratio-4 and indexer compressor states (4-token pages) and one of the ratio-128
    # states: 5 groups. A block costs 22 layer tuples x (37,440 + 8,640 + 1,728) = 1,051,776 B ('tuple' rule), so
    # 100 blocks give 100 // 5 x 4 = 80 tokens.
    v4 = {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 4, "kv-cache-dtype": "fp8",
          "vllm-version": "0.20.0", "kv-cache-memory-bytes": 100 * 1_051_776}
    plan = planning.plan(load(v4))
    assert (plan.memory.kv.block_bytes, len(plan.memory.kv.groups)) == (1_051_776, 5)
    assert plan.backend("auto").kv_cache_tokens == 80


def test_shared_indexers_split_over_pipeline_stages_by_layer():
    # GLM-5.2: layers 0, 1, 2, 6, 10, ..., 74 own an indexer (the config's indexer_types). PP 2 splits 39 + 39 layers
    # (get_pp_indices): stage 0 holds 0, 1, 2, 6, ..., 38 (12 indexers), stage 1 42, ..., 74 (9). The fuller stage
    # decides: 64 x (39 x 576 + 12 x 132) = 1,539,072 B a block (fp8 on B200: FlashInfer's standard 576 B).
    glm = {"model": "GLM-5.2", "gpu": "B200", "tensor-parallel-size": 8, "pipeline-parallel-size": 2,
           "kv-cache-dtype": "fp8", "max-model-len": 202752}
    memory = memory_terms.rank_memory(resolve(load(glm)))
    assert memory.kv.block_bytes == 1_539_072
    # stage 0's one group is logged: 3,168 pages of 1,539,072 B a request
    assert memory.kv.request_bytes == 3168 * 1_539_072


@pytest.mark.parametrize("layers, freq, offset, page", [
    # vllm==0.24.0 vllm/model_executor/models/deepseek_v2.py:1024-1049: a layer skips the top-k (and builds no
    # indexer) when max(layer - offset + 1, 0) % freq != 0; MTP layers always build theirs. 77 layers, freq 4,
    # offset 3: 0, 1, 2, 6, ..., 74 own one (21), and the MTP layer 77 (whose 75 % 4 is 3) too
    (77, 4, 3, 64 * (78 * 576 + 22 * 132)),
    # 10 layers, freq 2, offset 2: 0, 1, 3, 5, 7, 9 (6), and the MTP layer 10
    (10, 2, 2, 64 * (11 * 576 + 7 * 132)),
])
def test_shared_indexers_and_the_mtp_layers_own(tmp_path, layers, freq, offset, page):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": layers, "hidden_size": 6144, "index_n_heads": 32,
                                  "index_head_dim": 128, "index_topk": 2048, "num_nextn_predict_layers": 1,
                                  "index_topk_freq": freq, "index_skip_topk_offset": offset}))
    recipe = load({"model": str(config), "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}})
    assert memory_terms.rank_memory(resolve(recipe)).kv.groups[0].page_bytes == page


def test_a_flat_bf16_cache_aligns_the_sum_at_031_and_each_layer_from_032():
    # vllm==0.31.0 mla_attention.py:751-756, 1375-1382: FlashMLA-sparse on a BF16 (flat) cache aligns the block to one
    # token's record, 1,152 B, and kv_cache_utils.py:1606-1632 rounds the sum: 61 x (1152 + 132) x 64 = 5,012,736 B
    # up to 4,352 x 1,152 = 5,013,504. vllm==0.32.0 kv_cache_utils.py:1515-1551: the layout is layer-outer (LBNHC), so
    # each 64 x 1,152 B page is padded alone (already a multiple), and the block stays 5,012,736 B.
    v32 = {"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "attention-backend": "FLASHMLA_SPARSE"}
    assert planning.plan(load(v32 | {"vllm-version": "0.31.0"})).memory.kv.block_bytes == 5_013_504
    assert planning.plan(load(v32 | {"vllm-version": "0.32.0"})).memory.kv.block_bytes == 5_012_736


@pytest.mark.parametrize("values, lower_bound, divisor", [
    # vllm==0.28.0 vllm/v1/core/kv_cache_utils.py:1588-1618: the d in [lower_bound, max] padding the values least,
    # the larger on ties. [21, 43]: d = 22 pads 1 + 1; [12, 16]: 16 pads 4 (12 pads 8); [6, 6]: 2, 3 and 6 pad none
    ([21, 43], 21, 22), ([12, 16], 12, 16), ([6, 6], 2, 6)])
def test_approximate_gcd_pads_least_and_takes_the_larger_on_ties(values, lower_bound, divisor):
    assert kv_cache.approximate_gcd(values, lower_bound) == divisor


def test_v4_flash_packed_groups_at_029():
    # vllm==0.29.0 vllm/v1/core/kv_cache_utils.py:1668-1796 by hand for V4-Flash (no MTP): buckets in order of first
    # appearance, the sliding windows (43 x 37,440), the full caches (21 x 37,440 + 21 x 8,640 + 20 x 1,728, page
    # counts 21/21/20: unbalanced), the 4-token states (21 x 32,832 + 21 x 8,640: balanced, two sizes, so at least 21
    # repeats a group) and the ratio-128 states (20 x 32,832). _approximate_gcd([43, 21, 20], 21) = 22 (padding
    # 1 + 1 + 2), so only the windows split, in two: 22 and 21 layers. The same five groups vLLM 0.28.1 printed.
    kv = memory_terms.rank_memory(resolve(load({"model": "DeepSeek-V4-Flash", "gpu": "B200", "tensor-parallel-size": 4,
                                    "kv-cache-dtype": "fp8", "vllm-version": "0.29.0"}))).kv
    assert [g.page_bytes for g in kv.groups] == [22 * 37_440, 21 * 37_440, 1_002_240, 21 * (32_832 + 8640), 20 * 32_832]


def test_one_group_costs_its_page_under_every_block_rule():
    # GLM-5.2 at 0.24.0 ('bucket' rule, 21 indexers): one group's block is its page, 64 x (78 x 576 + 21 x 132) =
    # 3,052,800 B, not page sizes x the most layers of one size (the multi-group rules)
    recipe = load({"model": "GLM-5.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "vllm-version": "0.24.0", "max-model-len": 202752})
    assert planning.plan(recipe).memory.kv.block_bytes == 3_052_800


def test_one_group_needs_its_pages_times_its_page():
    # GLM-5.2 fp8 on B200: one group of 78 x 576 + 21 x 132 = 47,700 B a token; a request of 202,752 tokens holds
    # 3,168 pages of 64 tokens: vLLM's "KV cache is needed" 3,168 x 64 x 47,700 = 9,671,270,400 B
    recipe = load({"model": "GLM-5.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "max-model-len": 202752})
    assert memory_terms.rank_memory(resolve(recipe)).kv.request_bytes == 9_671_270_400


@pytest.mark.parametrize("in_flight, extra, pages", [(8257, 0, 132), (8258, 0, 133), (8255, 2, 132), (8257, 2, 133)])
def test_a_sliding_window_holds_its_window_less_one_plus_the_tokens_in_flight(in_flight, extra, pages):
    # vllm==0.28.0 vllm/v1/kv_cache_interface.py:565-572: cdiv(min(window - 1 + extra + in flight, L), block) + 1.
    # V4-Flash's 128-token window in 64-token pages: 127 + 8257 = 8384 = 131 x 64 -> 132 pages; one more token
    # (in flight or retained) starts a 132nd page -> 133
    recipe = load({"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 4, "vllm-version": "0.28.0",
                   "kv-cache-dtype": "fp8"})  # auto: vLLM 0.28.0 refuses V4 on the H200
    window = next(g for g in memory_terms.rank_memory(resolve(recipe)).kv.groups if g.kind == "window" and g.block == 64)
    assert kv_cache.group_pages(kv_cache.CacheConfig.of(recipe), window, in_flight, extra) == pages


def test_flashmla_s_ds_mla_pages_off_sm10x_align_to_nothing_at_031():
    # vllm==0.31.0 vllm/model_executor/layers/attention/mla_attention.py:751-756, 1376-1382: the block stride aligns to
    # one token's record only for a flat cache (FlashInfer's, or FlashMLA's without a DS-MLA dtype) or FlashMLA's
    # DS-MLA pages on SM10x (TMA rows). V3.2 with fp8 (fp8_ds_mla, 656 B a token) on the H200 is neither: the block is
    # 61 x (64 x 656 + 64 x 132) = 3,076,352 B, not rounded up to 656 B (4,690 x 656 = 3,076,640)
    recipe = load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "vllm-version": "0.31.0"})
    assert memory_terms.rank_memory(resolve(recipe)).kv.block_bytes == 3_076_352


def test_flashmla_s_bf16_pages_are_a_flat_cache_aligned_to_one_row_at_031():
    # vllm==0.31.0 vllm/model_executor/layers/attention/mla_attention.py:751-756, 1381-1382: FLASHMLA_SPARSE with a
    # cache that is not DS-MLA (BF16 here, 1152 B a token) is a flat cache, its block stride a multiple of one
    # 1152-B row; 0.31.0 rounds the sum up (kv_cache_utils.py:1622-1632): 61 x (64 x 1152 + 64 x 132) = 5,012,736 B
    # -> 4,352 x 1152 = 5,013,504
    recipe = load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "vllm-version": "0.31.0",
                   "attention-backend": "FLASHMLA_SPARSE"})
    assert memory_terms.rank_memory(resolve(recipe)).kv.block_bytes == 5_013_504


def test_pipeline_stages_price_a_block_by_the_widest_stage_with_the_drafts_on_the_last():
    # vllm==0.33.0 vllm/distributed/utils.py:225-230 get_pp_indices: 61 layers over PP4 are 15 a stage, the remainder
    # on the second-last: [15, 15, 16, 15]; the MTP layer joins the last stage (15 + 1). The widest stage holds 16
    # layers of 64 x (1152 + 132) = 82,176 B (BF16 on the H200 at 0.30.0, unaligned): 1,314,816 B a block. (The drafts
    # on another stage, or one stage holding every layer, would make it 17 or 62 layers.)
    recipe = load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 2, "pipeline-parallel-size": 4,
                   "vllm-version": "0.30.0", "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}})
    assert memory_terms.rank_memory(resolve(recipe)).kv.block_bytes == 16 * 82_176
    # without the MTP layer the widest stage is still the second-last's 16 layers (the last holds 15)
    plain = load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 2, "pipeline-parallel-size": 4,
                  "vllm-version": "0.30.0"})
    assert memory_terms.rank_memory(resolve(plain)).kv.block_bytes == 16 * 82_176
    # PP2: [31, 30], the first stage the widest: 31 x 82,176
    pp2 = load({"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 2, "pipeline-parallel-size": 2,
                "vllm-version": "0.30.0"})
    assert memory_terms.rank_memory(resolve(pp2)).kv.block_bytes == 31 * 82_176


def test_one_request_of_a_one_group_model_needs_its_pages_at_the_padded_block_stride():
    # vllm==0.31.0 vllm/v1/core/kv_cache_utils.py:2515-2527 _max_memory_usage_bytes_from_groups ("KV cache is
    # needed", :914-928): bytes_per_block (_pool_bytes_per_block, :1134-1142, the stride rounded up at :1622-1632) x
    # the request's blocks. V3.2 fp8 on B200: FlashInfer's 61 x (576 + 132) x 64 = 2,764,032 B rounded up to 576 B is
    # 2,764,224; cdiv(163,840, 64) = 2,560 blocks: 2,560 x 2,764,224 = 7,076,413,440 B (not 2,560 x 2,764,032)
    recipe = load({"model": "DeepSeek-V3.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "vllm-version": "0.31.0"})
    assert memory_terms.rank_memory(resolve(recipe)).kv.request_bytes == 7_076_413_440


def test_the_kv_cache_package_imports_one_way():
    # docs/ARCHITECTURE.md "The KV-cache package": pages.py is the base, each family module and grouping.py read it
    # (glm5next.py also mla.py's MLA record), and only __init__.py puts them together, so no import cycle can form
    package = Path(kv_cache.__file__).parent
    siblings = {}
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        siblings[path.stem] = {node.module.removeprefix("dsa_kvcalc.kv_cache").lstrip(".") or "__init__"
                               for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
                               and node.module.startswith("dsa_kvcalc.kv_cache")}
    assert siblings == {"pages": set(), "mla": {"pages"}, "deepseek_v4": {"pages"}, "deepseek_v41": {"pages"},
                        "glm5next": {"mla", "pages"}, "grouping": {"pages"},
                        "__init__": {"pages", "mla", "deepseek_v4", "deepseek_v41", "glm5next", "grouping"}}
