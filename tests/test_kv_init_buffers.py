"""kv_init_buffers.py: the GPU buffers vLLM's model runner builds with the KV cache, after the KV budget is fixed.

Two kinds of check here, none of them the module's own numbers: hand derivations from the release code, written out in
the comments (S = max-num-seqs, T = max-num-batched-tokens, L = max-model-len, k = speculative tokens, int32 4 B, int64
8 B, BF16 2 B); and each engine rule the module reads (engine.py VLLM_RULES) flipped alone, or across the release that
changed it, by the bytes its code says. tests/test_vllm_kv_init_buffers.py checks it against vLLM's own runner code.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import ROOT, SEED
from dsa_kvcalc.deployment import draft_layers, kv_spec, on_model_runner_v2, sparse_mla_backend
from dsa_kvcalc.kv_init_buffers import kv_init_buffer_bytes
from dsa_kvcalc.recipe import load, read_recipe

MIB = 1 << 20


def raw_of(path: Path, **keys) -> dict:
    return read_recipe(path) | {key.replace("_", "-"): value for key, value in keys.items()}


def figure(raw: dict, **engine_rules) -> int:
    """The module's bytes for a raw recipe, with engine rules replaced where given: whole bytes."""
    recipe = load(raw)
    if engine_rules:
        recipe = replace(recipe, engine=replace(recipe.engine, **engine_rules))
    size = kv_init_buffer_bytes(recipe, kv_spec(recipe, sparse_mla_backend(recipe)), on_model_runner_v2(recipe),
                                draft_layers(recipe)).bytes
    assert isinstance(size, int)
    return size


V41 = ROOT / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
V4 = ROOT / "recipes" / "deepseek-v4-flash-4xh200-dep4.yaml"
V32_H200 = ROOT / "recipes" / "deepseek-v3.2-8xh200-tp8.yaml"
V32_B200 = ROOT / "recipes" / "deepseek-v3.2-8xb200-tp8.yaml"
GLM5_B200 = ROOT / "recipes" / "glm-5-8xb200-tp8.yaml"
V32 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}
GLM53_FLASH = {"model": "GLM-5.3-Flash", "gpu": "B200", "tensor-parallel-size": 4}


# Hand derivations --------------------------------------------------------------------------------------------------

def test_the_seed_on_vllm_0_33_0():
    # The seed (V4.1-Flash, B200, S 256, T 8192, L 1,048,576, DSpark k 5) on Model Runner V2 (DSpark forces it). Its
    # KV-cache groups (vLLM's planner, oracle/harness.py): 8 window groups of 32-token pages (layers 0-39 and DSpark's
    # 40-42 dealt round-robin: 6, 6, 6, 5, 5, 5, 5, 5), the full group of 128-token pages, the compressor ring.
    # Block tables, vllm==0.33.0 vllm/v1/worker/gpu/model_runner.py:644-674: width = max_num_blocks_per_req(L) aligned
    # to 128 tokens; a window group keeps cdiv(L, 32) = 32,768 (SlidingWindowSpec does not override it), the full
    # group cdiv(L, 128) = 8,192, the ring 1 (CircularBufferSpec, kv_cache_interface.py:987-989, unaligned).
    # block_table.py:67-71 + 85-87: a GPU table and an input copy, int32 [S, width]:
    block_tables = 2 * 256 * (8 * 32_768 + 8_192 + 1) * 4
    assert block_tables == 553_650_176
    slot_mappings = 10 * 8192 * 8  # block_table.py:90-95, int64 [groups, T]
    # Sliding-window builders, sparse_swa.py:509-529: decode and prefill indices, int32 [T, 1, window 128] each; one
    # per window group (attn_utils.py:252-265), and DSpark's speculator builds its 3 layers' own, one per window group
    # they fall in (gpu/spec_decode/speculator.py:297-302 -> groups 0, 1, 2): 8 + 3 = 11 builders, not 8.
    windows = 11 * 2 * 8192 * 128 * 4
    # Indexer builders: the indexer caches of the ratio-2 kv sources (layers 2, 8, 14) and of the ratio-1 one (20)
    # differ in spec, so two attention groups; each an expanded block table int32 [T, width], width = the full group's
    # aligned 8,192 (indexer.py:1092-1096, worker/utils.py:308-316):
    indexers = 2 * 8192 * 8192 * 4
    # indexer_sparse_logits: DeepseekV41SparseIndexerMetadataBuilder (sparse_indexer.py:154-172), rows = the arange
    # buffer, max(S x (1 + k), T) = max(1536, 8192) (indexer.py:1078-1085), sparse blocks = 2048 candidate blocks x
    # 8 tokens / 8 (the largest of (16, 8) dividing 8, sparse_mqa_logits.py:40, 170-178), + topk 512 columns:
    scratch = 2 * 8192 * (2048 + 512) * 4
    expected = block_tables + slot_mappings + windows + indexers + scratch
    assert expected == 1_351_223_296  # 1.258 GiB; the research note's 1,352,537,132 adds its ~0.7 MB of small buffers
    assert figure(read_recipe(SEED)) == expected


