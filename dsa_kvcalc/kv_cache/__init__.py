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
state. With pipeline parallelism each stage keeps its layers' caches and every stage is cut to the fewest blocks.
The version-dependent rules are in engine.py.

The package follows vllm/v1/kv_cache_interface.py: pages.py is the specs' base (Cache, Group, KvSpec, block_bytes),
one module a family builds its layers' caches (mla.py, deepseek_v4.py, deepseek_v41.py, glm5next.py), grouping.py
forms the groups and cuts them by pipeline stage, and `spec` here puts them together.
"""

from collections import Counter

from dsa_kvcalc.kv_cache.deepseek_v4 import V4_WINDOW_BLOCK, v4_caches
from dsa_kvcalc.kv_cache.deepseek_v41 import V41_WINDOW_BLOCK, v41_attention, v41_caches, v41_packed
from dsa_kvcalc.kv_cache.glm5next import PAGED_MQA_PAGE_SIZES, attention_block, glm5next_caches, kda_state_bytes
from dsa_kvcalc.kv_cache.grouping import approximate_gcd, group, stage_groups, stage_layers
from dsa_kvcalc.kv_cache.mla import MLA_FP8_DS_BYTES, mla_caches, mla_token_bytes, owns_indexer
from dsa_kvcalc.kv_cache.pages import (INDEXER_ENTRY_BYTES, CacheConfig, Group, KvSpec, block_bytes, cdiv, group_pages,
                                       round_up)

# spec, and what the rest of dsa_kvcalc and its tests import from the package
__all__ = ["INDEXER_ENTRY_BYTES", "MLA_FP8_DS_BYTES", "PAGED_MQA_PAGE_SIZES", "V41_WINDOW_BLOCK", "V4_WINDOW_BLOCK",
           "CacheConfig", "Group", "KvSpec", "approximate_gcd", "attention_block", "cdiv", "group_pages",
           "kda_state_bytes", "mla_token_bytes", "owns_indexer", "round_up", "spec", "stage_layers", "v41_attention",
           "v41_caches", "v41_packed"]


def spec(config: CacheConfig, backend: str, draft_layers: int, in_flight_tokens: int, extra_retained: int) -> KvSpec:
    """The groups, block bytes and pages per request of a deployment under its vLLM release's rules. With pipeline
    parallelism every stage is cut to the fewest blocks (the costliest block) and stage 0's groups are logged."""
    family = config.model.family
    if family == "mla":
        caches = mla_caches(config, backend, draft_layers)
    elif family == "deepseek_v41":
        caches = v41_caches(config, draft_layers)
    elif family == "glm5next":
        caches = glm5next_caches(config, backend, draft_layers)
    else:
        caches = v4_caches(config, draft_layers)
    groups = group(config, caches)
    stages = stage_groups(config, groups)
    stride = max(block_bytes(config, share) for share in stages)
    logged = stages[0]
    pages = [group_pages(config, g, in_flight_tokens, extra_retained) for g in logged]
    context_pages = [p if g.kind == "full" else 0 for p, g in zip(pages, logged)]
    if config.engine.concurrency_counts_pages or len(logged) == 1:
        per_request, context = sum(pages), sum(context_pages)
    else:  # a byte ratio against the full group's page (vllm==0.26.0 vllm/v1/core/kv_cache_utils.py:943-955)
        per_request = cdiv(sum(p * g.page_bytes for p, g in zip(pages, logged)), logged[0].page_bytes)
        context = cdiv(sum(p * g.page_bytes for p, g in zip(context_pages, logged)), logged[0].page_bytes)
    if len(logged) == 1:  # its pages at the block's stride, padding included (vllm==0.31.0 kv_cache_utils.py:2515-2527)
        request = pages[0] * block_bytes(config, logged)
    elif config.engine.kv_grouping == "packed":  # a block for each page (vllm==0.29.0 kv_cache_utils.py:2043-2070)
        request = per_request * stride
    else:  # _max_memory_usage_bytes_from_groups, DeepSeek-V4 branch (kv_cache_utils.py:1957-1981)
        request = sum(set(logged[0].pages)) * max(max(Counter(g.pages).values()) for g in logged) * sum(pages)
    return KvSpec(tuple(logged), stride, per_request, per_request - context, request, config.max_model_len,
                  config.engine.tokens_from_concurrency, config.decode_context_parallel_size)
