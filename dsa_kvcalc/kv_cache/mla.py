"""V3.2 and GLM-5.x: one group, every layer's MLA page and, where the layer owns an indexer, its indexer page."""

import math

from dsa_kvcalc.kv_cache.pages import INDEXER_ENTRY_BYTES, Cache, CacheConfig

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


def owns_indexer(config: CacheConfig, layer: int) -> bool:
    """Shared indexers (GLM-5.2, GLM-5.3): a layer skips the top-k when max(layer - offset + 1, 0) % freq != 0, and
    since vLLM 0.24.0 builds no indexer, so no indexer cache (vllm==0.24.0
    vllm/model_executor/models/deepseek_v2.py:1024-1049)."""
    model = config.model
    if model.index_topk_freq == 1 or not config.engine.shared_indexers_skip_cache or layer >= model.num_layers:
        return True  # MTP layers always build theirs
    return max(layer - model.index_skip_topk_offset + 1, 0) % model.index_topk_freq == 0


def mla_stride_alignment(config: CacheConfig, backend: str, token_bytes: int, block: int = MLA_BLOCK_TOKENS) -> int:
    """The bytes a block of MLA pages is a multiple of from vLLM 0.31.0: the rows of one token's record each
    sparse-MLA backend reads a page as (engine.py mla_block_stride_rows); FlashMLA's quantized pages off SM10x
    are whole 64-token kernel pages from 0.32.0, which a 64-token block already is (engine.py
    flashmla_sparse_quantized_kernel_block; get_block_stride_alignment: 1 where the kernel page is the block)."""
    variant = backend
    if backend == "FLASHMLA_SPARSE" and token_bytes in (MLA_FP8_DS_BYTES, MLA_NVFP4_DS_BYTES):
        variant = "FLASHMLA_SPARSE ds_mla on SM10x" if config.gpu.family == "sm100" else "FLASHMLA_SPARSE quantized"
    kernel_block = config.engine.flashmla_sparse_quantized_kernel_block
    if variant == "FLASHMLA_SPARSE quantized" and kernel_block:
        pages = math.gcd(kernel_block, block)
        return 1 if pages == block else pages * token_bytes
    return config.engine.mla_block_stride_rows.get(variant, 0) * token_bytes or 1


def mla_caches(config: CacheConfig, backend: str, draft_layers: int) -> list[Cache]:
    """V3.2 and GLM-5.x: an MLA page and, where the layer owns an indexer, an indexer page, 64 tokens each."""
    token_bytes = mla_token_bytes(config.cache_dtype, backend)
    alignment = mla_stride_alignment(config, backend, token_bytes)
    caches = []
    for layer in range(config.model.num_layers + draft_layers):
        caches.append(Cache(layer, "full", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * token_bytes,
                            stride_alignment=alignment))
        if owns_indexer(config, layer):
            caches.append(Cache(layer, "full", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * INDEXER_ENTRY_BYTES))
    return caches