def test_the_seed_on_vllm_0_30_0():
    # vLLM 0.30.0 packs 4 window groups (11, 11, 11, 10 layers; DSpark's 3 in the first three), has no sparse-logits
    # indexer, and keeps the same builders otherwise:
    block_tables = 2 * 256 * (4 * 32_768 + 8_192 + 1) * 4
    slot_mappings = 6 * 8192 * 8
    windows = (4 + 3) * 2 * 8192 * 128 * 4
    indexers = 2 * 8192 * 8192 * 4
    # (and no indexer_sparse_logits field, which its AttentionConfig refuses: the recipe without it)
    raw = raw_of(V41, vllm_version="0.30.0")
    raw["attention-config"] = {k: v for k, v in raw["attention-config"].items() if k != "indexer_sparse_logits"}
    assert figure(raw) == block_tables + slot_mappings + windows + indexers == 881_199_104


def test_deepseek_v3_2_on_model_runner_v1():
    # V3.2 on 8 x H200 at 0.27.0 runs Model Runner V1 (engine.py model_runner_v2_architectures): S 1024, T 8192,
    # L 163,840, one group of 64-token pages. V1 built its input batch in __init__ for one group of 16-token
    # placeholder blocks (vllm==0.27.0 vllm/v1/worker/gpu_model_runner.py:694-713) and re-creates it for the real one
    # (may_reinitialize_input_batch): the new int32 [S, cdiv(L, 64)] table and int64 [T] slot mapping replace the
    # placeholder's [S, cdiv(L, 16)] and [T] (block_table.py, CpuGpuBuffer on the GPU):
    block_tables = 1024 * 2560 * 4 + 8192 * 8 - (1024 * 10_240 * 4 + 8192 * 8)
    indexer = 8192 * 2560 * 4
    # FLASH_ATTN_MLA_SPARSE's chunked-prefill workspace (vllm==0.27.0 sparse_mla_attention.py): rows = min(max(8 L,
    # 4 S x 64), 64 Ki, S x 2048) = 65,536, at least S x 64 = 65,536; x (512 + 64) BF16:
    workspace = 65_536 * 576 * 2
    assert figure(raw_of(V32_H200, vllm_version="0.27.0")) == block_tables + indexer + workspace == 127_926_272


