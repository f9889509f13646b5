"""KV-cache groups against figures vLLM printed or that follow by hand from its source, never from this code."""

import itertools

import pytest

from dsa_kvcalc import engine, kv_cache
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.choices import draft_layers, sparse_mla_backend
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load
from dsa_kvcalc.memory_terms import rank_memory


def groups(recipe: dict) -> list[int]:
    kv = rank_memory(load(recipe)).kv
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
    kv = rank_memory(load(V4_FLASH | {"vllm-version": "0.28.0"})).kv
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
    kv = rank_memory(load(dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
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


V4, V32, GLM5 = "DeepseekV4ForCausalLM", "DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM"
GLM5NEXT = "Glm5NextForConditionalGeneration"
# vllm==0.19.0 vllm/config/speculative.py:52, with the MTP names of the DSA models' drafters
SPEC_019 = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "extract_hidden_states",
            "ngram_gpu", "mtp", "deepseek_mtp", "glm4_moe_mtp", "glm5_next_mtp"}
# vllm/v1/attention/backends/registry.py of 0.19.0, and the sparse-MLA backends 0.23.0, 0.25.0 and 0.30.0 add
BACKENDS_019 = frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "ROCM_AITER_MLA_SPARSE"})
BACKENDS_V4 = frozenset({"FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4"})
BACKENDS_025 = BACKENDS_019 | BACKENDS_V4 | {"FLASHINFER_MLA_SPARSE_SM120", "FLASH_ATTN_MLA_SPARSE"}
BACKENDS_030 = BACKENDS_025 | {"FLASHINFER_MLA_SPARSE_SM90", "FLASHMLA_SPARSE_DSV41", "FLASHINFER_MLA_SPARSE_DSV41"}
# Every change of every rule, bracketed: (rule, last release with the old value, old value, first with the new, new
# value), each pair read in the two releases' source (the lines engine.py cites), written out here by hand.
BOUNDARIES = [
    ("reserves_decode_logits", "0.33.0", False, "main", True),
    ("default_gpu_memory_utilization", "0.19.1", 0.90, "0.20.0", 0.92),
    ("estimates_cudagraphs", "0.19.1", False, "0.20.0", True),
    ("rocm_estimates_cudagraphs", "0.25.1", False, "0.26.0", True),
    ("model_runner_v2_architectures", "0.27.1", frozenset(), "0.28.0", frozenset({V4})),
    ("model_runner_v2_architectures", "0.28.0", frozenset({V4}), "0.29.0", frozenset({"*"})),
    ("rocm_model_runner_v1_architectures", "0.28.0", frozenset({"*"}), "0.29.0", frozenset({V32, V4})),
    ("rocm_model_runner_v1_architectures", "0.29.0", frozenset({V32, V4}), "0.30.0", frozenset({V32, V4, GLM5})),
    ("rocm_model_runner_v1_architectures", "0.31.0", frozenset({V32, V4, GLM5}), "0.32.0", frozenset()),
    ("dspark_on_model_runner_v2", "0.24.0", False, "0.25.0", True),
    ("drafts_take_target_stages", "0.29.0", True, "0.30.0", False),
    ("v41_dspark_tokens_in_blocks", "0.29.0", False, "0.30.0", True),
    ("v41_dspark_tokens_in_blocks", "0.30.0", True, "0.31.0", False),
    ("sm90_flashinfer_sparse_mla", "0.29.0", False, "0.30.0", True),
    ("sparse_mla_dcp_backends", "0.29.0", None, "0.30.0", frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"})),
    ("sparse_mla_dcp_backends", "0.32.0", frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"}), "0.33.0",
     frozenset({"FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE", "FLASH_ATTN_MLA_SPARSE_FA4"})),
    ("flashmla_sparse_nope_cache_dtypes", "0.30.0", (), "0.31.0", ("auto", "bfloat16", "float16")),
    ("flashmla_sparse_nope_cache_dtypes", "0.31.0", ("auto", "bfloat16", "float16"), "0.32.0",
     ("auto", "bfloat16", "float16", "fp8_ds_mla")),
    ("flashmla_sparse_dcp_needs_quantized", "0.28.0", False, "0.29.0", True),
    ("flashmla_sparse_quantized_kernel_block", "0.31.0", 0, "0.32.0", 64),
    ("nvfp4_ds_mla", "0.29.0", False, "0.30.0", True),
    ("v41_packed_cache_dtypes", "0.30.0", (("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                                            "fp8_per_token_head"),
                                           "DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {dtype}"),
     "0.31.0", (("auto", "fp8", "fp8_ds_mla", "nvfp4_ds_mla"),
                "DeepseekV4 packed KV layouts only support fp8 kv-cache, got {dtype}")),
    ("v41_plain_rows_refuse_packed", "0.30.0", False, "0.31.0", True),
    ("v41_nvfp4_needs_sm10x", "0.30.0", False, "0.31.0", True),
    ("mxfp4_indexer_needs_sm10x", "0.21.0", None, "0.22.0", "use_fp4_indexer_cache"),
    ("mxfp4_indexer_needs_sm10x", "0.27.1", "use_fp4_indexer_cache", "0.28.0", "indexer_kv_dtype"),
    ("model_runner_v2_estimates_cudagraphs", "0.28.0", False, "0.29.0", True),
    ("batch_defaults", "0.27.1", ((70, 1024, 8192, ()), (0, 256, 2048, ())), "0.28.0",
     ((160, 1024, 16384, ()), (70, 1024, 8192, ()), (0, 256, 2048, ()))),
    ("batch_defaults", "0.32.0", ((160, 1024, 16384, ()), (70, 1024, 8192, ()), (0, 256, 2048, ())), "0.33.0",
     ((160, 1024, 16384, ()), (70, 1024, 8192, ("sm121",)), (0, 256, 2048, ()))),
    ("batched_dp_moe_max_num_batched_tokens", "0.19.1", None, "0.20.0", 256),
    ("capture_ceiling_sm10x", "0.27.1", 512, "0.28.0", 1024),
    ("captures_max_num_batched_tokens", "0.20.0", False, "0.20.1", True),
    ("captures_whole_requests", "0.28.0", False, "0.29.0", True),
    ("captures_max_num_seqs", "0.30.0", False, "0.31.0", True),
    ("topk_backend_flag", "0.29.0", False, "0.30.0", True),
    ("cooperative_topk_max_rows", "0.23.0", 0, "0.24.0", 32),
    ("cooperative_topk_max_rows", "0.28.0", 32, "0.29.0", 64),
    ("windows_count_concurrent_batches", "0.25.1", False, "0.26.0", True),
    ("retains_draft_tokens", "0.27.1", False, "0.28.0", True),
    ("kv_block_rule", "0.22.1", "tuple", "0.23.0", "bucket"),
    ("kv_block_rule", "0.26.0", "bucket", "0.27.0", "overlay"),
    ("aligns_block_stride", "0.30.0", False, "0.31.0", True),
    ("pads_layer_pages", "0.31.0", False, "0.32.0", True),
    ("v4_auto_cache_dtype_fp8", "0.29.0", False, "0.30.0", True),
    ("kv_grouping", "0.28.0", "uniform", "0.29.0", "packed"),
    ("v41_mega_attention", "0.30.0", False, "0.31.0", True),
    ("v41_window_stride_alignment", "0.32.0", False, "0.33.0", True),
    ("v41_indexer_sparse_logits_alignment", "0.30.0", 0, "0.31.0", 512),
    ("v41_indexer_sparse_logits_alignment", "0.32.0", 512, "0.33.0", 256),
    ("pad_window_pages", "0.26.0", True, "0.27.0", False),
    ("concurrency_counts_pages", "0.26.0", False, "0.27.0", True),
    ("tokens_from_concurrency", "0.20.0", False, "0.20.1", True),
    ("shared_indexers_skip_cache", "0.23.0", False, "0.24.0", True),
    ("rocm_indexer_workspace", "0.22.1", "none", "0.23.0", "batched tokens"),
    ("rocm_indexer_workspace", "0.29.0", "batched tokens", "0.30.0", "decode rows"),
    ("logged_peak_includes_cudagraphs", "0.26.0", False, "0.27.0", True),
    ("default_deepgemm", "0.32.0", "2.6", "0.33.0", "2.8"),
    ("sm12x_sparse_mla_backend", "0.23.0", "FLASHMLA_SPARSE", "0.24.0", "FLASHINFER_MLA_SPARSE_SM120"),
    ("sm90_unquantized_sparse_mla_backend", "0.24.0", "FLASHMLA_SPARSE", "0.25.0", "FLASH_ATTN_MLA_SPARSE"),
    ("sm10x_few_heads_unquantized_sparse_mla_backend", "0.32.0", "FLASHINFER_MLA_SPARSE", "0.33.0",
     "FLASH_ATTN_MLA_SPARSE_FA4"),
    ("mla_block_stride_rows", "0.30.0", {}, "0.31.0",
     {"FLASHINFER_MLA_SPARSE": 1, "FLASHMLA_SPARSE": 1, "FLASHMLA_SPARSE ds_mla on SM10x": 1}),
    ("mla_block_stride_rows", "0.31.0", {"FLASHINFER_MLA_SPARSE": 1, "FLASHMLA_SPARSE": 1,
                                         "FLASHMLA_SPARSE ds_mla on SM10x": 1}, "0.32.0",
     {"FLASHINFER_MLA_SPARSE": 32, "FLASH_ATTN_MLA_SPARSE_FA4": 32, "FLASHINFER_MLA_SPARSE_SM120": 64,
      "FLASHMLA_SPARSE": 1, "FLASHMLA_SPARSE ds_mla on SM10x": 1, "FLASH_ATTN_MLA_SPARSE": 1,
      "FLASHINFER_MLA_SPARSE_SM90": 1, "ROCM_AITER_MLA_SPARSE": 1}),
    ("sparse_mla_prefill_workspace_factor", "0.31.0", (5, 5), "0.32.0", (5, 2)),
    # FlashMLA-sparse's BF16-cache query heads: unpadded, then 64 (128 on SM10x), then 64 on both
    ("flashmla_prefill_head_padding", "0.28.0", (1, 1), "0.29.0", (64, 128)),
    ("flashmla_prefill_head_padding", "0.31.0", (64, 128), "0.32.0", (64, 64)),
    ("flashmla_prefill_query_workspace", "0.30.0", False, "0.31.0", True),
    ("index_group_buffers", "0.29.0", False, "0.30.0", True),
    ("rocm_accepts_fp8", "0.20.2", False, "0.21.0", True),
    ("kpool_indexer_reserves_decode_logits", "0.29.0", False, "0.30.0", True),
    ("kpool_logits_over_pools", "0.30.0", False, "0.31.0", True),
    ("kpool_gather_over_pools", "0.31.0", False, "0.32.0", True),
    ("kpool_tail_holds_drafts", "0.30.0", False, "0.31.0", True),
    ("linear_states_share_attention_blocks", "0.29.0", False, "0.30.0", True),
    ("linear_states_share_attention_blocks", "0.31.0", True, "0.32.0", False),
    ("kda_prefill_checkpoint_archs", "0.31.0", frozenset(), "0.32.0",
     frozenset({"sm90", "sm100", "sm103", "sm120", "sm121"})),
    ("backend_block_stride_alignment", "0.31.0", False, "0.32.0", True),
    ("v1_block_table_alignment", "0.20.2", False, "0.21.0", True),
    ("indexer_table_alignment", "0.26.0", False, "0.27.0", True),
    ("swa_prefill_indices", "0.23.0", False, "0.24.0", True),
    ("sparse_mla_prefill_workspace", "0.25.1", "none", "0.26.0", "floor seqs x block"),
    ("sparse_mla_prefill_workspace", "0.27.1", "floor seqs x block", "0.28.0", "floor block"),
    ("masked_mha_mask_bytes", "0.26.0", 0, "0.27.0", 64 << 20),
    ("masked_mha_mask_bytes", "0.27.1", 64 << 20, "0.28.0", 128 << 20),
    ("masked_mha_architectures", "0.26.0", frozenset(), "0.27.0", frozenset({V32})),
    ("masked_mha_architectures", "0.28.0", frozenset({V32}), "0.29.0", frozenset({V32, GLM5})),
    ("masked_mha_architectures", "0.29.0", frozenset({V32, GLM5}), "0.30.0", frozenset({V32, GLM5, GLM5NEXT})),
    ("mla_groups_split_by_index_leader", "0.29.0", False, "0.30.0", True),
    ("kernel_block_tables_per_attention_group", "0.31.0", False, "0.32.0", True),
    ("kpool_indexer_pooled_kernel_blocks", "0.31.0", False, "0.32.0", True),
    ("kpool_tail_row_aligned", "0.31.0", True, "0.32.0", False),
    ("rocm_sparse_mla_common_builder", "0.31.0", False, "0.32.0", True),
    ("speculative_methods", "0.19.1", SPEC_019, "0.20.0", SPEC_019 | {"dflash"}),
    ("speculative_methods", "0.21.0", SPEC_019 | {"dflash"}, "0.22.0", SPEC_019 | {"dflash", "custom_class"}),
    ("speculative_methods", "0.24.0", SPEC_019 | {"dflash", "custom_class"}, "0.25.0",
     SPEC_019 | {"dflash", "custom_class", "dspark"}),
    ("speculative_methods", "0.32.0", SPEC_019 | {"dflash", "custom_class", "dspark"}, "0.33.0",
     SPEC_019 - {"medusa", "mlp_speculator"} | {"dflash", "custom_class", "dspark"}),
    ("model_architectures", "0.19.1", frozenset({V32, GLM5}), "0.20.0", frozenset({V32, GLM5, V4})),
    ("model_architectures", "0.29.0", frozenset({V32, GLM5, V4}), "0.30.0",
     frozenset({V32, GLM5, V4, "DeepseekV41ForCausalLM", GLM5NEXT})),
    ("sparse_mla_backends", "0.22.1", BACKENDS_019, "0.23.0", BACKENDS_019 | BACKENDS_V4),
    ("sparse_mla_backends", "0.23.0", BACKENDS_019 | BACKENDS_V4, "0.24.0",
     BACKENDS_019 | BACKENDS_V4 | {"FLASHINFER_MLA_SPARSE_SM120"}),
    ("sparse_mla_backends", "0.24.0", BACKENDS_019 | BACKENDS_V4 | {"FLASHINFER_MLA_SPARSE_SM120"}, "0.25.0",
     BACKENDS_025),
    ("sparse_mla_backends", "0.29.0", BACKENDS_025, "0.30.0", BACKENDS_030),
    ("sparse_mla_backends", "0.30.0", BACKENDS_030, "0.31.0", BACKENDS_030 | {"FLASHMLA_MEGA_ATTN_DSV41"}),
    ("sparse_mla_backends", "0.32.0", BACKENDS_030 | {"FLASHMLA_MEGA_ATTN_DSV41"}, "0.33.0",
     BACKENDS_030 | {"FLASHMLA_MEGA_ATTN_DSV41", "FLASH_ATTN_MLA_SPARSE_FA4"}),
    ("indexer_kv_dtype_auto", "0.27.1", False, "0.28.0", True),
    ("v4_mxfp4_indexer_entries", "0.26.0", False, "0.27.0", True),
    ("sm10x_auto_kv_cache_dtypes", "0.31.0", {}, "0.32.0", {GLM5: "fp8_e4m3"}),
    ("sm10x_auto_kv_cache_dtypes", "0.32.0", {GLM5: "fp8_e4m3"}, "0.33.0", {GLM5: "fp8_e4m3", GLM5NEXT: "fp8"}),
]


@pytest.mark.parametrize("rule, before, old, first, new", BOUNDARIES, ids=lambda v: str(v)[:40])
def test_each_rule_changes_where_the_releases_show(rule, before, old, first, new):
    assert getattr(engine.vllm(before), rule) == old
    assert getattr(engine.vllm(first), rule) == new


def test_every_change_of_every_rule_is_bracketed_here():
    changes = {(name, change.release) for name, rule in engine.VLLM_RULES.items() for change in rule.changes}
    assert changes == {(rule, first) for rule, _, _, first, _ in BOUNDARIES}
    assert engine.VLLM_RULES["reserves_decode_logits"].initial is False  # in no release: see the boundary above


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
    assert rank_memory(load(raw | {"tensor-parallel-size": 4})).kv.block_bytes == block_bytes


@pytest.mark.parametrize("spec, block_bytes", [
    ({}, 7_441_280), ({"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}, 8_117_760)])
def test_glm53_flash_latents_align_nothing_before_032(spec, block_bytes):
    # vLLM's own planner (oracle/table.py) on GLM-5.3-Flash, B200, TP8, vllm==0.31.0: its own attention
    # (vllm/models/glm5next/common/) sets no block_stride_alignment, so FlashInfer's flat-cache row alignment (one
    # 512 B record) is not applied; the same block as on H200. Aligning it would give 7,441,408 and 8,118,272.
    raw = {"model": "GLM-5.3-Flash", "gpu": "B200", "tensor-parallel-size": 8, "vllm-version": "0.31.0"}
    assert rank_memory(load(raw | spec)).kv.block_bytes == block_bytes


class Reads:
    """A recipe that notes each field read of it."""

    def __init__(self, recipe):
        self.recipe, self.names = recipe, set()

    def __getattr__(self, name):
        self.names.add(name)
        return getattr(self.recipe, name)


def test_the_spec_reads_exactly_the_fields_a_sweep_keys_it_by():
    # A sweep builds one spec for the points that agree on SPEC_FIELDS: were spec to read another field, points that
    # differ in it would share a wrong spec. Every model, on each arch family, with the settings its caches depend on.
    settings = [{}, {"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}},
                {"pipeline-parallel-size": 2}, {"kv-cache-dtype": "fp8"}, {"enable-prefix-caching": False},
                {"decode-context-parallel-size": 2}, {"vllm-version": "0.26.0"}, {"vllm-version": "main"}]
    read = set()
    for model, gpu, setting in itertools.product(MODELS, ("H200", "B200", "RTX PRO 6000", "MI355X"), settings):
        try:
            recipe = load({"model": model.name, "gpu": gpu, "tensor-parallel-size": 8} | setting)
            backend = sparse_mla_backend(recipe)
        except RecipeError:  # a combination vLLM refuses
            continue
        reads = Reads(recipe)
        kv_cache.spec(reads, backend, draft_layers(recipe), 8192, 0)
        read |= reads.names
    assert read == set(kv_cache.SPEC_FIELDS)
