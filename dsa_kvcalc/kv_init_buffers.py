"""The GPU buffers vLLM's model runner allocates when it builds the KV cache, after the KV budget is fixed: block
tables and the attention metadata builders' persistent buffers, alive for the life of the engine.

The worker sizes the KV cache as requested - non_kv - graph estimate (vllm==0.33.0 vllm/v1/worker/gpu_worker.py:
753-757), non_kv measured over the profile run (:685-700) and the graph estimate over the captures alone
(vllm==0.33.0 vllm/v1/worker/gpu/model_runner.py:1104-1106 on Model Runner V2; vllm/v1/worker/gpu_model_runner.py:
6333-6349 per graph on V1). Then initialize_kv_cache (vllm==0.33.0 vllm/v1/worker/gpu/model_runner.py:623-826; V1
vllm/v1/worker/gpu_model_runner.py:6990-7055) builds, besides the KV tensors, what this module counts. The graph
estimate runs it first on a minimal KV cache (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:1042-1062; V1
gpu_model_runner.py:6268-6270) but before its measurement starts, and none of it depends on the number of blocks, so it
lies in no measured window: it comes out of total x (1 - gpu-memory-utilization) at run time.

- Block tables. Model Runner V2 keeps, per KV-cache group, an int32 table of max_num_seqs rows of the group's width and
  an input copy of it, and one int64 slot mapping of max_num_batched_tokens a group (vllm==0.33.0
  vllm/v1/worker/gpu/block_table.py:65-95). V1 builds its input batch's table (one int32 table and one int64 slot
  mapping a group) in __init__, inside the profile, for one group of placeholder 16-token blocks (vllm==0.33.0
  vllm/v1/worker/gpu_model_runner.py:704-745), and re-creates it here for the real groups (:6836-6903): counted is the
  new table less the freed placeholder's, which can be negative.
- Metadata builders, one per attention group: the layers of a KV-cache group that share a backend, a layer spec and a
  query head count (vllm==0.33.0 vllm/v1/worker/gpu/attn_utils.py:252-265; V1 gpu_model_runner.py:6662-6686). A draft
  model's layers get builders of their own as well: V1's proposer keys them by backend (vllm==0.33.0
  vllm/v1/spec_decode/llm_base_proposer.py:1711-1767), Model Runner V2's draft speculator as the runner does, within
  each KV-cache group (vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/speculator.py:287-302).

Counted: each buffer of 1 MiB or more at the recipes' shapes, with the rule it follows. Left out: each builder's
smaller buffers (query-length, sequence-length and slot vectors of max_num_batched_tokens entries, tile schedules:
about 0.1 MiB a builder, at most 3.5 MiB in all in the cases the oracle checked); what a builder allocates on first use
rather than at construction (DSpark's non-causal window indices, vllm==0.33.0
vllm/v1/attention/backends/mla/sparse_swa.py:639-650, which the captures allocate); pinned host buffers; the KV tensors
themselves. With pipeline parallelism the groups are the first stage's (kv_cache.spec) and the draft builders are
counted as on one stage.
"""

import math

from dsa_kvcalc.engine import plain
from dsa_kvcalc.estimates import Term
from dsa_kvcalc.keys import Recipe
from dsa_kvcalc.kv_cache import (PAGED_MQA_PAGE_SIZES, V41_WINDOW_BLOCK, V4_WINDOW_BLOCK, CacheConfig, Group, KvSpec,
                                 cdiv, owns_indexer, round_up)