def test_mtp_draft_layers_get_builders_of_their_own_on_either_runner():
    # GLM-5 with MTP (k 3) on 8 x B200: T 16,384 from 0.28.0 (>= 160 GiB). V1 at 0.28.0: EagleProposer builds the MTP
    # layer's own indexer and sparse-MLA builders (vllm==0.28.0 vllm/v1/spec_decode/llm_base_proposer.py
    # initialize_attn_backend), beside the target's, which hold the MTP layer too: two of each.
    block_tables = 1024 * 3168 * 4 + 16_384 * 8 - (1024 * 12_672 * 4 + 16_384 * 8)  # L 202,752: 3,168 and 12,672
    indexers = 2 * 16_384 * 3168 * 4
    workspaces = 2 * 65_536 * 576 * 2
    assert figure(raw_of(GLM5_B200, vllm_version="0.28.0")) == block_tables + indexers + workspaces == 527_302_656
    # V3.2 with MTP (k 1) on Model Runner V2 at 0.33.0: the draft speculator's init_attn_backend over the MTP layer
    # (gpu/spec_decode/speculator.py:297-302) likewise doubles them; block tables twice (GPU and input copy):
    expected = 2 * 1024 * 2560 * 4 + 16_384 * 8 + 2 * 16_384 * 2560 * 4 + 2 * 65_536 * 576 * 2
    assert figure(raw_of(V32_B200, vllm_version="0.33.0")) == expected == 507_641_856


def test_deepseek_v4_on_both_runners():
    # V4-Flash, 4 x H200, S 128, T 8192, L 1,048,576, MTP k 2. Groups: two windows of 64-token pages (22 layers each,
    # the MTP layer in the second), the full group of 256-token pages, the compressor states of 4- and 8-token pages
    # (windows in vLLM's terms: their tables span L too). Widths cdiv(L, block): 16,384, 16,384, 4,096, 262,144,
    # 131,072.
    widths = 16_384 + 16_384 + 4_096 + 262_144 + 131_072
    # V1 at 0.24.0: one table each, less the 16-token placeholder's cdiv(L, 16) = 65,536; SWA builders for the two
    # window groups and the MTP layer's own (EagleProposer), decode + prefill indices from 0.24.0; the indexer's
    # [T, cdiv(L, 256)]; the ratio-128 attention builder's two c128a buffers [T, round_up(cdiv(L, 128), 128)]
    # (vllm==0.24.0 vllm/models/deepseek_v4/sparse_mla.py:185-199):
    v1 = (128 * widths * 4 + 5 * 8192 * 8 - (128 * 65_536 * 4 + 8192 * 8) + 3 * 2 * 8192 * 128 * 4
          + 8192 * 4096 * 4 + 2 * 8192 * 8192 * 4)
    assert figure(raw_of(V4, vllm_version="0.24.0")) == v1 == 883_163_136
    # Model Runner V2 at 0.33.0: both table copies, the slot mappings, the same builders
    v2 = 2 * 128 * widths * 4 + 5 * 8192 * 8 + 3 * 2 * 8192 * 128 * 4 + 8192 * 4096 * 4 + 2 * 8192 * 8192 * 4
    assert figure(raw_of(V4, vllm_version="0.33.0")) == v2 == 1_136_984_064


def test_glm_5_3_flash_kernel_block_tables():
    # GLM-5.3-Flash, 4 x B200 at 0.32.0 (BF16 cache): the attention block holds a KDA state, 1,152 tokens
    # (kv_cache.attention_block); S 1024, T 16,384, L 1,048,576. Groups: 4 KDA groups (9, 9, 8, 8 layers), the
    # attention group (11 DSA layers x latent + indexer), the tail ring. KDA rows with prefix caching: cdiv(L, 1152) =
    # 911 (MambaSpec, + 0 draft blocks); the attention group 911 (1,152 > 128: no alignment); the ring 1:
    block_tables = 2 * 1024 * (5 * 911 + 1) * 4
    slot_mappings = 6 * 16_384 * 8
    # The kpool indexer's kernel block (vllm==0.32.0 indexer.py:296-306): kpool 4 x the paged-MQA pages (32, 64) ->
    # 128 or 256; 256 does not divide 1,152, 128 does: 9 kernel blocks a block, width 911 x 9 = 8,199, in the
    # expanded table [T, 8199] and the attention group's kernel block table [1, S, 8199] (worker/utils.py:317-324):
    indexer = 16_384 * 8199 * 4 + 1024 * 8199 * 4
    # FlashInfer's sparse MLA: workspace 65,536 x 512 (a 512-wide latent, no RoPE) BF16; masked-MHA top-k mask
    # 128 MiB (GLM-5.3-Flash's dims from 0.30.0, SM100, BF16 cache):
    mla = 65_536 * 512 * 2 + 128 * MIB
    assert figure(GLM53_FLASH | {"vllm-version": "0.32.0"}) == block_tables + slot_mappings + indexer + mla \
        == 810_348_544


