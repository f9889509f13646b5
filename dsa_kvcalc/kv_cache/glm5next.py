"""GLM-5.3-Flash, a hybrid: a state per request in each KDA layer and in each DSA layer a latent, a kpool indexer and a
tail ring, in blocks sized to hold a state."""

import math

from dsa_kvcalc.kv_cache.mla import mla_stride_alignment, mla_token_bytes
from dsa_kvcalc.kv_cache.pages import INDEXER_ENTRY_BYTES, Cache, CacheConfig, cdiv, next_power_of_2, round_up

HYBRID_MLA_BLOCK_ALIGNMENT = 128  # MLA hybrids' blocks (vllm==0.30.0 vllm/platforms/interface.py:895-907)
PAGED_MQA_PAGE_SIZES = (32, 64)  # the paged-MQA kernels' pages, in entries (vllm==0.30.0 vllm/utils/deep_gemm.py:35)
KDA_CONV_STATE_BYTES = 2  # the model dtype, BF16 (kda_state_dtype, vllm==0.30.0 mamba_utils.py:133-149)
KDA_RECURRENT_STATE_BYTES = 4  # FP32 for mamba_ssm_cache_dtype auto (the same lines)
TAIL_SLOT_HEADS = 2  # a tail slot holds raw K and the gate score, BF16 (vllm==0.30.0 .../nvidia/attention.py:193-200)
FLASHKDA_HEAD_DIM = 128  # FlashKDA takes head_dim 128 only (vllm==0.32.0 vllm/models/glm5next/common/kda.py:137-160)


