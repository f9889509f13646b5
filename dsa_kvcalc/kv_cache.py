"""KV-cache specs per layer group, as vLLM computes them, and the tokens vLLM logs for a given KV memory.

Every attention layer has a KV-cache spec (vllm/v1/kv_cache_interface.py): pages of `block` tokens of `page` bytes,
and the pages one request may hold: all of max_model_len for full attention, the window plus the tokens in flight for
a sliding window. Layers with the same spec form a group (vllm/v1/core/kv_cache_utils.py). Then

    blocks              = available KV bytes // block bytes
    concurrency         = blocks / pages per request (summed over groups)
    "GPU KV cache size" = int(concurrency x max_model_len)

V3.2 and GLM-5.x have one group: every layer's MLA page and indexer page at 64 tokens. DeepSeek-V4 has five: its
compressed and indexer pages, its sliding windows, and its compressor states. Sources are vllm-project/vllm read on
the mirror gau-nernst/vllm at d29f7f5 (2026-08-21) and the commits named; the version-dependent rules are in
engine.py.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from dsa_kvcalc.catalog import Model
from dsa_kvcalc.engine import Engine

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
# DeepSeek-V4 (vllm/models/deepseek_v4/attention.py:690-748, compressor.py:152-200, sparse_swa.py:87-107):
V4_ENTRY_BYTES = 448 + 64 * 2 + 8  # FP8 NoPE + BF16 RoPE + scales
V4_PAGE_ALIGNMENT = 576  # pages rounded up to multiples of 576 B (kv_cache_interface.py:372-378)
V4_HEAD_DIM = 512
V4_WINDOW_BLOCK = 64
V4_COMPRESSED_BLOCK = 256  # --block-size, the sparse-SWA backend's preference (sparse_swa.py:127-128)
V4_STATE_BYTES = 4  # compressor states are FP32 (compressor.py:170)


@dataclass(frozen=True)
class Cache:
    """One layer's KV-cache spec."""
    kind: str  # mla, indexer, window, compressed, state, indexer state
    block: int  # tokens per page
    page_bytes: int
    window: int = 0  # 0: full attention (pages for all of max_model_len)


@dataclass(frozen=True)
class Group:
    block: int
    window: int
    pages: tuple[int, ...]  # the page bytes of each layer in the group

    @property
    def page_bytes(self) -> int:
        return sum(self.pages)


@dataclass(frozen=True)
class KvSpec:
    groups: tuple[Group, ...]
    block_bytes: int  # what one block id costs
    pages_per_request: int  # pages one request of max_model_len holds, over all groups
    request_bytes: int  # vLLM's "KV cache is needed" for one request of max_model_len
    max_model_len: int
    tokens_from_concurrency: bool  # vLLM >= 0.20.1: tokens = int(concurrency x L); before: blocks x block tokens
    dcp: int

    def tokens(self, kv_bytes: int) -> int:
        blocks = kv_bytes // self.block_bytes
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


# Layers -------------------------------------------------------------------------------------------------------

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


def owns_indexer(model: Model, layer: int, engine: Engine) -> bool:
    """Shared indexers (GLM-5.2): a layer skips the top-k when max(layer - offset + 1, 0) % freq != 0, and since
    vLLM PR #45895 builds no indexer, so no indexer cache (vllm/models/deepseek_v32/attention.py:164-197)."""
    if model.index_topk_freq == 1 or not engine.shared_indexers_skip_cache or layer >= model.num_layers:
        return True  # MTP layers always build theirs
    return max(layer - model.index_skip_topk_offset + 1, 0) % model.index_topk_freq == 0


def mla_caches(model: Model, engine: Engine, mtp_layers: int, token_bytes: int) -> list[Cache]:
    """V3.2 and GLM-5.x: an MLA page and, where the layer owns an indexer, an indexer page, 64 tokens each."""
    caches = []
    for layer in range(model.num_layers + mtp_layers):
        caches.append(Cache("mla", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * token_bytes))
        if owns_indexer(model, layer, engine):
            caches.append(Cache("indexer", MLA_BLOCK_TOKENS, MLA_BLOCK_TOKENS * INDEXER_ENTRY_BYTES))
    return caches


def v4_page(entries: int, entry_bytes: int) -> int:
    return round_up(entries * entry_bytes, V4_PAGE_ALIGNMENT)


