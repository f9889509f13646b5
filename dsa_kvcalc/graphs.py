"""The CUDA graphs vLLM captures, decided from the recipe before it counts memory: the capture sizes its config sets,
the sizes each model runner captures, the FULL decode graphs, and how the release estimates them before it sizes the
KV cache (docs/cudagraph-estimate.md). deployment.resolve() decides them once; capacity.py counts their bytes.
`model_runner_v2`: the runner deployment.on_model_runner_v2 decides."""

from dataclasses import dataclass
from enum import Enum

from dsa_kvcalc.keys import Recipe
from dsa_kvcalc.kv_cache import round_up


FULL_MODES = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
PIECEWISE_MODES = ("PIECEWISE", "FULL_AND_PIECEWISE")
GRID_RUN_START, GRID_RUN_STEP = 256, 16  # the grid's multiples of 16 from 256


def capture_grid(limit: int, interactive: bool) -> tuple[set[int], range]:
    """vLLM's capture grid up to limit: 1, 2, 4 (every size up to 32 with performance-mode interactivity), multiples
    of 8 below 256, multiples of 16 from 256 (vllm==0.33.0 vllm/config/vllm.py _set_cudagraph_sizes); the last as a
    range, which a given max_cudagraph_capture_size can make hundreds of millions long."""
    small = range(1, 33) if interactive else (1, 2, 4)
    listed = {size for size in (*small, *range(8, GRID_RUN_START, 8)) if size <= limit}
    return listed, range(GRID_RUN_START, limit + 1, GRID_RUN_STEP)


@dataclass(frozen=True)
class Graphs:
    """Capture sizes rounded up to whole requests of per_seq tokens and kept within a bound (per_seq 1: the sizes as
    they are), in tokens: the sizes of the grid's run whose round-up is within the bound, and a few listed graphs,
    already rounded, that no size of the run rounds up to. 16 apart, the run's sizes round apart where
    per_seq <= 16; where it is larger, they round to every multiple between their ends."""
    listed: frozenset
    run: range
    per_seq: int

    def run_count(self) -> int:
        if not self.run:
            return 0
        if self.per_seq <= self.run.step:
            return len(self.run)
        return (round_up(self.run[-1], self.per_seq) - round_up(self.run[0], self.per_seq)) // self.per_seq + 1

    def __len__(self) -> int:
        return self.run_count() + len(self.listed)

    @property
    def top(self) -> int:
        """The largest graph; 0 where there is none."""
        run_top = round_up(self.run[-1], self.per_seq) if self.run else 0
        return max(run_top, max(self.listed, default=0))

    def largest(self, count: int) -> list[int]:
        """The count largest graphs, largest first."""
        if self.per_seq <= self.run.step:
            from_run = {round_up(size, self.per_seq) for size in self.run[::-1][:count]}
        else:
            top = round_up(self.run[-1], self.per_seq) if self.run else 0
            from_run = set(range(top, top - count * self.per_seq, -self.per_seq)[:self.run_count()])
        return sorted(from_run | self.listed, reverse=True)[:count]


def off_run(graphs: set[int], run: range, per_seq: int) -> frozenset:
    """The graphs, multiples of per_seq, that no size of the run rounds up to: below the run, or where the run's
    largest size up to the graph is not above graph - per_seq."""
    if not run:
        return frozenset(graphs)
    start, step, last = run.start, run.step, run[-1]
    return frozenset(graph for graph in graphs
                     if graph < start or min(graph - (graph - start) % step, last) <= graph - per_seq)


def whole_requests(listed: set[int], run: range, per_seq: int, bound: int) -> Graphs:
    """Each size rounded up to a multiple of per_seq, kept where that is within bound: a size is where it is at most
    the largest multiple within bound. A listed graph that a size of the run rounds up to is the run's."""
    top = bound // per_seq * per_seq
    kept_run = range(run.start, min(run.stop, top + 1), run.step)
    rounded = {round_up(size, per_seq) for size in listed if size <= top}
    return Graphs(off_run(rounded, kept_run, per_seq), kept_run, per_seq)


# vLLM's default largest capture size off SM10x in every release modelled: capture_ceiling_sm10x's value before
# 0.28.0 raised it on SM10x alone (vllm==0.28.0 vllm/config/vllm.py:1936-1943)
DEFAULT_CAPTURE_CEILING = 512


def capture_ceiling(recipe: Recipe) -> int:
    return recipe.engine.capture_ceiling_sm10x if recipe.gpu.family == "sm100" else DEFAULT_CAPTURE_CEILING