def kda_state_bytes(config: CacheConfig) -> int:
    """One KDA layer's state on a rank (kda_state_shape, vllm==0.30.0 vllm/model_executor/layers/mamba/
    mamba_utils.py:298-321): a conv state of (conv kernel - 1 + k) x 3 x heads x head_dim / TP in BF16 and a
    recurrent state of heads / TP x head_dim x head_dim in FP32; k widens the conv state in every release
    (vllm==0.30.0 vllm/models/glm5next/nvidia/model.py:985-1002)."""
    model, tp = config.model, config.tensor_parallel_size
    conv_dim = 3 * model.linear_heads * model.linear_head_dim
    conv = (model.linear_conv_kernel - 1 + config.num_speculative_tokens) * (conv_dim // tp) * KDA_CONV_STATE_BYTES
    recurrent = model.linear_heads // tp * model.linear_head_dim ** 2 * KDA_RECURRENT_STATE_BYTES
    return conv + recurrent


def latent_token_bytes(config: CacheConfig) -> int:
    """One DSA layer's MLA latent a token: mla_head_size (512, no RoPE) x 2 B, or x 1 B for fp8, which FlashInfer's
    sparse MLA keeps as standard fp8 (MLAAttentionSpec, vllm==0.30.0 vllm/model_executor/layers/attention/
    mla_attention.py:1347-1361; the block alignment sizes it the same, vllm/platforms/interface.py:813-821)."""
    return config.model.mla_head_size * (1 if config.quantized_cache else 2)


def latent_page_token_bytes(config: CacheConfig, backend: str) -> int:
    """What a DSA layer's latent page holds a token: latent_token_bytes, except under FlashMLA-sparse with a quantized
    cache, which stores DeepSeek's 576-wide fp8_ds_mla record with a zero RoPE slot (vllm==0.32.0
    vllm/v1/attention/backends/mla/flashmla_sparse.py:219-248, _canonicalize_sparse_mla_kv_cache_dtype); the
    attention block is still sized by latent_token_bytes (vllm/platforms/interface.py _align_hybrid_block_size)."""
    if backend == "FLASHMLA_SPARSE" and config.quantized_cache:
        return mla_token_bytes(config.cache_dtype, backend)
    return latent_token_bytes(config)


def attention_block(config: CacheConfig) -> int:
    """The attention block's tokens, so that one latent page holds a KDA state (_align_hybrid_block_size,
    vllm==0.30.0 vllm/platforms/interface.py:895-929; vllm==0.33.0 :940-1135): 128 x cdiv(state, 128 x latent bytes a
    token), a multiple of kpool x 32 for the indexer's paged-MQA pages (vllm==0.30.0 vllm/platforms/cuda.py:430-447;
    from 0.32.0 the lcm of the backends' smallest kernel blocks, of which kpool x 32 is the largest on SM90 and
    SM10x)."""
    block = HYBRID_MLA_BLOCK_ALIGNMENT * cdiv(kda_state_bytes(config), HYBRID_MLA_BLOCK_ALIGNMENT
                                              * latent_token_bytes(config))
    return round_up(block, config.model.index_kpool * min(PAGED_MQA_PAGE_SIZES))


def tail_ring_slots(config: CacheConfig) -> int:
    """The tail ring's slots, in which the kpool indexer keeps the raw keys of the pool in progress: kpool, and from
    vLLM 0.31.0 kpool x next_pow2(cdiv(kpool + k, kpool)) (engine.py kpool_tail_holds_drafts)."""
    kpool = config.model.index_kpool
    if not config.engine.kpool_tail_holds_drafts:
        return kpool
    return kpool * next_power_of_2(cdiv(kpool + config.num_speculative_tokens, kpool))


def kda_state_pages(config: CacheConfig) -> int:
    """The state blocks a request holds in one KDA group (MambaSpec.max_memory_usage_bytes, vllm==0.30.0
    vllm/v1/kv_cache_interface.py:1034-1045): 1 + k without prefix caching (mamba_cache_mode none), 2 + k with it
    (align, vLLM's default for a hybrid model: vllm==0.30.0 vllm/model_executor/models/config.py:609-657), one more
    where FlashKDA keeps a prefill checkpoint (engine.py kda_prefill_checkpoint_archs)."""
    k = config.num_speculative_tokens
    if not config.enable_prefix_caching:
        return 1 + k
    flashkda = config.gpu.arch in config.engine.kda_prefill_checkpoint_archs \
        and config.model.linear_head_dim == FLASHKDA_HEAD_DIM
    return 2 + k + flashkda


def glm5next_caches(config: CacheConfig, backend: str, draft_layers: int) -> list[Cache]:
    """GLM-5.3-Flash, per layer (vllm==0.30.0 vllm/models/glm5next/nvidia/; 0.31.0+ common/): a KDA layer keeps its
    state, padded to the latent page (mamba_page_size_padded, vllm==0.30.0 vllm/platforms/interface.py:944-958), in
    blocks of the attention block (align) or of max_model_len (none); a DSA layer, and each MTP layer
    (vllm==0.30.0 vllm/models/glm5next/nvidia/mtp.py:74-81, 117), an MLA latent page, an indexer page of block /
    kpool entries of 132 B (attention.py:78-156, 282) on the same block table, and a tail ring of 2 x index_head_dim
    BF16 a slot, one block a request (KpoolTailSpec; CircularBufferSpec from 0.32.0). From vLLM 0.32.0 the backends
    align the block stride: the latent's to the rows its backend reads (mla_stride_alignment), the indexer's to whole
    pages of its largest kernel block, kpool x 64 tokens, unless the block is one (engine.py
    backend_block_stride_alignment)."""
    model, engine = config.model, config.engine
    block = attention_block(config)
    latent_bytes = latent_page_token_bytes(config, backend)
    indexer_page = block // model.index_kpool * INDEXER_ENTRY_BYTES
    ring = tail_ring_slots(config)
    state_block = block if config.enable_prefix_caching else config.max_model_len  # mamba_block_size
    latent_alignment = indexer_alignment = 1  # GLM-5.3-Flash's own attention sets none (vllm==0.31.0 glm5next/)
    if engine.backend_block_stride_alignment:
        latent_alignment = mla_stride_alignment(config, backend, latent_bytes, block)
        kernel_block = math.gcd(model.index_kpool * max(PAGED_MQA_PAGE_SIZES), block)
        indexer_alignment = 1 if kernel_block == block else kernel_block // model.index_kpool * INDEXER_ENTRY_BYTES
    caches = []
    for layer in range(model.num_layers + draft_layers):
        if layer in model.linear_layers:
            caches.append(Cache(layer, "linear", state_block, block * latent_token_bytes(config),
                                state_pages=kda_state_pages(config)))
            continue
        caches += [Cache(layer, "full", block, block * latent_bytes, stride_alignment=latent_alignment),
                   Cache(layer, "full", block, indexer_page, stride_alignment=indexer_alignment,
                         tokens_per_state=model.index_kpool),
                   Cache(layer, "state", ring, ring * TAIL_SLOT_HEADS * model.index_head_dim * 2, state_pages=1)]
    return caches