def v4_caches(model: Model, mtp_layers: int) -> list[Cache]:
    """DeepSeek-V4, per layer (MTP layers are window-only):
    - a sliding window of 64-token pages of 584 B entries (every layer);
    - on compressed layers (ratio r = 4 or 128): 256-token pages of 256 / r entries, and an FP32 compressor state
      of 2 x coff x 512 per entry (coff 2 for ratio 4, 1 for 128) in pages of 4 (ratio 4) or 8 tokens, over a window
      of coff x r tokens;
    - on ratio-4 layers: the indexer's 132 B entries, 64 per 256-token page, and its compressor's FP32 state
      (2 x 2 x index_head_dim per entry, 4-token pages, window 8)."""
    caches = []
    for layer in range(model.num_layers + mtp_layers):
        ratio = model.compress_ratios[layer] if layer < model.num_layers else 0
        caches.append(Cache("window", V4_WINDOW_BLOCK, v4_page(V4_WINDOW_BLOCK, V4_ENTRY_BYTES), model.sliding_window))
        if ratio:
            coff = 2 if ratio == 4 else 1
            state_block = 4 if ratio == 4 else 8
            caches.append(Cache("compressed", V4_COMPRESSED_BLOCK,
                                v4_page(V4_COMPRESSED_BLOCK // ratio, V4_ENTRY_BYTES)))
            caches.append(Cache("state", state_block, v4_page(state_block, 2 * coff * V4_HEAD_DIM * V4_STATE_BYTES),
                                coff * ratio))
        if ratio == 4:
            caches.append(Cache("indexer", V4_COMPRESSED_BLOCK,
                                v4_page(V4_COMPRESSED_BLOCK // ratio, INDEXER_ENTRY_BYTES)))
            caches.append(Cache("indexer state", 4, v4_page(4, 2 * 2 * model.index_head_dim * V4_STATE_BYTES), 8))
    return caches


# Groups --------------------------------------------------------------------------------------------------------

def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The divisor that pads the layer counts least, larger on ties (kv_cache_utils.py:1644-1676)."""
    best, best_padding = lower_bound, None
    for d in range(lower_bound, max(values) + 1):
        padding = sum((d - v % d) % d for v in values)
        if best_padding is None or padding <= best_padding:
            best, best_padding = d, padding
    return best


def group(caches: list[Cache], pad_window_pages: bool) -> list[Group]:
    """Full-attention caches form one group; window caches split by (block, window), each cut into sub-groups of at
    most n layers, n the approximate gcd of the groups' layer counts (_get_kv_cache_groups_uniform_groups,
    kv_cache_utils.py:1601-1763). Before vLLM PR #48993 window pages were padded to the next full-group page size."""
    full = [c for c in caches if not c.window]
    by_spec: dict[tuple[int, int], list[Cache]] = defaultdict(list)
    for c in caches:
        if c.window:
            by_spec[(c.block, c.window)].append(c)
    if not by_spec:
        return [Group(full[0].block, 0, tuple(c.page_bytes for c in full))]
    full_sizes = sorted({c.page_bytes for c in full})
    counts = [Counter(c.page_bytes for c in g).most_common(1)[0][1] for g in [full, *by_spec.values()]]
    per_group = approximate_gcd(counts, counts[0])
    groups = [Group(full[0].block, 0, tuple(c.page_bytes for c in full))]
    for (block, window), members in by_spec.items():
        by_size: dict[int, list[int]] = defaultdict(list)
        for c in members:
            size = min(s for s in full_sizes if s >= c.page_bytes) if pad_window_pages else c.page_bytes
            by_size[size].append(size)
        tuples = list(zip(*by_size.values()))
        parts = cdiv(len(tuples), per_group)
        groups += [Group(block, window, tuple(p for t in tuples[i::parts] for p in t)) for i in range(parts)]
    return groups


def block_bytes(groups: list[Group], rule: str) -> int:
    """What one block id costs. One uniform group: its page bytes. DeepSeek-V4's packed layout (vLLM rule by
    version): 'tuple' = distinct full-group page sizes x the most layers of one size in a group (to PR #44454);
    'bucket' = each page size x its most layers in any group (to PR #48993); 'overlay' = the largest group."""
    if len(groups) == 1 or rule == "overlay":
        return max(g.page_bytes for g in groups)
    if rule == "tuple":
        return sum(set(groups[0].pages)) * max(max(Counter(g.pages).values()) for g in groups)
    slots: dict[int, int] = defaultdict(int)
    for g in groups:
        for size, layers in Counter(g.pages).items():
            slots[size] = max(slots[size], layers)
    return sum(size * layers for size, layers in slots.items())


def pages_per_request(g: Group, max_model_len: int, in_flight_tokens: int, extra_retained: int, dcp: int) -> int:
    """Full attention: cdiv(L, block x DCP). Window: cdiv(min(window - 1 + extra + in flight, L), block) + 1
    (SlidingWindowSpec.max_admission_blocks_per_request, kv_cache_interface.py:546-582)."""
    if not g.window:
        return cdiv(max_model_len, g.block * dcp)
    return cdiv(min(g.window - 1 + extra_retained + in_flight_tokens, max_model_len), g.block) + 1


# The spec of a recipe --------------------------------------------------------------------------------------------

def spec(model: Model, engine: Engine, token_bytes: int, mtp_layers: int, max_model_len: int, in_flight_tokens: int,
         extra_retained: int, dcp: int, block_alignment: int) -> KvSpec:
    """The groups, block bytes and pages per request of a model under one vLLM version's rules."""
    if model.family == "deepseek_v41":  # one pseudo-page per logged token, fitted (estimates.py)
        return KvSpec((Group(1, 0, (model.logged_token_bytes.value,)),), model.logged_token_bytes.value,
                      max_model_len, model.logged_token_bytes.value * max_model_len, max_model_len, True, dcp)
    caches = mla_caches(model, engine, mtp_layers, token_bytes) if model.family == "mla" else v4_caches(model,
                                                                                                       mtp_layers)
    groups = group(caches, engine.pad_window_pages)
    pages = [pages_per_request(g, max_model_len, in_flight_tokens, extra_retained, dcp) for g in groups]
    if engine.concurrency_counts_pages or len(groups) == 1:
        per_request = sum(pages)
    else:  # a byte ratio against the full group's page (kv_cache_utils.py:919-937 at 65dcde169)
        per_request = cdiv(sum(p * g.page_bytes for p, g in zip(pages, groups)), groups[0].page_bytes)
    if len(groups) == 1:
        request = pages[0] * groups[0].page_bytes
    else:  # _max_memory_usage_bytes_from_groups, DeepSeek-V4 branch (kv_cache_utils.py:1957-1981)
        request = block_bytes(groups, "tuple") * sum(pages)
    stride = block_bytes(groups, engine.kv_block_rule)
    if engine.aligns_block_stride:  # rounded up to the layers' block_stride_alignment (vLLM 0.31.0+)
        stride = round_up(stride, block_alignment)
    return KvSpec(tuple(groups), stride, per_request, request, max_model_len, engine.tokens_from_concurrency, dcp)
