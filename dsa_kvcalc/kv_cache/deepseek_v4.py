"""DeepSeek-V4: compressed, indexer, sliding-window and compressor-state caches, in several groups."""

from dsa_kvcalc.kv_cache.pages import (INDEXER_ENTRY_BYTES, INDEXER_MXFP4_ENTRY_BYTES, V4_ENTRY_BYTES, V4_HEAD_DIM,
                                       V4_PAGE_ALIGNMENT, Cache, CacheConfig, round_up)

V4_WINDOW_BLOCK = 64
V4_COMPRESSED_BLOCK = 256  # --block-size, the sparse-SWA backend's preference (sparse_swa.py:127-128)
V4_STATE_BYTES = 4  # compressor states are FP32 (compressor.py:170)


def v4_page(entries: int, entry_bytes: int, alignment: int = V4_PAGE_ALIGNMENT) -> int:
    return round_up(entries * entry_bytes, alignment)


def v4_caches(config: CacheConfig, draft_layers: int) -> list[Cache]:
    """DeepSeek-V4, per layer (MTP and DSpark draft layers are window-only: vllm==0.26.0
    vllm/models/deepseek_v4/attention.py:187-190):
    - a sliding window of 64-token pages of 584 B entries (every layer);
    - on compressed layers (ratio r = 4 or 128): 256-token pages of 256 / r entries, and an FP32 compressor state
      of 2 x coff x 512 per entry (coff 2 for ratio 4, 1 for 128) in pages of 4 (ratio 4) or 8 tokens, over a window
      of coff x r tokens;
    - on ratio-4 layers: the indexer's entries (132 B, or MXFP4's 68 B from 0.27.0), 64 per 256-token page, and its
      compressor's FP32 state (2 x 2 x index_head_dim per entry, 4-token pages, window 8)."""
    model = config.model
    mxfp4 = config.indexer_kv_dtype == "mxfp4" and config.engine.v4_mxfp4_indexer_entries
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