INT32_BYTES = 4
INT64_BYTES = 8
BF16_BYTES = 2  # the model dtype the sparse-MLA prefill workspace takes
# V1's input batch in __init__: one group of CacheConfig.DEFAULT_BLOCK_SIZE tokens (vllm==0.33.0
# vllm/config/cache.py; vllm/v1/worker/gpu_model_runner.py:704-712): the block size is not known before the model is
# loaded (vllm/v1/executor/multiproc_executor.py:801-802 sets it after load_model)
PLACEHOLDER_BLOCK_TOKENS = 16
BLOCK_TABLE_TOKEN_ALIGNMENT = 128  # vllm==0.33.0 vllm/v1/worker/block_table.py:29-41 get_block_table_width
# The sparse-MLA builders' chunked-prefill workspace: min(max(8 x L, 4 x seqs x block), 64 Ki, seqs x topk) rows
# (vllm==0.33.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:274-291)
WORKSPACE_LENGTH_ROWS = 8
WORKSPACE_SEQ_BLOCKS = 4
WORKSPACE_MAX_ROWS = 64 * 1024
C128A_TOPK_ALIGNMENT = 128  # vllm==0.33.0 vllm/models/deepseek_v4/sparse_mla.py:39 (0.20.0 flashmla_sparse.py:382)
C128A_RATIO = 128
# V4.1's sparse-block sizes the DeepGEMM sparse kernels take, largest first (vllm==0.33.0
# vllm/model_executor/kernels/attention/dsa/sparse_mqa_logits.py:40, pick_sparse_block_kv :170-178)
SPARSE_BLOCK_KV_CHOICES = (16, 8)
# The V3.2 indexer backend's kernel block, which GLM-5.3-Flash's kpool indexer takes in vLLM 0.30.0 and 0.31.0
# (vllm==0.30.0 vllm/v1/attention/backends/mla/indexer.py:203-204)
INDEXER_KERNEL_TOKENS = 64


# The engine rules this module reads (engine.py VLLM_RULES, each with its history and sources there)
KV_INIT_RULES = ("v1_block_table_alignment", "indexer_table_alignment", "swa_prefill_indices",
                 "sparse_mla_prefill_workspace", "masked_mha_mask_bytes", "masked_mha_architectures",
                 "mla_groups_split_by_index_leader", "kernel_block_tables_per_attention_group",
                 "kpool_indexer_pooled_kernel_blocks", "kpool_tail_row_aligned", "rocm_sparse_mla_common_builder")
RUNNER_SOURCES = {True: "vllm==0.33.0 vllm/v1/worker/gpu/model_runner.py:623-826 initialize_kv_cache",
                  False: "vllm==0.33.0 vllm/v1/worker/gpu_model_runner.py:6990-7055 initialize_kv_cache"}


def kv_init_buffer_bytes(recipe: Recipe, kv: KvSpec, v2: bool, draft_layers: int) -> Term:
    """The bytes of the KV-init buffers of one rank, listed by piece in the source, with the runner's code and the
    release's rules they follow. v2: on Model Runner V2 (deployment.on_model_runner_v2); draft_layers: the draft
    layers whose caches join the KV cache (deployment.draft_layers)."""
    engine = recipe.engine
    pieces = block_table_pieces(recipe, kv, v2) + builder_pieces(recipe, kv, draft_layers)
    listed = "; ".join(f"{name} {size:,} B" for name, size in pieces if size)
    rules = ", ".join(f"{name} {plain(getattr(engine, name))}" for name in KV_INIT_RULES)
    return Term(sum(size for _, size in pieces), "derived",
                f"Model Runner {'V2' if v2 else 'V1'}'s KV-init buffers: {listed} ({RUNNER_SOURCES[v2]} and the "
                f"builders it makes, dsa_kvcalc/kv_init_buffers.py; engine.py rules at {engine.label}: {rules})")


# Block tables ------------------------------------------------------------------------------------------------------

def block_alignment(block: int) -> int:
    """The blocks of a whole 128-token span (get_block_table_width; before vLLM 0.27.0 128 // block for a block up to
    128 and 1 above, the same for the block sizes these models take)."""
    return BLOCK_TABLE_TOKEN_ALIGNMENT // math.gcd(BLOCK_TABLE_TOKEN_ALIGNMENT, block)



def table_width(recipe: Recipe, group: Group, aligned: bool) -> int:
    """A group's block-table row: the blocks of max_model_len (a sliding window's table spans the whole length too:
    SlidingWindowSpec keeps the base max_num_blocks_per_req, vllm==0.33.0 vllm/v1/kv_cache_interface.py:290-300), split
    over DCP ranks; one block for a ring (CircularBufferSpec, :987-989), GLM-5.3-Flash's tail ring aligned to 128
    tokens before vLLM 0.32.0 (engine.py kpool_tail_row_aligned); a KDA state's blocks of max_model_len plus one a
    draft token (MambaSpec, :1143-1153; without prefix caching a KDA block is max_model_len, kv_cache/glm5next.py,
    so 1 + k)."""
    length, k = recipe.max_model_len, recipe.num_speculative_tokens
    if group.kind == "state":
        tail = recipe.model.family == "glm5next" and recipe.engine.kpool_tail_row_aligned
        return block_alignment(group.block) if tail and aligned else 1
    if group.kind == "linear":
        return cdiv(length, group.block) + k
    blocks = cdiv(length, group.block * recipe.decode_context_parallel_size)
    return round_up(blocks, block_alignment(group.block)) if aligned else blocks


