"""DeepSeek-V4.1: compressed and indexer caches on the kv and index sources, a window on every layer, FP32 compressor
rings on the ratio-2 kv sources."""

import math

from dsa_kvcalc.kv_cache.pages import (INDEXER_ENTRY_BYTES, INDEXER_MXFP4_ENTRY_BYTES, V4_ENTRY_BYTES, V4_HEAD_DIM,
                                       V4_PAGE_ALIGNMENT, Cache, CacheConfig, next_power_of_2, round_up)

# DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py:521-536, 569; compressor.py:221-233): MXFP8
# records on the SM10x family (528 B, 512 B alignment), V4's elsewhere (584 B, 576 B); the compressed record is NVFP4
# (288 B) under nvfp4_ds_mla; windows of 32-token pages; the ratio-2 compressors' FP32 ring of max(8, next_pow2(k + 2))
# slots of [kv, score] x 512 x 4 B, one block a request.
V41_MXFP8_RECORD = 528
V41_NVFP4_RECORD = 288
V41_MXFP8_ALIGNMENT = 512
V41_WINDOW_BLOCK = 32
V41_RING_SLOT_BYTES = 2 * 512 * 4


def v41_attention(config: CacheConfig) -> str:
    """The attention class V4.1's NVIDIA model picks (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/model.py:201-258):
    the recipe's, else FlashInfer's on SM12x, and on SM100 from 0.31.0 mega attention where 8 heads share each wo_a
    group after TP (vllm==0.33.0 vllm/models/deepseek_v41/nvidia/flash_mla_mega_attn.py:153-174), else FlashMLA."""
    named = {"FLASHMLA_MEGA_ATTN_DSV41": "mega", "FLASHINFER_MLA_SPARSE_DSV41": "flashinfer",
             "FLASHINFER_MLA_SPARSE_DSV4": "flashinfer", "FLASHMLA_SPARSE_DSV41": "flashmla",
             "FLASHMLA_SPARSE_DSV4": "flashmla", "FLASHMLA_SPARSE": "flashmla"}
    if config.attention_backend in named:
        return named[config.attention_backend]
    family, tp, model = config.gpu.family, config.tensor_parallel_size, config.model
    if family == "sm120":
        return "flashinfer"
    heads, groups = model.num_attention_heads, model.o_groups
    grouped = heads % tp == 0 and groups % tp == 0 and groups >= tp and (heads // tp) // (groups // tp) == 8
    return "mega" if family == "sm100" and config.engine.v41_mega_attention and grouped else "flashmla"


def v41_packed(config: CacheConfig) -> bool:
    """Does V4.1's attention store DeepSeek's packed records (fp8_ds_mla: FlashMLA's and mega attention's, and
    FlashInfer's on SM12x), rather than plain rows (FlashInfer's elsewhere)?"""
    return v41_attention(config) != "flashinfer" or config.gpu.family == "sm120"


def v41_caches(config: CacheConfig, draft_layers: int) -> list[Cache]:
    """DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py): only the kv sources keep a compressed cache
    (the others read theirs), the index sources among them an indexer cache (the other index layers read layer 20's),
    every layer (DSpark's drafts too) a 32-token window, the ratio-2 kv sources an FP32 compressor ring; compressed and
    indexer pages hold block // ratio states of 128 (SM10x) or 64 (SM90) tokens."""
    model, engine, family = config.model, config.engine, config.gpu.family
    attention = v41_attention(config)
    packed = v41_packed(config)
    mxfp8 = family == "sm100"
    record = V41_MXFP8_RECORD if mxfp8 else V4_ENTRY_BYTES
    alignment = V41_MXFP8_ALIGNMENT if mxfp8 else V4_PAGE_ALIGNMENT
    nvfp4 = config.cache_dtype == "nvfp4_ds_mla" or (attention == "mega" and config.cache_dtype in ("auto", "fp8"))
    compressed_record = V41_NVFP4_RECORD if nvfp4 else record
    if not packed:  # FlashInfer's plain rows: 512 head bytes x 2 (BF16) or x 1 (fp8)
        record = compressed_record = V4_HEAD_DIM * (1 if config.quantized_cache else 2)
        alignment = V41_MXFP8_ALIGNMENT
    indexer_entry = INDEXER_MXFP4_ENTRY_BYTES if config.indexer_kv_dtype == "mxfp4" else INDEXER_ENTRY_BYTES
    indexer_alignment = V4_PAGE_ALIGNMENT if packed and not mxfp8 else V41_MXFP8_ALIGNMENT
    indexer_stride = 1
    if config.indexer_sparse_logits and engine.v41_indexer_sparse_logits_alignment:
        indexer_stride = math.lcm(engine.v41_indexer_sparse_logits_alignment,
                                  1 if packed and mxfp8 and engine.v41_window_stride_alignment else indexer_alignment)
    window_stride = math.lcm(record, compressed_record) if engine.v41_window_stride_alignment and mxfp8 and packed \
        else 1
    block = 128 if family != "sm90" else 64
    k = config.num_speculative_tokens if config.speculative_method == "dspark" else 0
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
