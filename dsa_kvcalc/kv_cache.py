"""KV-cache specs per layer, as each vLLM release's model code builds them, their groups, and the tokens vLLM logs for
a given KV memory.

Every cache layer has a spec (vllm/v1/kv_cache_interface.py): pages of `block` tokens of `page` bytes, and the pages
one request may hold: all of max_model_len for full attention, the window plus the tokens in flight for a sliding
window, a fixed number for a state (a compressor ring, a linear-attention state). Layers form groups
(vllm/v1/core/kv_cache_utils.py; kv_cache_planning.py in 0.33.0), a block costs what the release prices it at, and

    blocks              = available KV bytes // block bytes
    concurrency         = blocks / pages per request (summed over groups)
    "GPU KV cache size" = int(concurrency x max_model_len)

V3.2 and GLM-5.x have one group: every layer's MLA page and indexer page. DeepSeek-V4 and V4.1 keep compressed,
indexer, sliding-window and compressor-state caches in several groups. GLM-5.3-Flash, a hybrid, keeps a state per
request in each KDA layer and in each DSA layer a latent, a kpool indexer and a tail ring, in blocks sized to hold a
state. With pipeline parallelism each stage keeps its
layers' caches and every stage is cut to the fewest blocks. The version-dependent rules are in engine.py.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from dsa_kvcalc.keys import Recipe

MLA_BLOCK_TOKENS = 64
# Bytes per token of one MLA layer (512 latent + 64 RoPE): fp8_ds_mla packs 512 FP8 NoPE + 4 FP32 scales + 64 BF16
# RoPE = 656 (FLASHMLA_SPARSE, flashmla_sparse.py:91-96); FlashInfer's sparse MLA keeps standard fp8, 576
# (flashinfer_mla_sparse.py:107-134); BF16 is 576 x 2 = 1152.
MLA_FP8_DS_BYTES = 656
MLA_FP8_BYTES = 576
MLA_BF16_BYTES = 1152
# nvfp4_ds_mla: 256 B e2m1 NoPE + 64 B FP8 RoPE + 32 B FP8 scales (vllm==0.30.0
# vllm/v1/attention/backends/mla/flashmla_sparse.py:108-121; mla_attention.py:1361), FlashMLA-sparse on SM100 only
MLA_NVFP4_DS_BYTES = 352
INDEXER_ENTRY_BYTES = 128 + 4  # 128 FP8 values + one FP32 scale (vllm/models/deepseek_v32/attention.py:92-97)
INDEXER_MXFP4_ENTRY_BYTES = 128 // 2 + 128 // 32  # vllm==0.33.0 vllm/models/deepseek_v41/attention.py:101-109
# DeepSeek-V4 (vllm/models/deepseek_v4/attention.py:690-748, compressor.py:152-200, sparse_swa.py:87-107):
V4_ENTRY_BYTES = 448 + 64 * 2 + 8  # FP8 NoPE + BF16 RoPE + scales
V4_PAGE_ALIGNMENT = 576  # pages rounded up to multiples of 576 B (kv_cache_interface.py:372-378)
V4_HEAD_DIM = 512
V4_WINDOW_BLOCK = 64
V4_COMPRESSED_BLOCK = 256  # --block-size, the sparse-SWA backend's preference (sparse_swa.py:127-128)
V4_STATE_BYTES = 4  # compressor states are FP32 (compressor.py:170)
# DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py:521-536, 569; compressor.py:221-233): MXFP8
# records on the SM10x family (528 B, 512 B alignment), V4's elsewhere (584 B, 576 B); the compressed record is NVFP4
# (288 B) under nvfp4_ds_mla; windows of 32-token pages; the ratio-2 compressors' FP32 ring of max(8, next_pow2(k + 2))
# slots of [kv, score] x 512 x 4 B, one block a request.
V41_MXFP8_RECORD = 528
V41_NVFP4_RECORD = 288
V41_MXFP8_ALIGNMENT = 512
V41_WINDOW_BLOCK = 32
V41_RING_SLOT_BYTES = 2 * 512 * 4


@dataclass(frozen=True)
class Cache:
    """One KV-cache spec of one layer."""
    layer: int
    # full (pages for all of max_model_len), window (a sliding window), state (a ring: a fixed number of pages) or
    # linear (a linear-attention layer's state, vLLM's MambaSpec: a fixed number of pages)
    kind: str
    block: int  # tokens per page (states: slots per page)
    page_bytes: int
    window: int = 0  # window: its tokens
    state_pages: int = 0  # state, linear: the pages one request holds
    stride_alignment: int = 1  # block_stride_alignment: the block's bytes are a multiple of it (vLLM 0.31.0+)
    tokens_per_state: int = 1  # tokens an entry stands for (GLM-5.3-Flash's kpool indexer: index_kpool)


@dataclass(frozen=True)
class Group:
    kind: str
    block: int
    window: int
    caches: tuple[Cache, ...]

    @property
    def page_bytes(self) -> int:
        return sum(c.page_bytes for c in self.caches)

    @property
    def pages(self) -> tuple[int, ...]:
        return tuple(c.page_bytes for c in self.caches)


@dataclass(frozen=True)
class KvSpec:
    groups: tuple[Group, ...]
    block_bytes: int  # what one block id costs (on the stage with the most)
    pages_per_request: int  # pages one request of max_model_len holds, over all groups
    window_state_pages: int  # of those, its window and state groups': up to window + tokens in flight, or a count
    request_bytes: int  # vLLM's "KV cache is needed" for one request of max_model_len
    max_model_len: int
    tokens_from_concurrency: bool  # vLLM >= 0.20.1: tokens = int(concurrency x L); before: blocks x block tokens
    dcp: int

    def blocks(self, kv_bytes: int) -> int:
        return kv_bytes // self.block_bytes

    def tokens(self, kv_bytes: int) -> int:
        blocks = self.blocks(kv_bytes)
        if not self.tokens_from_concurrency:
            return blocks // len(self.groups) * min(g.block for g in self.groups) * self.dcp
        return int(blocks / self.pages_per_request * self.max_model_len)

    @property
    def bytes_per_logged_token(self) -> int:
        """KV bytes per token of "GPU KV cache size": the per-token cost of a one-group model; for DeepSeek-V4 each
        request's window and state pages are folded in, so it moves with max_model_len."""
        return round(self.block_bytes * self.pages_per_request / self.max_model_len)

    def bytes_for(self, tokens: int) -> int:
        """The KV bytes behind a logged "GPU KV cache size" (tokens backwards, to the block)."""
        return math.ceil(tokens * self.pages_per_request / self.max_model_len) * self.block_bytes


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(value: int, multiple: int) -> int:
    return cdiv(value, multiple) * multiple


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