def capture_sizes(recipe: Recipe) -> Graphs:
    """The batch sizes vLLM's config captures, in tokens, before any rounding to whole requests: the recipe's
    cudagraph_capture_sizes that vLLM keeps, or its grid up to min(max_num_seqs x (1 + k) x 2, ceiling) (or the given
    max_cudagraph_capture_size), at most max_num_batched_tokens, with the sizes each release adds (engine.py):
    max_num_batched_tokens itself, whole requests n x (1 + k) with n on the request grid up to
    min(max_num_seqs, ceiling) or n that top (vllm==0.29.0 vllm/config/vllm.py:2030-2037), and max_num_seqs."""
    if recipe.cudagraph_capture_sizes:
        return Graphs(frozenset(recipe.kept_capture_sizes), range(0), 1)
    engine, seqs, tokens = recipe.engine, recipe.max_num_seqs, recipe.max_num_batched_tokens
    per_seq = 1 + recipe.num_speculative_tokens
    given_limit = recipe.max_cudagraph_capture_size  # None: vLLM's default rule
    ceiling = capture_ceiling(recipe)
    limit = min(min(seqs * per_seq * 2, ceiling) if given_limit is None else given_limit, tokens)
    listed, run = capture_grid(limit, recipe.performance_mode == "interactivity")
    if engine.captures_max_num_batched_tokens:
        listed.add(tokens)
    if given_limit is None and per_seq == 1 and engine.captures_max_num_seqs:
        listed.add(seqs)
    if given_limit is None and per_seq > 1 and engine.captures_whole_requests:
        # request counts: 1, 2, 4, multiples of 8 and 16 and the count itself, whatever the performance mode. Those
        # from the grid's run (multiples of 16 from 256) make multiples of 16 from 256 tokens: sizes of the grid's
        # run already, or above the limit, so they add none
        requests = min(seqs, ceiling)
        request_counts, _ = capture_grid(requests, False)
        listed |= {n * per_seq for n in request_counts | {requests}}
    return whole_requests(listed, run, 1, limit)


def runner_capture_sizes(recipe: Recipe, sizes: Graphs, model_runner_v2: bool) -> Graphs:
    """The sizes the model runner captures its mixed-batch graphs at: Model Runner V1 rounds every size up to whole
    requests of 1 + k tokens, within the largest, where a FULL mode captures decode graphs with draft tokens
    (vllm==0.33.0 vllm/config/compilation.py:1496-1508, 1537-1565 adjust_cudagraph_sizes_for_spec_decode;
    vllm==0.19.0 :1235-1280); Model Runner V2 keeps them (its decode graphs round themselves, decode_graphs).
    `sizes`: capture_sizes(recipe)."""
    per_seq = 1 + recipe.num_speculative_tokens
    if model_runner_v2 or recipe.cudagraph_mode not in FULL_MODES:
        return sizes
    return whole_requests(sizes.listed, sizes.run, per_seq, sizes.top)


def decode_graphs(recipe: Recipe, sizes: Graphs) -> Graphs:
    """The uniform decode batches vLLM captures FULL, in tokens (each one indexer logits row): every capture size
    rounded up to whole requests of 1 + k tokens, kept within the largest capture size and max_num_seqs requests
    (Model Runner V2: vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:321-350; V1 rounds the sizes themselves,
    runner_capture_sizes, and its dispatcher keeps those within (1 + k) x max_num_seqs,
    vllm/v1/cudagraph_dispatcher.py:203-229). The same whole-request graphs stand for the decode batches of mode
    FULL, whose graphs are the capture sizes themselves. The largest (top) is the rows of indexer logits the graph
    pool holds, at most the decode worst case (max_num_batched_tokens bounds the sizes, max_num_seqs the requests)."""
    if recipe.cudagraph_mode not in FULL_MODES:
        return Graphs(frozenset(), range(0), 1)
    per_seq = 1 + recipe.num_speculative_tokens
    return whole_requests(sizes.listed, sizes.run, per_seq, min(sizes.top, recipe.max_num_seqs * per_seq))


def full_graphs(recipe: Recipe, sizes: Graphs, model_runner_v2: bool) -> Graphs:
    """The FULL graphs vLLM captures, in tokens: the decode graphs where FULL is the decode mode beside PIECEWISE or
    none (FULL_AND_PIECEWISE, FULL_DECODE_ONLY), every mixed-batch size in mode FULL
    (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:321-374, vllm/v1/cudagraph_dispatcher.py:187-229)."""
    if recipe.cudagraph_mode == "FULL":
        return runner_capture_sizes(recipe, sizes, model_runner_v2)
    return decode_graphs(recipe, sizes)