def kernel_split(recipe: Recipe, group: Group) -> int:
    """Kernel blocks a block of this group splits into in Model Runner V2's block tables: GLM-5.3-Flash's attention
    group in vLLM 0.30.0 and 0.31.0, whose backends share the indexer's 64-token kernel block (vllm==0.30.0
    vllm/v1/worker/gpu/block_table.py:48-58); from 0.32.0 the split is each attention group's own (engine.py
    kernel_block_tables_per_attention_group)."""
    engine = recipe.engine
    if recipe.model.family != "glm5next" or group.kind != "full" or engine.kernel_block_tables_per_attention_group:
        return 1
    return group.block // INDEXER_KERNEL_TOKENS


def block_table_pieces(recipe: Recipe, kv: KvSpec, v2: bool) -> list[tuple[str, int]]:
    seqs, tokens = recipe.max_num_seqs, recipe.max_num_batched_tokens
    if v2:  # aligned in every release with Model Runner V2 for these models (0.25.0+)
        widths = [table_width(recipe, g, True) * kernel_split(recipe, g) for g in kv.groups]
        return [("block tables and their input copies", 2 * seqs * sum(widths) * INT32_BYTES),
                ("slot mappings", len(kv.groups) * tokens * INT64_BYTES)]
    aligned = recipe.engine.v1_block_table_alignment
    widths = [table_width(recipe, g, aligned) for g in kv.groups]
    placeholder_blocks = cdiv(recipe.max_model_len, PLACEHOLDER_BLOCK_TOKENS)
    placeholder = round_up(placeholder_blocks, block_alignment(PLACEHOLDER_BLOCK_TOKENS)) if aligned \
        else placeholder_blocks
    return [("block tables", seqs * sum(widths) * INT32_BYTES),
            ("slot mappings", len(kv.groups) * tokens * INT64_BYTES),
            ("freed placeholder block table", -(seqs * placeholder * INT32_BYTES + tokens * INT64_BYTES))]


# Metadata builders -------------------------------------------------------------------------------------------------

def builder_pieces(recipe: Recipe, kv: KvSpec, draft_layers: int) -> list[tuple[str, int]]:
    family = recipe.model.family
    if family == "deepseek_v4":
        return window_pieces(recipe, kv, V4_WINDOW_BLOCK) + indexer_pieces(recipe, kv, 1) + c128a_pieces(recipe)
    if family == "deepseek_v41":
        return window_pieces(recipe, kv, V41_WINDOW_BLOCK) + indexer_pieces(recipe, kv, v41_indexer_builders(recipe))
    drafts = 1 if draft_layers else 0  # the MTP layer owns an indexer and an MLA layer, in one group
    return indexer_pieces(recipe, kv, 1 + drafts) + sparse_mla_pieces(recipe, kv, mla_builders(recipe) + drafts)


def full_group(kv: KvSpec) -> Group:
    return next(g for g in kv.groups if g.kind == "full")


def indexer_kernel_block(recipe: Recipe, block: int) -> int:
    """The indexer's kernel block: the group's block, but GLM-5.3-Flash's kpool indexer takes 64 tokens in vLLM 0.30.0
    and 0.31.0 and from 0.32.0 the largest kpool x paged-MQA page that divides the block (Glm5NextIndexerBackend,
    vllm==0.32.0 vllm/v1/attention/backends/mla/indexer.py:296-306; select_common_block_size, vllm==0.33.0
    vllm/v1/worker/utils.py:515-553)."""
    model = recipe.model
    if not model.kpool_indexer:
        return block
    if not recipe.engine.kpool_indexer_pooled_kernel_blocks:
        return INDEXER_KERNEL_TOKENS
    return max(kernel for kernel in (model.index_kpool * page for page in PAGED_MQA_PAGE_SIZES) if block % kernel == 0)