# Layers: V3.2 and GLM-5.x ------------------------------------------------------------------------------------------

def mla_token_bytes(cache_dtype: str, sparse_mla_backend: str) -> int:
    """One MLA layer's bytes a token (vllm/model_executor/layers/attention/mla_attention.py
    _canonicalize_sparse_mla_kv_cache_dtype): FlashMLA-sparse stores any quantized cache as fp8_ds_mla (or
    nvfp4_ds_mla), and so does the SM12x backend for auto and fp8; FlashInfer's sparse MLA and ROCm keep standard
    fp8; an unquantized cache is BF16."""
    ds_mla = sparse_mla_backend in ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120")
    if cache_dtype == "nvfp4_ds_mla":
        return MLA_NVFP4_DS_BYTES
    if sparse_mla_backend == "FLASHINFER_MLA_SPARSE_SM120" and cache_dtype == "auto":
        return MLA_FP8_DS_BYTES
    if cache_dtype in ("auto", "bfloat16", "float16"):
        return MLA_BF16_BYTES
    return MLA_FP8_DS_BYTES if ds_mla else MLA_FP8_BYTES


def owns_indexer(recipe: Recipe, layer: int) -> bool:
    """Shared indexers (GLM-5.2, GLM-5.3): a layer skips the top-k when max(layer - offset + 1, 0) % freq != 0, and
    since vLLM 0.24.0 builds no indexer, so no indexer cache (vllm==0.24.0
    vllm/model_executor/models/deepseek_v2.py:1024-1049)."""
    model = recipe.model
    if model.index_topk_freq == 1 or not recipe.engine.shared_indexers_skip_cache or layer >= model.num_layers:
        return True  # MTP layers always build theirs
    return max(layer - model.index_skip_topk_offset + 1, 0) % model.index_topk_freq == 0


def mla_stride_alignment(recipe: Recipe, backend: str, token_bytes: int, block: int = MLA_BLOCK_TOKENS) -> int:
    """The bytes a block of MLA pages is a multiple of from vLLM 0.31.0: the rows of one token's record each
    sparse-MLA backend reads a page as (engine.py mla_block_stride_rows); FlashMLA's quantized pages off SM10x
    are whole 64-token kernel pages from 0.32.0, which a 64-token block already is (engine.py
    flashmla_sparse_quantized_kernel_block; get_block_stride_alignment: 1 where the kernel page is the block)."""
    variant = backend
    if backend == "FLASHMLA_SPARSE" and token_bytes in (MLA_FP8_DS_BYTES, MLA_NVFP4_DS_BYTES):
        variant = "FLASHMLA_SPARSE ds_mla on SM10x" if recipe.gpu.family == "sm100" else "FLASHMLA_SPARSE quantized"
    kernel_block = recipe.engine.flashmla_sparse_quantized_kernel_block
    if variant == "FLASHMLA_SPARSE quantized" and kernel_block:
        pages = math.gcd(kernel_block, block)
        return 1 if pages == block else pages * token_bytes
    return recipe.engine.mla_block_stride_rows.get(variant, 0) * token_bytes or 1