def cudagraphs_subtracted(recipe: Recipe, model_runner_v2: bool) -> bool:
    """Does this vLLM subtract its CUDA-graph estimate before sizing the KV cache? From v0.20.0
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), on ROCm from v0.26.0, where it captures graphs at all (no estimate
    under cudagraph_mode NONE: vllm==0.20.0 vllm/v1/worker/gpu_worker.py:379-385, vllm==0.33.0 :700-709); Model
    Runner V2 estimates nothing before 0.29.0."""
    engine = recipe.engine
    if not engine.estimates_cudagraphs or (recipe.gpu.family == "rocm" and not engine.rocm_estimates_cudagraphs):
        return False
    if recipe.cudagraph_mode == "NONE":
        return False
    return not model_runner_v2 or engine.model_runner_v2_estimates_cudagraphs


class GraphEstimate(Enum):
    """How the release's model runner estimates its CUDA graphs before it sizes the KV cache
    (docs/cudagraph-estimate.md)."""
    NONE = "none subtracted"
    SAMPLED = ("Model Runner V1: each mode's two largest graphs warmed up and captured; the larger first capture + "
               "(graphs - 1) x max(second, floor) per mode")
    EXTRAPOLATED = ("Model Runner V2: the whole capture measured with only the two largest FULL graphs; those two "
                    "swapped for the first + (FULL graphs - 1) x max(second, floor)")


@dataclass(frozen=True)
class CudagraphEstimate:
    """What vLLM's estimate adds beyond the first captures, which hold the pool's memory (the indexer logits of the
    largest FULL decode graph among it): the extrapolated graphs at the per-graph floor. A later capture holds no
    indexer logits of its own: its rows are fewer at the same width, and every graph shares one pool, captured
    largest first, so they fit in the blocks the first capture freed (vllm==0.33.0
    vllm/v1/worker/gpu/cudagraph_utils.py:183, 377, 444-447, 1032-1034; vllm/v1/cudagraph_dispatcher.py:336-346).
    Its sample is the driver's per-graph overhead, taken at the floor the release puts under it."""
    method: GraphEstimate
    graphs: dict  # mode -> graphs captured
    sampled_rows: tuple[int, ...]  # the FULL graphs whose capture is measured, largest first
    extrapolated_graphs: int  # graphs the estimate counts at the per-graph cost
    per_graph_bytes: int  # the release's floor under the second sample (1 MiB)

    @property
    def floor_bytes(self) -> int:
        return self.extrapolated_graphs * self.per_graph_bytes

    @property
    def subtracted(self) -> bool:
        """Does this vLLM subtract its estimate before sizing the KV cache (cudagraphs_subtracted)?"""
        return self.method is not GraphEstimate.NONE


def cudagraph_estimate(recipe: Recipe, sizes: Graphs, model_runner_v2: bool) -> CudagraphEstimate:
    """V1 (vllm==0.19.0 vllm/v1/worker/gpu_model_runner.py:5862-5960; the same to vllm==0.33.0 :6268-6415):
        estimate = max over modes of the first capture + sum over modes of (graphs - 1) x max(second capture, floor)
    V2 (vllm==0.29.0 vllm/v1/worker/gpu/cudagraph_utils.py:712-831; the same to vllm==0.33.0 :916-1039):
        estimate = the capture measured - both samples + first + (FULL graphs - 1) x max(second, floor)
    PIECEWISE graphs are sampled by V1 and measured in full by V2. None where the release subtracts none."""
    engine = recipe.engine
    full = full_graphs(recipe, sizes, model_runner_v2)
    runner = runner_capture_sizes(recipe, sizes, model_runner_v2)
    piecewise = len(runner) if recipe.cudagraph_mode in PIECEWISE_MODES else 0
    graphs = {mode: count for mode, count in (("PIECEWISE", piecewise), ("FULL", len(full))) if count}
    sampled = tuple(full.largest(engine.cudagraph_estimate_samples))
    if not cudagraphs_subtracted(recipe, model_runner_v2):
        return CudagraphEstimate(GraphEstimate.NONE, graphs, (), 0, 0)
    if model_runner_v2:
        return CudagraphEstimate(GraphEstimate.EXTRAPOLATED, graphs, sampled, max(len(full) - 1, 0),
                                 engine.cudagraph_per_graph_floor_bytes)
    extrapolated = sum(count - 1 for count in graphs.values())
    return CudagraphEstimate(GraphEstimate.SAMPLED, graphs, sampled, extrapolated,
                             engine.cudagraph_per_graph_floor_bytes)