def indexer_pieces(recipe: Recipe, kv: KvSpec, builders: int) -> list[tuple[str, int]]:
    """Each indexer builder's expanded block table, int32 [max_num_batched_tokens, width in kernel blocks]
    (vllm==0.33.0 vllm/v1/attention/backends/mla/indexer.py:1092-1096, width from vllm/v1/worker/utils.py:308-316:
    aligned to 128 tokens from vLLM 0.27.0; before, cdiv(max_model_len, kernel block x DCP), vllm==0.26.0
    indexer.py:346-357); V4.1's sparse-logits row scratch beside it; GLM-5.3-Flash's kernel block table from 0.32.0."""
    group = full_group(kv)
    kernel = indexer_kernel_block(recipe, group.block)
    if recipe.engine.indexer_table_alignment:
        width = table_width(recipe, group, True) * group.block // kernel
    else:
        width = cdiv(recipe.max_model_len, kernel * recipe.decode_context_parallel_size)
    pieces = [(f"indexer expanded block tables ({builders} builders)",
               builders * recipe.max_num_batched_tokens * width * INT32_BYTES)]
    if kernel != group.block and recipe.engine.kernel_block_tables_per_attention_group:
        # AttentionGroup.kernel_block_table, int32 [builders a group, max_num_seqs, width] (vllm==0.33.0
        # vllm/v1/worker/utils.py:317-324)
        pieces.append((f"indexer kernel block tables ({builders})",
                       builders * recipe.max_num_seqs * width * INT32_BYTES))
    if sparse_logits(recipe):
        pieces.append((f"V4.1 sparse-indexer row scratch ({builders})", builders * sparse_scratch_bytes(recipe)))
    return pieces


def sparse_logits(recipe: Recipe) -> bool:
    """V4.1's sparse-logits indexer builder (DeepseekV41SparseIndexerMetadataBuilder, vLLM 0.31.0+, which starts only
    on SM10x: vllm==0.33.0 vllm/v1/attention/backends/mla/sparse_indexer.py:116-120) under
    attention-config.indexer_sparse_logits."""
    return recipe.model.family == "deepseek_v41" and recipe.indexer_sparse_logits \
        and bool(recipe.engine.v41_indexer_sparse_logits_alignment)


def sparse_scratch_bytes(recipe: Recipe) -> int:
    """int32 [rows, sparse blocks] + [rows, index_topk] (vllm==0.33.0 vllm/v1/attention/backends/mla/
    sparse_indexer.py:154-172), rows = the indexer's arange buffer, max(max_num_seqs x (1 + k), max_num_batched_tokens)
    (indexer.py:1078-1085), sparse blocks = candidate_topk_blocks x candidate_block_size / the largest sparse block
    that divides it."""
    model = recipe.model
    rows = max(recipe.max_num_seqs * (1 + recipe.num_speculative_tokens), recipe.max_num_batched_tokens)
    sparse_block = next(s for s in SPARSE_BLOCK_KV_CHOICES if model.candidate_block_size % s == 0)
    sparse_blocks = model.candidate_topk_blocks * model.candidate_block_size // sparse_block
    return rows * (sparse_blocks + model.index_topk) * INT32_BYTES


def v41_indexer_builders(recipe: Recipe) -> int:
    """One indexer attention group per compress ratio among the layers that keep an indexer cache (the spec differs
    with the ratio: vllm==0.33.0 vllm/models/deepseek_v41/attention.py)."""
    model = recipe.model
    owners = set(model.kv_source_layers) & set(model.index_source_layers)
    return len({model.compress_ratios[layer] for layer in owners})


def window_pieces(recipe: Recipe, kv: KvSpec, block: int) -> list[tuple[str, int]]:
    """DeepSeek-V4's and V4.1's sliding-window builders (DeepseekSparseSWAMetadataBuilder), one per window group of
    the target and one per window group the draft layers fall in (V1's proposer requires them in one,
    vllm==0.33.0 vllm/v1/spec_decode/llm_base_proposer.py:1689-1709): int32 [max_num_batched_tokens, 1, window] decode
    indices, and prefill indices the same from vLLM 0.24.0 (vllm==0.33.0 vllm/v1/attention/backends/mla/sparse_swa.py:
    503-534; vllm==0.20.0 sparse_swa.py:236 the decode indices only)."""
    model = recipe.model
    windows = [g for g in kv.groups if g.kind == "window" and g.block == block]
    drafts = [g for g in windows if any(c.layer >= model.num_layers for c in g.caches)]
    builders = len(windows) + len(drafts)
    arrays = 2 if recipe.engine.swa_prefill_indices else 1
    return [(f"sliding-window indices ({builders} builders)",
             builders * arrays * recipe.max_num_batched_tokens * model.sliding_window * INT32_BYTES)]


