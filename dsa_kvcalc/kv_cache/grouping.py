"""How layers form groups, by release (vllm/v1/core/kv_cache_utils.py; kv_cache_planning.py in 0.33.0), and each
pipeline stage's share of them."""

from collections import Counter, defaultdict
from dataclasses import replace

from dsa_kvcalc.kv_cache.pages import Cache, CacheConfig, Group, cdiv


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


def group(config: CacheConfig, caches: list[Cache]) -> list[Group]:
    engine = config.engine
    if all(c.kind == "full" and c.block == caches[0].block for c in caches):
        return [Group("full", caches[0].block, 0, tuple(caches))]
    if engine.linear_states_share_attention_blocks and any(c.kind == "linear" for c in caches):
        return shared_groups(caches)
    if engine.kv_grouping == "packed":
        return packed_groups(caches)
    return uniform_groups(caches, engine.pad_window_pages)


# Pipeline stages ---------------------------------------------------------------------------------------------------

def stage_layers(num_layers: int, stages: int) -> list[range]:
    """vllm==0.33.0 vllm/distributed/utils.py:198-239 get_pp_indices (the same in every release): num_layers // PP a
    stage, the remainder one more each on the second-last, third-last, ... stage."""
    sizes = [num_layers // stages] * stages
    for i in range(2, num_layers % stages + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(stages)]
    return [range(start, start + size) for start, size in zip(starts, sizes)]


def stage_groups(config: CacheConfig, groups: list[Group]) -> list[list[Group]]:
    """Each stage's share of the groups (built once on the whole model, vllm==0.26.0
    vllm/v1/core/kv_cache_utils.py:2091): its layers, and the draft layers on the last stage."""
    stages = stage_layers(config.model.num_layers, config.pipeline_parallel_size)
    if len(stages) == 1:
        return [groups]
    stages[-1] = range(stages[-1].start, stages[-1].stop + 10 ** 6)  # the drafts follow the last layer
    shares = []
    for layers in stages:
        projected = [Group(g.kind, g.block, g.window, tuple(c for c in g.caches if c.layer in layers)) for g in groups]
        shares.append([g for g in projected if g.caches])
    return shares