def test_kda_rows_without_prefix_caching_hold_one_state_and_the_drafts():
    # Without prefix caching (mamba_cache_mode none) a KDA group's row is 1 + k blocks (MambaSpec, vllm==0.33.0
    # vllm/v1/kv_cache_interface.py:1143-1153): GLM-5.3-Flash, 4 x H200, MTP k 3, 0.33.0: 3 KDA groups of 4, the
    # attention group cdiv(L, 1152) = 911 (the FP8 auto cache is SM10x's; H200 keeps BF16), the ring 1. The MTP
    # layer's indexer and MLA builders double those; indexer kernel block 128 on the 1,152 block: width 8,199.
    block_tables = 2 * 1024 * (3 * 4 + 911 + 1) * 4
    slot_mappings = 5 * 8192 * 8
    indexers = 2 * (8192 * 8199 * 4 + 1024 * 8199 * 4)
    workspaces = 2 * 65_536 * 512 * 2
    raw = {"model": "GLM-5.3-Flash", "gpu": "H200", "tensor-parallel-size": 4, "vllm-version": "0.33.0",
           "enable-prefix-caching": False, "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}
    assert figure(raw) == block_tables + slot_mappings + indexers + workspaces == 746_610_688


def test_decode_context_parallelism_splits_the_tables_and_widens_the_workspace():
    # Derived from the 0.33.0 code, not run by the oracle (its DCP groups are not emulated): with DCP 2 a full
    # group's row is cdiv(L, 64 x 2) = 1,280 (kv_cache_interface.py:610-615), the indexer's table as wide, and the
    # sparse-MLA workspace holds 1/DCP more rows (sparse_mla_attention.py:219-222): 65,536 + 32,768.
    expected = 2 * 1024 * 1280 * 4 + 8192 * 8 + 8192 * 1280 * 4 + (65_536 + 32_768) * 576 * 2
    assert figure(V32 | {"decode-context-parallel-size": 2, "vllm-version": "0.33.0"}) == expected == 165_740_544


def test_rocm_aiter_sparse_mla_builder():
    # Read from the code, no oracle (ROCm is not emulated): GLM-5 on MI355X. 0.31.0 keeps it on V1 (engine.py
    # rocm_model_runner_v1_architectures); AITER's builder holds an int32 [T x index_topk] KV-index buffer
    # (vllm==0.31.0 vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:428-432) and no chunked workspace:
    raw = {"model": "GLM-5-FP8", "gpu": "MI355X", "tensor-parallel-size": 8}
    v1 = 1024 * 3168 * 4 + 16_384 * 8 - (1024 * 12_672 * 4 + 16_384 * 8) + 16_384 * 3168 * 4 + 16_384 * 2048 * 4
    assert figure(raw | {"vllm-version": "0.31.0"}) == v1 == 302_907_392
    # 0.32.0 runs it on Model Runner V2, and AITER's builder is a SparseMLACommonMetadataBuilder with the workspace:
    v2 = 2 * 1024 * 3168 * 4 + 16_384 * 8 + 16_384 * 3168 * 4 + 16_384 * 2048 * 4 + 65_536 * 576 * 2
    assert figure(raw | {"vllm-version": "0.32.0"}) == v2 == 443_416_576


# Each rule, alone ----------------------------------------------------------------------------------------------------

def test_v1_block_tables_align_to_128_tokens_from_0_21_0():
    # L 100,000 on V1 (V3.2, H200): 0.20.2 keeps cdiv(L, 64) = 1,563 and the placeholder cdiv(L, 16) = 6,250;
    # 0.21.0 rounds them up to 1,564 and 6,256 (multiples of 128 // 64 = 2 and 128 // 16 = 8). Nothing else moves.
    raw = V32 | {"max-model-len": 100_000}
    change = 1024 * (1564 - 1563) * 4 - 1024 * (6256 - 6250) * 4
    assert figure(raw | {"vllm-version": "0.21.0"}) - figure(raw | {"vllm-version": "0.20.2"}) == change == -20_480


def test_the_indexer_table_aligns_to_128_tokens_from_0_27_0():
    # L 100,000: the indexer's expanded table grows from cdiv(L, 64) = 1,563 to 1,564 columns of T 8192 rows.
    raw = V32 | {"max-model-len": 100_000}
    assert figure(raw | {"vllm-version": "0.27.0"}) - figure(raw | {"vllm-version": "0.26.0"}) == 8192 * 4
    assert figure(raw | {"vllm-version": "0.27.0"}, indexer_table_alignment=False) \
        == figure(raw | {"vllm-version": "0.27.0"}) - 8192 * 4


def test_sliding_window_prefill_indices_from_0_24_0():
    # V4-Flash H200 recipe: three sliding-window builders gain [T, 1, 128] int32 prefill indices each
    assert figure(raw_of(V4, vllm_version="0.24.0")) - figure(raw_of(V4, vllm_version="0.23.0")) \
        == 3 * 8192 * 128 * 4
    assert figure(raw_of(V4, vllm_version="0.24.0"), swa_prefill_indices=False) \
        == figure(raw_of(V4, vllm_version="0.23.0"))


def test_the_sparse_mla_workspace_and_its_floor():
    # 0.26.0 adds the chunked-prefill workspace (65,536 x 576 BF16 on V3.2 H200)
    assert figure(V32 | {"vllm-version": "0.26.0"}) - figure(V32 | {"vllm-version": "0.25.1"}) == 65_536 * 576 * 2
    # Its floor: S x block until 0.27.1, one block from 0.28.0. With S 2048, S x 64 = 131,072 rows > the 65,536 cap:
    raw = V32 | {"max-num-seqs": 2048}
    assert figure(raw | {"vllm-version": "0.27.1"}) - figure(raw | {"vllm-version": "0.28.0"}) == 65_536 * 576 * 2
    assert figure(raw | {"vllm-version": "0.28.0"}, sparse_mla_prefill_workspace="floor seqs x block") \
        == figure(raw | {"vllm-version": "0.27.1"})
    assert figure(raw | {"vllm-version": "0.28.0"}, sparse_mla_prefill_workspace="none") \
        == figure(raw | {"vllm-version": "0.28.0"}) - 65_536 * 576 * 2


def test_the_masked_mha_top_k_mask():
    # V3.2 with a BF16 cache on B200 (T fixed at 8192 so the 0.28.0 default does not move it): 64 MiB from 0.27.0,
    # 128 MiB from 0.28.0 (GLOBAL_TOPK_MASK_MAX_BYTES); not with an FP8 cache, and not on H200 (SM10x only).
    raw = V32 | {"gpu": "B200", "max-num-batched-tokens": 8192}
    base = figure(raw | {"vllm-version": "0.27.0"}, masked_mha_mask_bytes=0)
    assert figure(raw | {"vllm-version": "0.27.0"}) - base == 64 * MIB
    assert figure(raw | {"vllm-version": "0.28.0"}) - figure(raw | {"vllm-version": "0.28.0"},
                                                               masked_mha_mask_bytes=0) == 128 * MIB
    assert figure(raw | {"vllm-version": "0.27.0", "kv-cache-dtype": "fp8"}) \
        == figure(raw | {"vllm-version": "0.27.0", "kv-cache-dtype": "fp8"}, masked_mha_mask_bytes=0)
    assert figure(V32 | {"vllm-version": "0.28.0"}) == figure(V32 | {"vllm-version": "0.28.0"},
                                                              masked_mha_mask_bytes=0)
    # GLM-5's dims join in 0.29.0 (BF16 cache on B200; T fixed, 0.29.0 moving GLM-5 to Model Runner V2 aside):
    glm = {"model": "GLM-5-FP8", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "bfloat16",
           "vllm-version": "0.29.0"}
    assert figure(glm) - figure(glm, masked_mha_architectures=frozenset({"DeepseekV32ForCausalLM"})) == 128 * MIB
    # GLM-5.3-Flash's in 0.30.0, its first release (test_glm_5_3_flash_kernel_block_tables counts its mask)


def test_shared_indexers_split_the_mla_builders_from_0_30_0():
    # GLM-5.2 (an indexer on 21 of 78 layers): from 0.30.0 the MLA spec carries is_index_group_leader, so the layers
    # with and without an indexer get a sparse-MLA builder each: one more workspace.
    raw = {"model": "GLM-5.2-FP8", "gpu": "H200", "tensor-parallel-size": 8, "max-model-len": 131_072}
    assert figure(raw | {"vllm-version": "0.30.0"}) - figure(raw | {"vllm-version": "0.29.0"}) == 65_536 * 576 * 2
    assert figure(raw | {"vllm-version": "0.30.0"}, mla_groups_split_by_index_leader=False) \
        == figure(raw | {"vllm-version": "0.29.0"})


def test_glm_5_3_flash_rules_before_0_32_0():
    # GLM-5.3-Flash, 4 x B200 at 0.32.0 (test_glm_5_3_flash_kernel_block_tables), each 0.30.0/0.31.0 rule alone:
    raw = GLM53_FLASH | {"vllm-version": "0.32.0"}
    now = figure(raw)
    # The tail ring as a KpoolTailSpec: one 4-slot block aligned to 128 tokens, 32 columns (x 2 copies x S):
    assert figure(raw, kpool_tail_row_aligned=True) - now == 2 * 1024 * (32 - 1) * 4
    # The indexer's 64-token kernel block: 1,152 / 64 = 18 a block, width 16,398, in the expanded and kernel tables:
    assert figure(raw, kpool_indexer_pooled_kernel_blocks=False) - now \
        == (16_384 + 1024) * (16_398 - 8199) * 4
    # Kernel blocks in the attention group's block tables instead of a kernel block table per attention group: the
    # attention group's two table copies 18 x wider at the 64-token kernel block of 0.30.0, no kernel table
    assert figure(raw, kernel_block_tables_per_attention_group=False, kpool_indexer_pooled_kernel_blocks=False) \
        - figure(raw, kpool_indexer_pooled_kernel_blocks=False) == 2 * 1024 * 911 * (18 - 1) * 4 - 1024 * 16_398 * 4


def test_rocm_gets_the_common_builder_from_0_32_0():
    raw = {"model": "GLM-5-FP8", "gpu": "MI355X", "tensor-parallel-size": 8, "vllm-version": "0.32.0"}
    assert figure(raw) - figure(raw, rocm_sparse_mla_common_builder=False) == 65_536 * 576 * 2


def test_the_term_is_derived_and_cites_the_rules():
    recipe = load(read_recipe(SEED))
    term = kv_init_buffer_bytes(recipe, kv_spec(recipe, sparse_mla_backend(recipe)), on_model_runner_v2(recipe),
                                draft_layers(recipe))
    assert term.provenance == "derived"
    assert "Model Runner V2" in term.source and "sliding-window indices (11 builders) 92,274,688 B" in term.source
    assert "vllm==0.33.0 vllm/v1/worker/gpu/model_runner.py:623-826" in term.source
    assert "swa_prefill_indices True" in term.source and "vLLM 0.33.0" in term.source


# The formulas' other branches -------------------------------------------------------------------------------------

def pieces_of(raw: dict) -> str:
    recipe = load(raw)
    return kv_init_buffer_bytes(recipe, kv_spec(recipe, sparse_mla_backend(recipe)), on_model_runner_v2(recipe),
                                draft_layers(recipe)).source


def test_the_workspace_rows_where_length_or_sequences_bind():
    # min(max(8 L, 4 S x 64), 64 Ki, S x 2048): with S 32 and L 4096, 8 L = 32,768 binds (4 S x 64 = 8,192, S x 2048
    # = 65,536); with S 128 and L 1024, 4 S x 64 = 32,768 binds (8 L = 8,192). V3.2, H200, 0.33.0.
    for seqs, length in ((32, 4096), (128, 1024)):
        raw = V32 | {"vllm-version": "0.33.0", "max-num-seqs": seqs, "max-model-len": length}
        assert f"sparse-MLA prefill workspaces (1 builders) {32_768 * 576 * 2:,} B" in pieces_of(raw)


def test_the_c128a_width_rounds_up_to_128():
    # L 16,512: cdiv(L, 128) = 129 compressed tokens, rounded up to 256 columns: 2 x T 8192 x 256 x 4
    raw = {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 8, "enable-expert-parallel": True,
           "kv-cache-dtype": "fp8", "max-model-len": 16_512, "vllm-version": "0.33.0"}
    assert f"V4 c128a top-k buffers {2 * 8192 * 256 * 4:,} B" in pieces_of(raw)


def test_the_sparse_scratch_rows_and_sparse_blocks():
    # The seed with 1,024 batched tokens: rows = max(S x (1 + k), T) = max(256 x 6, 1024) = 1,536
    raw = read_recipe(SEED) | {"max-num-batched-tokens": 1024}
    assert f"V4.1 sparse-indexer row scratch (2) {2 * 1536 * (2048 + 512) * 4:,} B" in pieces_of(raw)
    # Candidate blocks of 16 tokens take DeepGEMM's 16-token sparse block (the largest of (16, 8) dividing 16): 2048 x
    # 16 / 16 = 2048 sparse blocks a row, not 4096
    recipe = load(read_recipe(SEED))
    recipe = replace(recipe, model=replace(recipe.model, candidate_block_size=16))
    source = kv_init_buffer_bytes(recipe, kv_spec(recipe, sparse_mla_backend(recipe)), on_model_runner_v2(recipe),
                                draft_layers(recipe)).source
    assert f"V4.1 sparse-indexer row scratch (2) {2 * 8192 * (2048 + 512) * 4:,} B" in source


def test_decode_context_parallelism_before_the_aligned_indexer_table():
    # V3.2, H200, DCP 2 at 0.26.0 (V1): the table row cdiv(L, 64 x 2) = 1,280; the placeholder's cdiv(L, 16) = 10,240
    # (no DCP in __init__'s placeholder); the indexer's cdiv(L, 64 x 2) = 1,280 (vllm==0.26.0 indexer.py:346-349);
    # the workspace 65,536 + 32,768 rows.
    expected = (1024 * 1280 * 4 + 8192 * 8 - (1024 * 10_240 * 4 + 8192 * 8) + 8192 * 1280 * 4
                + (65_536 + 32_768) * 576 * 2)
    assert figure(V32 | {"decode-context-parallel-size": 2, "vllm-version": "0.26.0"}) == expected


def test_the_kpool_indexer_takes_the_largest_kernel_block_that_divides():
    # GLM-5.3-Flash, 2 x H200, MTP k 3, 0.33.0: the attention block is 2,304 tokens, which both 128 and 256 divide:
    # 256, 9 a block. Rows: KDA cdiv(L, 2304) + 3 = 459 (3 groups), attention 456, ring 1. The MTP layer doubles the
    # indexer (expanded [T, 456 x 9] and kernel [S, 456 x 9] tables) and the workspace (65,536 x 512 BF16).
    block_tables = 2 * 1024 * (3 * 459 + 456 + 1) * 4
    slot_mappings = 5 * 8192 * 8
    indexers = 2 * (8192 + 1024) * 4104 * 4
    workspaces = 2 * 65_536 * 512 * 2
    raw = {"model": "GLM-5.3-Flash", "gpu": "H200", "tensor-parallel-size": 2, "vllm-version": "0.33.0",
           "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}
    assert figure(raw) == block_tables + slot_mappings + indexers + workspaces == 452_149_248