def c128a_pieces(recipe: Recipe) -> list[tuple[str, int]]:
    """DeepSeek-V4's ratio-128 attention builder: int32 global-decode and prefill top-k buffers of
    [max_num_batched_tokens, cdiv(max_model_len, 128) rounded up to 128] (vllm==0.33.0
    vllm/models/deepseek_v4/sparse_mla.py:156-183; vllm==0.20.0 vllm/v1/attention/backends/mla/flashmla_sparse.py:
    379-408)."""
    width = round_up(cdiv(recipe.max_model_len, C128A_RATIO), C128A_TOPK_ALIGNMENT)
    return [("V4 c128a top-k buffers", 2 * recipe.max_num_batched_tokens * width * INT32_BYTES)]


def mla_builders(recipe: Recipe) -> int:
    """The target's sparse-MLA attention groups: one, or two from vLLM 0.30.0 where shared indexers leave layers
    without one, whose spec says is_index_group_leader False (vllm==0.30.0
    vllm/model_executor/layers/attention/mla_attention.py:1372)."""
    config = CacheConfig.of(recipe)
    leaderless = not all(owns_indexer(config, layer) for layer in range(recipe.model.num_layers))
    return 2 if leaderless and recipe.engine.mla_groups_split_by_index_leader else 1


def sparse_mla_pieces(recipe: Recipe, kv: KvSpec, builders: int) -> list[tuple[str, int]]:
    """The sparse-MLA builders (SparseMLACommonMetadataBuilder): from vLLM 0.26.0 a BF16 chunked-prefill workspace of
    rows x (kv_lora_rank + rope) (vllm==0.33.0 vllm/model_executor/layers/attention/sparse_mla_attention.py:211-226,
    274-291; vllm==0.26.0 :72-114), and on SM10x for an unquantized cache the masked-MHA top-k mask (:67, :99-135,
    :227-241); ROCm's AITER builder an int32 [max_num_batched_tokens x index_topk] KV-index buffer (vllm==0.33.0
    vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py:494-498), the common builder's workspace only from 0.32.0
    (rocm_aiter_mla_sparse.py:423-425)."""
    engine, model = recipe.engine, recipe.model
    rocm = recipe.gpu.family == "rocm"
    pieces = []
    if rocm:
        pieces.append((f"AITER sparse-MLA KV indices ({builders} builders)",
                       builders * recipe.max_num_batched_tokens * model.index_topk * INT32_BYTES))
    if engine.sparse_mla_prefill_workspace != "none" and (engine.rocm_sparse_mla_common_builder or not rocm):
        pieces.append((f"sparse-MLA prefill workspaces ({builders} builders)",
                       builders * workspace_rows(recipe, full_group(kv).block) * model.mla_head_size * BF16_BYTES))
    masked = recipe.gpu.family == "sm100" and model.architecture in engine.masked_mha_architectures \
        and not recipe.quantized_cache
    if masked:
        pieces.append((f"masked-MHA top-k masks ({builders})", builders * engine.masked_mha_mask_bytes))
    return pieces


def workspace_rows(recipe: Recipe, block: int) -> int:
    """min(max(8 x L, 4 x seqs x block), 64 Ki, seqs x topk), at least seqs x block (0.26.0-0.27.1) or block (0.28.0+,
    vllm==0.28.0 sparse_mla_attention.py:199), plus 1/DCP more rows under DCP (vllm==0.33.0 :219-222; DCP's own
    rounding, align_mla_chunked_context_workspace_size, is not modelled)."""
    seqs, length, dcp = recipe.max_num_seqs, recipe.max_model_len, recipe.decode_context_parallel_size
    rows = min(max(WORKSPACE_LENGTH_ROWS * length, WORKSPACE_SEQ_BLOCKS * seqs * block), WORKSPACE_MAX_ROWS,
               seqs * recipe.model.index_topk)
    floor = seqs * block if recipe.engine.sparse_mla_prefill_workspace == "floor seqs x block" else block
    rows = max(rows, floor)
    return rows + (rows // dcp if dcp > 1 else 0)