def mla_caches(recipe: Recipe, backend: str, draft_layers: int) -> list[Cache]:
    """V3.2 and GLM-5.x: an MLA page and, where the layer owns an indexer, an indexer page, 64 tokens each."""
    token_bytes = mla_token_bytes(recipe.cache_dtype, backend)
    alignment = mla_stride_alignment(recipe, backend, token_bytes)
    caches = []
    for layer in range(recipe.model.num_layers + draft_layers):
        caches.append(Cache(layer, "full", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * token_bytes, stride_alignment=alignment))
        if owns_indexer(recipe, layer):
            caches.append(Cache(layer, "full", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * INDEXER_ENTRY_BYTES))
    return caches


# Layers: DeepSeek-V4 -----------------------------------------------------------------------------------------------

def v4_page(entries: int, entry_bytes: int, alignment: int = V4_PAGE_ALIGNMENT) -> int:
    return round_up(entries * entry_bytes, alignment)


def v4_caches(recipe: Recipe, draft_layers: int) -> list[Cache]:
    """DeepSeek-V4, per layer (MTP and DSpark draft layers are window-only: vllm==0.26.0
    vllm/models/deepseek_v4/attention.py:187-190):
    - a sliding window of 64-token pages of 584 B entries (every layer);
    - on compressed layers (ratio r = 4 or 128): 256-token pages of 256 / r entries, and an FP32 compressor state
      of 2 x coff x 512 per entry (coff 2 for ratio 4, 1 for 128) in pages of 4 (ratio 4) or 8 tokens, over a window
      of coff x r tokens;
    - on ratio-4 layers: the indexer's entries (132 B, or MXFP4's 68 B from 0.27.0), 64 per 256-token page, and its
      compressor's FP32 state (2 x 2 x index_head_dim per entry, 4-token pages, window 8)."""
    model = recipe.model
    mxfp4 = recipe.indexer_kv_dtype == "mxfp4" and recipe.engine.v4_mxfp4_indexer_entries
    indexer_entry = INDEXER_MXFP4_ENTRY_BYTES if mxfp4 else INDEXER_ENTRY_BYTES
    caches = []
    for layer in range(model.num_layers + draft_layers):
        ratio = model.compress_ratios[layer] if layer < model.num_layers else 0
        caches.append(Cache(layer, "window", V4_WINDOW_BLOCK, v4_page(V4_WINDOW_BLOCK, V4_ENTRY_BYTES),
                            model.sliding_window))
        if ratio:
            coff = 2 if ratio == 4 else 1
            state_block = 4 if ratio == 4 else 8
            caches.append(Cache(layer, "full", V4_COMPRESSED_BLOCK,
                                v4_page(V4_COMPRESSED_BLOCK // ratio, V4_ENTRY_BYTES)))
            caches.append(Cache(layer, "window", state_block,
                                v4_page(state_block, 2 * coff * V4_HEAD_DIM * V4_STATE_BYTES), coff * ratio))
        if ratio == 4:
            caches.append(Cache(layer, "full", V4_COMPRESSED_BLOCK,
                                v4_page(V4_COMPRESSED_BLOCK // ratio, indexer_entry)))
            caches.append(Cache(layer, "window", 4, v4_page(4, 2 * 2 * model.index_head_dim * V4_STATE_BYTES), 8))
    return caches


# Layers: DeepSeek-V4.1 ---------------------------------------------------------------------------------------------

def v41_attention(recipe: Recipe) -> str:
    """The attention class V4.1's NVIDIA model picks (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/model.py:201-258):
    the recipe's, else FlashInfer's on SM12x, and on SM100 from 0.31.0 mega attention where 8 heads share each wo_a
    group after TP (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/flash_mla_mega_attn.py:153-174), else FlashMLA."""
    named = {"FLASHMLA_MEGA_ATTN_DSV41": "mega", "FLASHINFER_MLA_SPARSE_DSV41": "flashinfer",
             "FLASHINFER_MLA_SPARSE_DSV4": "flashinfer", "FLASHMLA_SPARSE_DSV41": "flashmla",
             "FLASHMLA_SPARSE_DSV4": "flashmla", "FLASHMLA_SPARSE": "flashmla"}
    if recipe.attention_backend in named:
        return named[recipe.attention_backend]
    family, tp, model = recipe.gpu.family, recipe.tensor_parallel_size, recipe.model
    if family == "sm120":
        return "flashinfer"
    heads, groups = model.num_attention_heads, model.o_groups
    grouped = heads % tp == 0 and groups % tp == 0 and groups >= tp and (heads // tp) // (groups // tp) == 8
    return "mega" if family == "sm100" and recipe.engine.v41_mega_attention and grouped else "flashmla"


def v41_packed(recipe: Recipe) -> bool:
    """Does V4.1's attention store DeepSeek's packed records (fp8_ds_mla: FlashMLA's and mega attention's, and
    FlashInfer's on SM12x), rather than plain rows (FlashInfer's elsewhere)?"""
    return v41_attention(recipe) != "flashinfer" or recipe.gpu.family == "sm120"


def v41_caches(recipe: Recipe, draft_layers: int) -> list[Cache]:
    """DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py): only the kv sources keep a compressed cache
    (the others read theirs), the index sources among them an indexer cache (the other index layers read layer 20's),
    every layer (DSpark's drafts too) a 32-token window, the ratio-2 kv sources an FP32 compressor ring; compressed and
    indexer pages hold block // ratio states of 128 (SM10x) or 64 (SM90) tokens."""
    model, engine, family = recipe.model, recipe.engine, recipe.gpu.family
    attention = v41_attention(recipe)
    packed = v41_packed(recipe)
    mxfp8 = family == "sm100"
    record = V41_MXFP8_RECORD if mxfp8 else V4_ENTRY_BYTES
    alignment = V41_MXFP8_ALIGNMENT if mxfp8 else V4_PAGE_ALIGNMENT
    nvfp4 = recipe.cache_dtype == "nvfp4_ds_mla" or (attention == "mega" and recipe.cache_dtype in ("auto", "fp8"))
    compressed_record = V41_NVFP4_RECORD if nvfp4 else record
    if not packed:  # FlashInfer's plain rows: 512 head bytes x 2 (BF16) or x 1 (fp8)
        record = compressed_record = V4_HEAD_DIM * (1 if recipe.quantized_cache else 2)
        alignment = V41_MXFP8_ALIGNMENT
    indexer_entry = INDEXER_MXFP4_ENTRY_BYTES if recipe.indexer_kv_dtype == "mxfp4" else INDEXER_ENTRY_BYTES
    indexer_alignment = V4_PAGE_ALIGNMENT if packed and not mxfp8 else V41_MXFP8_ALIGNMENT
    indexer_stride = 1
    if recipe.indexer_sparse_logits and engine.v41_indexer_sparse_logits_alignment:
        indexer_stride = math.lcm(engine.v41_indexer_sparse_logits_alignment,
                                  1 if packed and mxfp8 and engine.v41_window_stride_alignment else indexer_alignment)
    window_stride = math.lcm(record, compressed_record) if engine.v41_window_stride_alignment and mxfp8 and packed \
        else 1
    block = 128 if family != "sm90" else 64
    k = recipe.num_speculative_tokens if recipe.speculative_method == "dspark" else 0
    ring_slots = max(8, next_power_of_2(k + 2))
    caches = []
    for layer in range(model.num_layers + draft_layers):
        ratio = model.compress_ratios[layer] if layer < model.num_layers else 0
        kv_source = layer < model.num_layers and layer in model.kv_source_layers
        if kv_source:
            states = block // ratio
            caches.append(Cache(layer, "full", block, round_up(states * compressed_record, alignment)))
            if layer in model.index_source_layers:
                caches.append(Cache(layer, "full", block, round_up(states * indexer_entry, indexer_alignment),
                                    stride_alignment=indexer_stride))
        caches.append(Cache(layer, "window", V41_WINDOW_BLOCK, round_up(V41_WINDOW_BLOCK * record, alignment),
                            model.sliding_window, stride_alignment=window_stride))
        if kv_source and ratio > 1:
            caches.append(Cache(layer, "state", ring_slots, ring_slots * V41_RING_SLOT_BYTES, state_pages=1))
    return caches


# Layers: GLM-5.3-Flash ---------------------------------------------------------------------------------------------

HYBRID_MLA_BLOCK_ALIGNMENT = 128  # MLA hybrids' blocks (vllm==0.30.0 vllm/platforms/interface.py:895-907)
PAGED_MQA_PAGE_SIZES = (32, 64)  # the paged-MQA kernels' pages, in entries (vllm==0.30.0 vllm/utils/deep_gemm.py:35)
KDA_CONV_STATE_BYTES = 2  # the model dtype, BF16 (kda_state_dtype, vllm==0.30.0 mamba_utils.py:133-149)
KDA_RECURRENT_STATE_BYTES = 4  # FP32 for mamba_ssm_cache_dtype auto (the same lines)
TAIL_SLOT_HEADS = 2  # a tail slot holds raw K and the gate score, BF16 (vllm==0.30.0 .../nvidia/attention.py:193-200)
FLASHKDA_HEAD_DIM = 128  # FlashKDA takes head_dim 128 only (vllm==0.32.0 vllm/models/glm5next/common/kda.py:137-160)


def kda_state_bytes(recipe: Recipe) -> int:
    """One KDA layer's state on a rank (kda_state_shape, vllm==0.30.0 vllm/model_executor/layers/mamba/
    mamba_utils.py:298-321): a conv state of (conv kernel - 1 + k) x 3 x heads x head_dim / TP in BF16 and a
    recurrent state of heads / TP x head_dim x head_dim in FP32; k widens the conv state in every release
    (vllm==0.30.0 vllm/models/glm5next/nvidia/model.py:985-1002)."""
    model, tp = recipe.model, recipe.tensor_parallel_size
    conv_dim = 3 * model.linear_heads * model.linear_head_dim
    conv = (model.linear_conv_kernel - 1 + recipe.num_speculative_tokens) * (conv_dim // tp) * KDA_CONV_STATE_BYTES
    recurrent = model.linear_heads // tp * model.linear_head_dim ** 2 * KDA_RECURRENT_STATE_BYTES
    return conv + recurrent


def latent_token_bytes(recipe: Recipe) -> int:
    """One DSA layer's MLA latent a token: mla_head_size (512, no RoPE) x 2 B, or x 1 B for fp8, which FlashInfer's
    sparse MLA keeps as standard fp8 (MLAAttentionSpec, vllm==0.30.0 vllm/model_executor/layers/attention/
    mla_attention.py:1347-1361; the block alignment sizes it the same, vllm/platforms/interface.py:813-821)."""
    return recipe.model.mla_head_size * (1 if recipe.quantized_cache else 2)


def latent_page_token_bytes(recipe: Recipe, backend: str) -> int:
    """What a DSA layer's latent page holds a token: latent_token_bytes, except under FlashMLA-sparse with a quantized
    cache, which stores DeepSeek's 576-wide fp8_ds_mla record with a zero RoPE slot (vllm==0.32.0
    vllm/v1/attention/backends/mla/flashmla_sparse.py:219-248, _canonicalize_sparse_mla_kv_cache_dtype); the
    attention block is still sized by latent_token_bytes (vllm/platforms/interface.py _align_hybrid_block_size)."""
    if backend == "FLASHMLA_SPARSE" and recipe.quantized_cache:
        return mla_token_bytes(recipe.cache_dtype, backend)
    return latent_token_bytes(recipe)


def attention_block(recipe: Recipe) -> int:
    """The attention block's tokens, so that one latent page holds a KDA state (_align_hybrid_block_size,
    vllm==0.30.0 vllm/platforms/interface.py:895-929; vllm==0.33.0 :940-1135): 128 x cdiv(state, 128 x latent bytes a
    token), a multiple of kpool x 32 for the indexer's paged-MQA pages (vllm==0.30.0 vllm/platforms/cuda.py:430-447;
    from 0.32.0 the lcm of the backends' smallest kernel blocks, of which kpool x 32 is the largest on SM90 and
    SM10x)."""
    block = HYBRID_MLA_BLOCK_ALIGNMENT * cdiv(kda_state_bytes(recipe), HYBRID_MLA_BLOCK_ALIGNMENT
                                              * latent_token_bytes(recipe))
    return round_up(block, recipe.model.index_kpool * min(PAGED_MQA_PAGE_SIZES))


def tail_ring_slots(recipe: Recipe) -> int:
    """The tail ring's slots, in which the kpool indexer keeps the raw keys of the pool in progress: kpool, and from
    vLLM 0.31.0 kpool x next_pow2(cdiv(kpool + k, kpool)) (engine.py kpool_tail_holds_drafts)."""
    kpool = recipe.model.index_kpool
    if not recipe.engine.kpool_tail_holds_drafts:
        return kpool
    return kpool * next_power_of_2(cdiv(kpool + recipe.num_speculative_tokens, kpool))


def kda_state_pages(recipe: Recipe) -> int:
    """The state blocks a request holds in one KDA group (MambaSpec.max_memory_usage_bytes, vllm==0.30.0
    vllm/v1/kv_cache_interface.py:1034-1045): 1 + k without prefix caching (mamba_cache_mode none), 2 + k with it
    (align, vLLM's default for a hybrid model: vllm==0.30.0 vllm/model_executor/models/config.py:609-657), one more
    where FlashKDA keeps a prefill checkpoint (engine.py kda_prefill_checkpoint_archs)."""
    k = recipe.num_speculative_tokens
    if not recipe.enable_prefix_caching:
        return 1 + k
    flashkda = recipe.gpu.arch in recipe.engine.kda_prefill_checkpoint_archs \
        and recipe.model.linear_head_dim == FLASHKDA_HEAD_DIM
    return 2 + k + flashkda


def glm5next_caches(recipe: Recipe, backend: str, draft_layers: int) -> list[Cache]:
    """GLM-5.3-Flash, per layer (vllm==0.30.0 vllm/models/glm5next/nvidia/; 0.31.0+ common/): a KDA layer keeps its
    state, padded to the latent page (mamba_page_size_padded, vllm==0.30.0 vllm/platforms/interface.py:944-958), in
    blocks of the attention block (align) or of max_model_len (none); a DSA layer, and each MTP layer
    (vllm==0.30.0 vllm/models/glm5next/nvidia/mtp.py:74-81, 117), an MLA latent page, an indexer page of block /
    kpool entries of 132 B (attention.py:78-156, 282) on the same block table, and a tail ring of 2 x index_head_dim
    BF16 a slot, one block a request (KpoolTailSpec; CircularBufferSpec from 0.32.0). From vLLM 0.32.0 the backends
    align the block stride: the latent's to the rows its backend reads (mla_stride_alignment), the indexer's to whole
    pages of its largest kernel block, kpool x 64 tokens, unless the block is one (engine.py
    backend_block_stride_alignment)."""
    model, engine = recipe.model, recipe.engine
    block = attention_block(recipe)
    latent_bytes = latent_page_token_bytes(recipe, backend)
    indexer_page = block // model.index_kpool * INDEXER_ENTRY_BYTES
    ring = tail_ring_slots(recipe)
    state_block = block if recipe.enable_prefix_caching else recipe.max_model_len  # mamba_block_size
    latent_alignment = indexer_alignment = 1  # GLM-5.3-Flash's own attention sets none (vllm==0.31.0 glm5next/)
    if engine.backend_block_stride_alignment:
        latent_alignment = mla_stride_alignment(recipe, backend, latent_bytes, block)
        kernel_block = math.gcd(model.index_kpool * max(PAGED_MQA_PAGE_SIZES), block)
        indexer_alignment = 1 if kernel_block == block else kernel_block // model.index_kpool * INDEXER_ENTRY_BYTES
    caches = []
    for layer in range(model.num_layers + draft_layers):
        if layer in model.linear_layers:
            caches.append(Cache(layer, "linear", state_block, block * latent_token_bytes(recipe),
                                state_pages=kda_state_pages(recipe)))
            continue
        caches += [Cache(layer, "full", block, block * latent_bytes, stride_alignment=latent_alignment),
                   Cache(layer, "full", block, indexer_page, stride_alignment=indexer_alignment,
                         tokens_per_state=model.index_kpool),
                   Cache(layer, "state", ring, ring * TAIL_SLOT_HEADS * model.index_head_dim * 2, state_pages=1)]
    return caches


# Groups ------------------------------------------------------------------------------------------------------------

def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The divisor that pads the layer counts least, larger on ties (kv_cache_utils.py:1644-1676)."""
    best, best_padding = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        padding = sum((d - v % d) % d for v in values)
        if best_padding is None or padding <= best_padding:
            best, best_padding = d, padding
    return best


def uniform_groups(caches: list[Cache], pad_window_pages: bool) -> list[Group]:
    """Up to vLLM 0.28.0 (_get_kv_cache_groups_uniform_groups, vllm==0.28.0 vllm/v1/core/kv_cache_utils.py): full
    caches form one group; window caches split by (block, window), each cut into sub-groups of at most n layers, n the
    approximate gcd of the groups' layer counts. Before 0.27.0 window pages were padded to the next full-group page
    size."""
    full = [c for c in caches if c.kind == "full"]
    by_spec: dict[tuple[int, int], list[Cache]] = defaultdict(list)
    for c in caches:
        if c.kind != "full":
            by_spec[(c.block, c.window)].append(c)
    groups = [Group("full", full[0].block, 0, tuple(full))]
    if not by_spec:
        return groups
    full_sizes = sorted({c.page_bytes for c in full})
    counts = [Counter(c.page_bytes for c in g).most_common(1)[0][1] for g in [full, *by_spec.values()]]
    per_group = approximate_gcd(counts, counts[0])
    for (block, window), members in by_spec.items():
        by_size: dict[int, list[Cache]] = defaultdict(list)
        for c in members:
            size = min(s for s in full_sizes if s >= c.page_bytes) if pad_window_pages else c.page_bytes
            by_size[size].append(Cache(c.layer, c.kind, c.block, size, c.window, c.state_pages, c.stride_alignment))
        tuples = list(zip(*by_size.values()))
        parts = cdiv(len(tuples), per_group)
        groups += [Group("window", block, window, tuple(c for t in tuples[i::parts] for c in t)) for i in range(parts)]
    return groups


def packed_groups(caches: list[Cache]) -> list[Group]:
    """From vLLM 0.29.0 (_get_packed_kv_cache_groups, vllm==0.29.0 vllm/v1/core/kv_cache_utils.py:1668-1796;
    vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:914-1041): caches bucketed greedily by (kind, block, window); a
    bucket whose page sizes hold as many layers each is balanced, and the balanced buckets' repeats set how many groups
    each splits into; window and state buckets then split so that no group is wider than the widest (the anchor),
    layers dealt round-robin."""
    buckets: list[list[Cache]] = []
    for c in caches:
        bucket = next((b for b in buckets if (b[0].kind, b[0].block, b[0].window) == (c.kind, c.block, c.window)), None)
        if bucket is None:
            buckets.append([c])
        else:
            bucket.append(c)
    by_size = [{size: [c for c in b if c.page_bytes == size] for size in dict.fromkeys(c.page_bytes for c in b)}
               for b in buckets]
    balanced = [len({len(members) for members in sizes.values()}) == 1 for sizes in by_size]
    most = [max(len(members) for members in sizes.values()) for sizes in by_size]
    least_repeats = max((m for m, even, sizes in zip(most, balanced, by_size) if even and len(sizes) > 1), default=0)
    repeats = approximate_gcd([m for m, even in zip(most, balanced) if even], least_repeats) if least_repeats else None

    def parts(i: int) -> int:
        return cdiv(most[i], repeats) if balanced[i] and repeats is not None else 1

    def splits_by_width(i: int) -> bool:
        return buckets[i][0].kind in ("state", "linear") or (repeats is None and buckets[i][0].kind == "window")

    def widest(i: int, n: int) -> int:
        return sum(cdiv(len(members), n) * size for size, members in by_size[i].items())

    anchor = max(widest(i, len(buckets[i]) if splits_by_width(i) else parts(i)) for i in range(len(buckets)))
    groups = []
    for i, bucket in enumerate(buckets):
        n = parts(i)
        if splits_by_width(i):
            n = max(n, cdiv(len(bucket), max(anchor // bucket[0].page_bytes, 1)))
        rows = list(zip(*by_size[i].values())) if n > 1 else [tuple(bucket)]
        step = n if n > 1 else 1
        for j in range(step):
            groups.append(Group(bucket[0].kind, bucket[0].block, bucket[0].window,
                                tuple(c for row in rows[j::step] for c in row)))
    return groups


def shared_groups(caches: list[Cache]) -> list[Group]:
    """vLLM 0.30.0 and 0.31.0 (_get_kv_cache_groups_glm5_next, vllm==0.30.0 vllm/v1/core/kv_cache_utils.py:1195-1274):
    the MLA latents and indexers one group; the tails one, each padded to the indexer page; the KDA states dealt
    round-robin into cdiv(states, latents) groups. Each state shares a latent's bytes and each tail an indexer's
    (:1682-1745), so no group is wider than the first, whose pages a block costs (:1588-1594)."""
    attention = tuple(c for c in caches if c.kind == "full")
    indexer_page = next(c.page_bytes for c in attention if c.tokens_per_state > 1)
    tails = tuple(replace(c, page_bytes=indexer_page) for c in caches if c.kind == "state")
    states = [c for c in caches if c.kind == "linear"]
    parts = cdiv(len(states), sum(c.tokens_per_state == 1 for c in attention))
    return [Group("full", attention[0].block, 0, attention), Group("state", tails[0].block, 0, tails),
            *(Group("linear", states[0].block, 0, tuple(states[i::parts])) for i in range(parts))]


def group(recipe: Recipe, caches: list[Cache]) -> list[Group]:
    engine = recipe.engine
    if all(c.kind == "full" and c.block == caches[0].block for c in caches):
        return [Group("full", caches[0].block, 0, tuple(caches))]
    if engine.linear_states_share_attention_blocks and any(c.kind == "linear" for c in caches):
        return shared_groups(caches)
    if engine.kv_grouping == "packed":
        return packed_groups(caches)
    return uniform_groups(caches, engine.pad_window_pages)


def block_bytes(recipe: Recipe, groups: list[Group]) -> int:
    """What one block id costs. One uniform group: its page bytes. DeepSeek-V4's packed layout (vLLM rule by
    version): 'tuple' = distinct full-group page sizes x the most layers of one size in a group (to 0.22.1);
    'bucket' = each page size x its most layers in any group (to 0.26.0); 'overlay' = the largest group; from 0.31.0
    rounded up to the lcm of the layers' block-stride alignments. From 0.32.0 a layer-outer layout (V3.2, GLM-5.x)
    costs the largest group's pages, each padded to its own alignment."""
    rule = recipe.engine.kv_block_rule
    if recipe.engine.pads_layer_pages and not recipe.model.block_outermost_layout:
        return max(sum(round_up(c.page_bytes, c.stride_alignment) for c in g.caches) for g in groups)
    if len(groups) == 1 or rule == "overlay":
        stride = max(g.page_bytes for g in groups)
    elif rule == "tuple":
        stride = sum(set(groups[0].pages)) * max(max(Counter(g.pages).values()) for g in groups)
    else:
        slots: dict[int, int] = defaultdict(int)
        for g in groups:
            for size, layers in Counter(g.pages).items():
                slots[size] = max(slots[size], layers)
        stride = sum(size * layers for size, layers in slots.items())
    if not recipe.engine.aligns_block_stride:
        return stride
    return round_up(stride, math.lcm(*(c.stride_alignment for g in groups for c in g.caches)))


def group_pages(recipe: Recipe, g: Group, in_flight_tokens: int, extra_retained: int) -> int:
    """Full attention: cdiv(L, block x DCP). Window: cdiv(min(window - 1 + extra + in flight, L), block) + 1
    (SlidingWindowSpec.max_admission_blocks_per_request, vllm==0.28.0 vllm/v1/kv_cache_interface.py:565-572).
    State: its own count."""
    length = recipe.max_model_len
    if g.kind == "full":
        return cdiv(length, g.block * recipe.decode_context_parallel_size)
    if g.kind == "window":
        return cdiv(min(g.window - 1 + extra_retained + in_flight_tokens, length), g.block) + 1
    return max(c.state_pages for c in g.caches)


# Pipeline stages ---------------------------------------------------------------------------------------------------

def stage_layers(num_layers: int, stages: int) -> list[range]:
    """vllm==0.33.0 vllm/distributed/utils.py:198-239 get_pp_indices (the same in every release): num_layers // PP a
    stage, the remainder one more each on the second-last, third-last, ... stage."""
    sizes = [num_layers // stages] * stages
    for i in range(2, num_layers % stages + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(stages)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


def stage_groups(recipe: Recipe, groups: list[Group]) -> list[list[Group]]:
    """Each stage's share of the groups (built once on the whole model, vllm==0.26.0
    vllm/v1/core/kv_cache_utils.py:2091): its layers, and the draft layers on the last stage."""
    stages = stage_layers(recipe.model.num_layers, recipe.pipeline_parallel_size)
    if len(stages) == 1:
        return [groups]
    stages[-1] = range(stages[-1].start, stages[-1].stop + 10 ** 6)  # the drafts follow the last layer
    shares = []
    for layers in stages:
        projected = [Group(g.kind, g.block, g.window, tuple(c for c in g.caches if c.layer in layers)) for g in groups]
        shares.append([g for g in projected if g.caches])
    return shares


# The spec of a recipe ----------------------------------------------------------------------------------------------

def spec(recipe: Recipe, backend: str, draft_layers: int, in_flight_tokens: int, extra_retained: int) -> KvSpec:
    """The groups, block bytes and pages per request of a recipe under its vLLM version's rules. With pipeline
    parallelism every stage is cut to the fewest blocks (the costliest block) and stage 0's groups are logged."""
    family = recipe.model.family
    if family == "mla":
        caches = mla_caches(recipe, backend, draft_layers)
    elif family == "deepseek_v41":
        caches = v41_caches(recipe, draft_layers)
    elif family == "glm5next":
        caches = glm5next_caches(recipe, backend, draft_layers)
    else:
        caches = v4_caches(recipe, draft_layers)
    groups = group(recipe, caches)
    stages = stage_groups(recipe, groups)
    stride = max(block_bytes(recipe, share) for share in stages)
    logged = stages[0]
    pages = [group_pages(recipe, g, in_flight_tokens, extra_retained) for g in logged]
    context_pages = [p if g.kind == "full" else 0 for p, g in zip(pages, logged)]
    if recipe.engine.concurrency_counts_pages or len(logged) == 1:
        per_request, context = sum(pages), sum(context_pages)
    else:  # a byte ratio against the full group's page (vllm==0.26.0 vllm/v1/core/kv_cache_utils.py:943-955)
        per_request = cdiv(sum(p * g.page_bytes for p, g in zip(pages, logged)), logged[0].page_bytes)
        context = cdiv(sum(p * g.page_bytes for p, g in zip(context_pages, logged)), logged[0].page_bytes)
    if len(logged) == 1:  # its pages at the block's stride, padding included (vllm==0.31.0 kv_cache_utils.py:2515-2527)
        request = pages[0] * block_bytes(recipe, logged)
    elif recipe.engine.kv_grouping == "packed":  # a block for each page (vllm==0.29.0 kv_cache_utils.py:2043-2070)
        request = per_request * stride
    else:  # _max_memory_usage_bytes_from_groups, DeepSeek-V4 branch (kv_cache_utils.py:1957-1981)
        request = sum(set(logged[0].pages)) * max(max(Counter(g.pages).values()) for g in logged) * sum(pages)
    return KvSpec(tuple(logged), stride, per_request, per_request - context, request, recipe.max_model_len,
                  recipe.engine.tokens_from_concurrency, recipe.decode_context_parallel_size)
