"""The pages of vLLM's KV-cache specs (vllm/v1/kv_cache_interface.py): one layer's cache (`Cache`), the groups layers
form (`Group`), what a block costs (`block_bytes`), the pages a request holds in a group (`group_pages`), and the spec
of a deployment (`KvSpec`): its blocks in a KV memory and the tokens vLLM logs for them, and what a spec reads of the
deployment (`CacheConfig`). The constants two families share live here; each family's own are in its module."""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, fields


INDEXER_ENTRY_BYTES = 128 + 4  # 128 FP8 values + one FP32 scale (vllm/models/deepseek_v32/attention.py:92-97)
INDEXER_MXFP4_ENTRY_BYTES = 128 // 2 + 128 // 32  # vllm==0.33.0 vllm/models/deepseek_v41/attention.py:101-109
# DeepSeek-V4, whose records V4.1 keeps off SM10x (vllm/models/deepseek_v4/attention.py:690-748, compressor.py:152-200,
# sparse_swa.py:87-107):
V4_ENTRY_BYTES = 448 + 64 * 2 + 8  # FP8 NoPE + BF16 RoPE + scales
V4_PAGE_ALIGNMENT = 576  # pages rounded up to multiples of 576 B (kv_cache_interface.py:372-378)
V4_HEAD_DIM = 512


@dataclass(frozen=True)
class CacheConfig:
    """What a KV-cache spec reads of a deployment, and nothing else (vLLM's ModelConfig, CacheConfig and ParallelConfig
    in short): the model's shapes (catalog.Model), the release's rules (engine.Engine's values: no version is compared
    here), the GPU (catalog.Gpu), the cache dtypes, the drafts and the parallel layout. Equal configs give equal specs:
    a sweep keeps the specs it built under their config (deployment.kv_spec)."""
    model: object  # catalog.Model
    engine: object  # engine.Engine: the rules of the recipe's vLLM release, as values
    gpu: object  # catalog.Gpu
    cache_dtype: str
    quantized_cache: bool
    indexer_kv_dtype: str
    indexer_sparse_logits: bool
    attention_backend: str | None
    speculative_method: str | None
    num_speculative_tokens: int
    max_model_len: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    decode_context_parallel_size: int
    enable_prefix_caching: bool

    @classmethod
    def of(cls, values) -> "CacheConfig":
        """The config of anything that has its fields (a resolved recipe)."""
        return cls(**{f.name: getattr(values, f.name) for f in fields(cls)})


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


def block_bytes(config: CacheConfig, groups: list[Group]) -> int:
    """What one block id costs. One uniform group: its page bytes. DeepSeek-V4's packed layout (vLLM rule by
    version): 'tuple' = distinct full-group page sizes x the most layers of one size in a group (to 0.22.1);
    'bucket' = each page size x its most layers in any group (to 0.26.0); 'overlay' = the largest group; from 0.31.0
    rounded up to the lcm of the layers' block-stride alignments. From 0.32.0 a layer-outer layout (V3.2, GLM-5.x)
    costs the largest group's pages, each padded to its own alignment."""
    rule = config.engine.kv_block_rule
    if config.engine.pads_layer_pages and not config.model.block_outermost_layout:
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
    if not config.engine.aligns_block_stride:
        return stride
    return round_up(stride, math.lcm(*(c.stride_alignment for g in groups for c in g.caches)))


def group_pages(config: CacheConfig, g: Group, in_flight_tokens: int, extra_retained: int) -> int:
    """Full attention: cdiv(L, block x DCP). Window: cdiv(min(window - 1 + extra + in flight, L), block) + 1
    (SlidingWindowSpec.max_admission_blocks_per_request, vllm==0.28.0 vllm/v1/kv_cache_interface.py:565-572).
    State: its own count."""
    length = config.max_model_len
    if g.kind == "full":
        return cdiv(length, g.block * config.decode_context_parallel_size)
    if g.kind == "window":
        return cdiv(min(g.window - 1 + extra_retained + in_flight_tokens, length), g.block) + 1
    return max(c.state_pages for c in g.caches)
