"""The capacity model of docs/design.md, as pure arithmetic over a validated Recipe.

Reads in the design's order, one step a section: the decode logits' rows, width and bytes per element ("The decode
logits"), the profile run's reservation, the peak it raises, the CUDA graphs, the KV bytes, and the blocks and tokens
they hold ("How vLLM sizes the KV cache"), then the out-of-memory risk and plan(), which strings the steps together for
each top-k backend. What vLLM picks before it counts memory (the "Top-k backends", the sparse-MLA backend, the
KV-cache spec) is choices.py's; the terms its profile measures are memory_terms.py's; the KV bytes per token ("KV-cache
groups") are kv_cache.py's. Bytes and tokens are integers.
"""

import math
from dataclasses import dataclass, replace
from enum import Enum

from dsa_kvcalc import estimates
from dsa_kvcalc.bisection import largest
from dsa_kvcalc.catalog import (STRIDE_ALIGNMENT_BYTES, V4_FLASHMLA_ARCHS, V4_SM120_ARCHS,
                                Backend, Layout, Rows)
from dsa_kvcalc.choices import availability, engine_backends, kv_spec, on_model_runner_v2, sparse_mla_refusal
from dsa_kvcalc.keys import Recipe, RecipeError, Refusal
from dsa_kvcalc.kv_cache import SM10X, round_up, stage_layers, v41_packed
from dsa_kvcalc.kv_init_buffers import kv_init_buffer_bytes
from dsa_kvcalc.memory_terms import RankMemory, Term, estimated, peak_budget_bytes, profile_budget_bytes, rank_memory
from dsa_kvcalc.units import GIB, MIB

DTYPE_BYTES = {"bf16": 2, "fp32": 4}
FP32_BYTES = 4


# 1. Rows: the decode worst case ---------------------------------------------------------------------------------

def rows_rule(recipe: Recipe) -> Rows:
    """The indexer's own rule (catalog.Indexer), or DeepInfer's, whose profile run takes max_num_seqs x (1 + nextn)."""
    return recipe.model.indexer.rows if recipe.engine.rows_capped_by_batched_tokens else Rows.UNCAPPED


def decode_rows(recipe: Recipe) -> int:
    """rows = min(max_num_seqs, max_num_batched_tokens) x (1 + num_speculative_tokens)   (vLLM #62860)
    rows = min(max_num_seqs x (1 + num_speculative_tokens), max_num_batched_tokens)     (the kpool indexer's profile
           branch, vllm==0.30.0 vllm/model_executor/layers/sparse_attn_indexer_kpool.py:312-321)
    rows = max_num_seqs x (1 + nextn)                                                     (DeepInfer's profile run)"""
    seqs, tokens, per_seq = recipe.max_num_seqs, recipe.max_num_batched_tokens, 1 + recipe.num_speculative_tokens
    rule = rows_rule(recipe)
    if rule is Rows.TOKENS_CAPPED:
        return min(seqs * per_seq, tokens)
    if rule is Rows.SEQS_CAPPED:
        return min(seqs, tokens) * per_seq
    return seqs * per_seq


# 2. Width: DeepGEMM's padded row --------------------------------------------------------------------------------

def stride_columns(layout: Layout) -> int:
    """The columns of a 1024-byte row stride in the layout's logits dtype."""
    return STRIDE_ALIGNMENT_BYTES // DTYPE_BYTES[layout.logits_dtype]


def width_multiple(layout: Layout) -> int:
    """Whole KV splits, and where the layout aligns its row stride to 1024 B, whole strides too."""
    return math.lcm(layout.split_columns, stride_columns(layout)) if layout.stride_aligned else layout.split_columns


def padded_columns(columns: int, layout: Layout) -> int:
    """DeepGEMM allocates [rows, padded] and returns a view of width `columns`: the row stride is `padded`."""
    return round_up(columns, width_multiple(layout))


# 3. Bytes per element -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecodeLogits:
    rows_rule: Rows
    rows: int
    columns: int  # the view's width: the keys the indexer scores (decode_logits)
    width_multiple: int  # the padded width is the columns rounded up to this
    stride_columns: int  # the columns of a 1024-byte row stride, in the multiple where the layout aligns strides
    padded_columns: int  # the row stride
    logits_dtype: str
    logits_bytes_per_element: int  # DeepGEMM's output
    copy_bytes_per_element: int  # the FP32 copy the top-k reads (as_fp32_logits); 0 when it reads the output

    @property
    def bytes_per_element(self) -> int:
        return self.logits_bytes_per_element + self.copy_bytes_per_element

    @property
    def bytes(self) -> int:
        return self.rows * self.padded_columns * self.bytes_per_element

    @property
    def copy_bytes(self) -> int:
        return self.rows * self.padded_columns * self.copy_bytes_per_element

    @property
    def alignment_bytes(self) -> int:
        """What padding the width to whole splits and 1024-byte strides adds over [rows, columns]."""
        return self.rows * (self.padded_columns - self.columns) * self.bytes_per_element


def reads_bf16(recipe: Recipe, backend: Backend) -> bool:
    """The one predicate shared by the runtime upcast and the reservation: does the top-k read BF16 directly?
    DeepSelect (and DeepInfer's own top-k) do, except under decode context parallelism (DCP merges need FP32) and
    under an indexer that upcasts whatever top-k runs (the kpool indexer's as_fp32_logits, catalog.KPOOL_INDEXER)."""
    return backend.reads_bf16 and recipe.decode_context_parallel_size == 1 and not recipe.model.indexer.upcasts_always


def decode_logits(recipe: Recipe, topk_reads_bf16: bool) -> DecodeLogits:
    """[rows, padded(max_model_len // ratio)] in DeepGEMM's dtype, plus the FP32 copy where the top-k reads FP32."""
    layout = recipe.layout
    columns = recipe.max_model_len // recipe.indexer_width_ratio
    needs_copy = layout.logits_dtype != "fp32" and not topk_reads_bf16
    return DecodeLogits(rows_rule(recipe), decode_rows(recipe), columns, width_multiple(layout), stride_columns(layout),
                        padded_columns(columns, layout), layout.logits_dtype, DTYPE_BYTES[layout.logits_dtype],
                        FP32_BYTES if needs_copy else 0)


def backend_logits(recipe: Recipe, backends: list[Backend]) -> dict[str, DecodeLogits]:
    """Each backend's decode logits: one computation per way the top-k reads them."""
    by_reader = {reads: decode_logits(recipe, reads) for reads in {reads_bf16(recipe, b) for b in backends}}
    return {b.name: by_reader[reads_bf16(recipe, b)] for b in backends}


# 4. Reservation: what the profile run sets aside for the indexer's logits ---------------------------------------

class Reserved(Enum):
    """What a profile run reserves for the indexer's logits."""
    BUDGET = "the prefill budget, no decode term"
    DECODE_LOGITS = "max(prefill budget, decode logits)"  # vLLM #62860
    UNPADDED_FP32 = "max(prefill budget, rows x width x 4 B)"  # the kpool indexer's own: FP32, unpadded
    HELD = "the decode logits themselves"  # DeepInfer's profile run holds them, before and after any fix
    WORKSPACE = "prefill budget + ROCm's locked indexer workspace"  # the same either side of #62860


@dataclass(frozen=True)
class Reservation:
    kind: Reserved
    budget_bytes: int  # the prefill logits budget the profile run allocates
    term_bytes: int  # what it reserves beside the budget: the decode logits, their FP32 unpadded bytes, the workspace
    bytes: int


def rocm_indexer_workspace_bytes(recipe: Recipe) -> int:
    """ROCm's AITER indexer locks an FP32 buffer for the decode logits while profiling (engine.py
    rocm_indexer_workspace): max_num_batched_tokens rows from vLLM 0.23.0, min(max_num_batched_tokens,
    max_num_seqs x (1 + k)) from 0.30.0, at max_model_len columns: 32 GiB at 8192 x 1M (vLLM issue #55132)."""
    rows_rule = recipe.engine.rocm_indexer_workspace
    if not recipe.gpu.arch.startswith("gfx") or rows_rule == "none":
        return 0
    rows = recipe.max_num_batched_tokens
    if rows_rule == "decode rows":
        rows = min(rows, recipe.max_num_seqs * (1 + recipe.num_speculative_tokens))
    return rows * recipe.max_model_len * FP32_BYTES


def reservation(recipe: Recipe, logits: DecodeLogits, reserves_decode_logits: bool) -> Reservation:
    """reserved = max(prefill_budget, rows x padded_width x bytes_per_element)   (with #62860; without: the budget)
    reserved = max(prefill_budget, rows x width x 4)        (the kpool indexer's own: FP32, unpadded)
    DeepInfer's profile run holds the decode logits themselves; ROCm's locked workspace holds them on top of the
    budget. Both are the same on either side of #62860."""
    budget = profile_budget_bytes(recipe)
    workspace = rocm_indexer_workspace_bytes(recipe)
    unpadded_fp32 = logits.rows * logits.columns * FP32_BYTES
    if recipe.engine.profile_holds_decode_logits:
        return Reservation(Reserved.HELD, budget, logits.bytes, logits.bytes)
    if workspace:
        return Reservation(Reserved.WORKSPACE, budget, workspace, budget + workspace)
    if reserves_decode_logits and recipe.model.indexer.reserves_unpadded_fp32:
        return Reservation(Reserved.UNPADDED_FP32, budget, unpadded_fp32, max(budget, unpadded_fp32))
    if reserves_decode_logits:
        return Reservation(Reserved.DECODE_LOGITS, budget, logits.bytes, max(budget, logits.bytes))
    return Reservation(Reserved.BUDGET, budget, 0, budget)


# 5. Peak: the activation peak the reservation raises ------------------------------------------------------------

def indexer_headroom(recipe: Recipe, logits: dict[str, DecodeLogits], backend: str) -> int:
    """How far the run's global peak sits above what is live inside the indexer when the reservation is made
    (global_peak - indexer_live): the reservation raises the peak only by what it adds beyond that. Measured for this
    backend, or for one with the same bytes per element (the same working set), or for every backend ("*"); else the
    prefill budget the base peak holds, so that the reservation raises the peak by all it adds beyond that budget.
    Never below it: the base peak already holds it."""
    measured = recipe.indexer_headroom_bytes
    same_working_set = [bytes_ for name, bytes_ in measured.items()
                        if name in logits and logits[name].bytes_per_element == logits[backend].bytes_per_element]
    headroom = measured.get(backend, same_working_set[0] if same_working_set else measured.get("*", 0))
    return max(headroom, peak_budget_bytes(recipe))


def raised_peak_bytes(memory: RankMemory, reserved: int, headroom: int) -> int:
    """peak = base peak + max(0, reserved - indexer headroom): the reservation stacks on what is live inside the
    indexer, not on the run's global peak."""
    return memory.base_peak.bytes + max(0, reserved - headroom)


# 6. Graphs: the graphs vLLM captures, the decode logits its FULL graphs hold, and what it subtracts for them -------

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
    they are), in tokens: a few listed, already rounded, and the sizes of the grid's run whose round-up is within the
    bound. 16 apart, the run's sizes round apart where per_seq <= 16; where it is larger, they round to every multiple
    between their ends."""
    listed: frozenset
    run: range
    per_seq: int

    def run_holds(self, graph: int) -> bool:
        """Does a size of the run round up to this graph, a multiple of per_seq: is one in (graph - per_seq, graph]?"""
        low = max(graph - self.per_seq + 1, self.run.start)
        first = self.run.start + -(-(low - self.run.start) // self.run.step) * self.run.step
        return bool(self.run) and first <= min(graph, self.run[-1])

    def run_count(self) -> int:
        if not self.run:
            return 0
        if self.per_seq <= self.run.step:
            return len(self.run)
        return (round_up(self.run[-1], self.per_seq) - round_up(self.run[0], self.per_seq)) // self.per_seq + 1

    def __len__(self) -> int:
        return self.run_count() + sum(not self.run_holds(graph) for graph in self.listed)

    @property
    def top(self) -> int:
        """The largest graph; 0 where there is none."""
        return next(iter(self.largest(1)), 0)

    def largest(self, count: int) -> list[int]:
        """The count largest graphs, largest first."""
        if self.per_seq <= self.run.step:
            from_run = {round_up(size, self.per_seq) for size in self.run[::-1][:count]}
        else:
            top = round_up(self.run[-1], self.per_seq) if self.run else 0
            from_run = set(range(top, top - count * self.per_seq, -self.per_seq)[:self.run_count()])
        return sorted(from_run | self.listed, reverse=True)[:count]


def whole_requests(listed: set[int], run: range, per_seq: int, bound: int) -> Graphs:
    """Each size rounded up to a multiple of per_seq, kept where that is within bound."""
    top = bound // per_seq * per_seq
    kept = frozenset(round_up(size, per_seq) for size in listed if round_up(size, per_seq) <= bound)
    return Graphs(kept, range(run.start, min(run.stop, top + 1), run.step), per_seq)


# vLLM's default largest capture size off SM10x in every release modelled: capture_ceiling_sm10x's value before
# 0.28.0 raised it on SM10x alone (vllm==0.28.0 vllm/config/vllm.py:1936-1943)
DEFAULT_CAPTURE_CEILING = 512


def capture_ceiling(recipe: Recipe) -> int:
    return recipe.engine.capture_ceiling_sm10x if recipe.gpu.arch in ("sm100", "sm103") else DEFAULT_CAPTURE_CEILING


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
        # request counts: 1, 2, 4, multiples of 8 and 16 and the count itself, whatever the performance mode
        requests = min(seqs, ceiling)
        request_counts, request_run = capture_grid(requests, False)
        listed |= {n * per_seq for n in request_counts | set(request_run) | {requests}}
    return whole_requests(listed, run, 1, limit)


def runner_capture_sizes(recipe: Recipe) -> Graphs:
    """The sizes the model runner captures its mixed-batch graphs at: Model Runner V1 rounds every size up to whole
    requests of 1 + k tokens, within the largest, where a FULL mode captures decode graphs with draft tokens
    (vllm==0.33.0 vllm/config/compilation.py:1496-1508, 1537-1565 adjust_cudagraph_sizes_for_spec_decode;
    vllm==0.19.0 :1235-1280); Model Runner V2 keeps them (its decode graphs round themselves, decode_graphs)."""
    sizes = capture_sizes(recipe)
    per_seq = 1 + recipe.num_speculative_tokens
    if on_model_runner_v2(recipe) or recipe.cudagraph_mode not in FULL_MODES:
        return sizes
    return whole_requests(sizes.listed, sizes.run, per_seq, sizes.top)


def decode_graphs(recipe: Recipe) -> Graphs:
    """The uniform decode batches vLLM captures FULL, in tokens (each one indexer logits row): every capture size
    rounded up to whole requests of 1 + k tokens, kept within the largest capture size and max_num_seqs requests
    (Model Runner V2: vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:321-350; V1 rounds the sizes themselves,
    runner_capture_sizes, and its dispatcher keeps those within (1 + k) x max_num_seqs,
    vllm/v1/cudagraph_dispatcher.py:203-229). The same whole-request graphs stand for the decode batches of mode
    FULL, whose graphs are the capture sizes themselves."""
    if recipe.cudagraph_mode not in FULL_MODES:
        return Graphs(frozenset(), range(0), 1)
    sizes = capture_sizes(recipe)
    per_seq = 1 + recipe.num_speculative_tokens
    return whole_requests(sizes.listed, sizes.run, per_seq, min(sizes.top, recipe.max_num_seqs * per_seq))


def cudagraph_logits_rows(recipe: Recipe) -> int:
    """Decode rows whose logits the graph pool holds: the largest FULL decode graph, whole requests of 1 + k tokens,
    at most the decode worst case (which bounds it: max_num_batched_tokens bounds the sizes, max_num_seqs the
    requests)."""
    return decode_graphs(recipe).top


def full_graphs(recipe: Recipe) -> Graphs:
    """The FULL graphs vLLM captures, in tokens: the decode graphs where FULL is the decode mode beside PIECEWISE or
    none (FULL_AND_PIECEWISE, FULL_DECODE_ONLY), every mixed-batch size in mode FULL
    (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:321-374, vllm/v1/cudagraph_dispatcher.py:187-229)."""
    if recipe.cudagraph_mode == "FULL":
        return runner_capture_sizes(recipe)
    return decode_graphs(recipe)


def graph_logits_bytes(recipe: Recipe, logits: dict[str, DecodeLogits]) -> dict[str, int]:
    """Per backend, the indexer logits the graph pool holds: the largest FULL decode graph's rows at the padded width."""
    rows = cudagraph_logits_rows(recipe)
    return {name: rows * dl.padded_columns * dl.bytes_per_element for name, dl in logits.items()}


def cudagraphs_subtracted(recipe: Recipe) -> bool:
    """Does this vLLM subtract its CUDA-graph estimate before sizing the KV cache? From v0.20.0
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), on ROCm from v0.26.0, where it captures graphs at all (no estimate
    under cudagraph_mode NONE: vllm==0.20.0 vllm/v1/worker/gpu_worker.py:379-385, vllm==0.33.0 :700-709); Model
    Runner V2 estimates nothing before 0.29.0."""
    engine = recipe.engine
    if not engine.estimates_cudagraphs or (recipe.gpu.arch.startswith("gfx") and not engine.rocm_estimates_cudagraphs):
        return False
    if recipe.cudagraph_mode == "NONE":
        return False
    return not on_model_runner_v2(recipe) or engine.model_runner_v2_estimates_cudagraphs


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


def cudagraph_estimate(recipe: Recipe) -> CudagraphEstimate:
    """V1 (vllm==0.19.0 vllm/v1/worker/gpu_model_runner.py:5862-5960; the same to vllm==0.33.0 :6268-6415):
        estimate = max over modes of the first capture + sum over modes of (graphs - 1) x max(second capture, floor)
    V2 (vllm==0.29.0 vllm/v1/worker/gpu/cudagraph_utils.py:712-831; the same to vllm==0.33.0 :916-1039):
        estimate = the capture measured - both samples + first + (FULL graphs - 1) x max(second, floor)
    PIECEWISE graphs are sampled by V1 and measured in full by V2. None where the release subtracts none."""
    engine = recipe.engine
    full = full_graphs(recipe)
    piecewise = len(runner_capture_sizes(recipe)) if recipe.cudagraph_mode in PIECEWISE_MODES else 0
    graphs = {mode: count for mode, count in (("PIECEWISE", piecewise), ("FULL", len(full))) if count}
    sampled = tuple(full.largest(engine.cudagraph_estimate_samples))
    if not cudagraphs_subtracted(recipe):
        return CudagraphEstimate(GraphEstimate.NONE, graphs, (), 0, 0)
    if on_model_runner_v2(recipe):
        return CudagraphEstimate(GraphEstimate.EXTRAPOLATED, graphs, sampled, max(len(full) - 1, 0),
                                 engine.cudagraph_per_graph_floor_bytes)
    extrapolated = sum(count - 1 for count in graphs.values())
    return CudagraphEstimate(GraphEstimate.SAMPLED, graphs, sampled, extrapolated,
                             engine.cudagraph_per_graph_floor_bytes)


def cudagraph_pool(recipe: Recipe, backend: str, graph_logits: dict[str, int], logits_then: dict[str, int],
                   floor_bytes: int, floor_then_bytes: int) -> Term:
    """graphs = graph logits (the largest FULL decode graph's rows) + the rest, which a measured figure holds with
    the estimate's per-graph floors (floor_bytes: 0 where this vLLM subtracts no estimate). A figure measured for one
    backend carries over to the others, and one measured at another shape (logits_then, floor_then_bytes) to this one:
    the rest stays, the logits and the floors are re-derived. A measured figure is what vLLM subtracted: its estimate
    where it makes one (calibrate writes the log's). Without one, estimates.CUDAGRAPH_BESIDES_LOGITS stands for all
    besides the logits, floors included: the logs it rests on print whole estimates."""
    if recipe.cudagraph_mode == "NONE":
        return Term(0, "derived", "no CUDA graphs (enforce-eager or cudagraph_mode NONE)")
    measured = {recipe.topk_backend if b == "*" else b: v for b, v in recipe.cudagraph_bytes.items()}
    pool_backend = backend if backend in measured else next((b for b in measured if b in graph_logits), None)
    if pool_backend is None:
        besides_logits = estimates.CUDAGRAPH_BESIDES_LOGITS
        return estimated(besides_logits.value + graph_logits[backend], besides_logits)
    # >= logits: check_graph_pools
    pool = measured[pool_backend] - logits_then[pool_backend] - floor_then_bytes + graph_logits[backend] + floor_bytes
    if pool_backend != backend:
        return Term(pool, "derived", f"the pool measured for {pool_backend}, with {backend}'s graph logits in place of "
                                     f"{pool_backend}'s")
    if pool != measured[backend]:
        return Term(pool, "derived", f"measured at {recipe.measured_on.shape_change(recipe)}; its graph logits and "
                                     f"per-graph floors re-derived at this shape, the rest of the pool kept")
    return Term(pool, "measured", "the recipe's memory block")


# 7. KV bytes, 8. blocks and 9. tokens ---------------------------------------------------------------------------

def kv_cache_bytes(recipe: Recipe, requested: int, weights: int, peak: int, non_torch: int, graphs: int) -> int:
    """KV bytes = requested - weights - peak activation - non-torch - CUDA graphs (vllm/v1/worker/gpu_worker.py
    determine_available_memory; `graphs` is 0 where this vLLM subtracts no estimate); --kv-cache-memory-bytes
    replaces it all."""
    if recipe.kv_cache_memory_bytes is not None:
        return recipe.kv_cache_memory_bytes
    return max(requested - weights - peak - non_torch - graphs, 0)


@dataclass(frozen=True)
class Sizing:
    """The KV cache on one side of vLLM #62860 (or of the model's own reservation): what the profile run reserves for
    the indexer's logits, the peak it raises, and the KV bytes, blocks and tokens that leaves."""
    reserves_decode_logits: bool
    reservation: Reservation
    peak_activation_bytes: int  # the base peak, raised by the reservation: what vLLM's log prints
    kv_cache_bytes: int
    kv_cache_blocks: int
    kv_cache_tokens: int
    max_concurrency: float  # KV tokens / max-model-len

    @property
    def reserved_bytes(self) -> int:
        return self.reservation.bytes


def sizing(recipe: Recipe, memory: RankMemory, reserves_decode_logits: bool, reserved: Reservation, headroom: int,
           subtracted_graph_bytes: int) -> Sizing:
    peak = raised_peak_bytes(memory, reserved.bytes, headroom)
    kv_bytes = kv_cache_bytes(recipe, memory.requested_bytes, memory.weights.bytes, peak, memory.non_torch.bytes,
                              subtracted_graph_bytes) if recipe.num_gpu_blocks_override is None else \
        recipe.num_gpu_blocks_override * memory.kv.block_bytes  # the blocks given, whatever memory is left
    blocks = memory.kv.blocks(kv_bytes)
    tokens = memory.kv.tokens(kv_bytes)
    return Sizing(reserves_decode_logits, reserved, peak, kv_bytes, blocks, tokens,
                  round(tokens / recipe.max_model_len, 2))


# The out-of-memory risk: the room a step has for the decode logits at run time ------------------------------------

# PyTorch's caching allocator rounds every request above 10 MiB up to whole 2 MiB segments (kRoundLarge,
# c10/cuda/CUDACachingAllocator.cpp; vLLM sets no allocator option at run time, vllm==0.33.0
# vllm/v1/worker/gpu_worker.py:420-446 restores its own after loading and profiling): two such requests a decode step,
# the logits and their FP32 copy.
ALLOCATOR_ROUNDING_BYTES = 2 * 2 * MIB


@dataclass(frozen=True)
class OomRisk:
    """Where the profile run does not hold the decode logits, eager, piecewise and mixed steps allocate them at run
    time, from what the KV cache, the CUDA graphs and the buffers made after sizing leave:

        room = total - (KV + weights + base peak + non-torch + graph pool) - KV-init buffers - unprofiled

    In a profiled start KV = requested - weights - (base peak + the reservation's rise) - non-torch - the graph memory
    subtracted, so room = total - requested + rise - (pool - subtracted) - KV-init buffers - unprofiled; with
    kv-cache-memory-bytes the pinned KV takes its place. The edge is room // one decode's logits; the safe count
    keeps a margin below it: the allocator's rounding and the uncertainty of the unprofiled term."""
    room_bytes: int
    held_bytes: int  # KV + weights + base peak + non-torch + graph pool: what a rank holds outside a step's transients
    kv_init_buffers: Term  # buffers the model runner makes after the KV bytes are fixed (kv_init_buffers.py)
    unprofiled: Term  # what else a step finds taken, net of the profile's unused peak: measured from an OOM, or fitted
    margin_bytes: int  # ALLOCATOR_ROUNDING_BYTES + the unprofiled term's uncertainty
    bytes_per_decode: int  # one sequence's (1 + k) rows at the padded width, FP32 copy included
    worst_decodes: int  # the most decodes one step holds: min(max_num_seqs, max_num_batched_tokens // (1 + k))
    max_decodes: int  # the edge: the decodes whose logits fit in the room (OOM above it)
    safe_decodes: int  # those that fit with the margin to spare
    at_risk: bool  # the worst step holds more decodes than fit with the margin; never where the profile holds them


def worst_decodes(recipe: Recipe) -> int:
    """One step schedules at most max_num_seqs requests and max_num_batched_tokens tokens, 1 + k a decode."""
    return min(recipe.max_num_seqs, recipe.max_num_batched_tokens // (1 + recipe.num_speculative_tokens))


def oom(recipe: Recipe, memory: RankMemory, logits: DecodeLogits, reserved: Reservation, kv_bytes: int,
        graph_pool_bytes: int) -> OomRisk:
    kv_init = kv_init_buffer_bytes(recipe, memory.kv)
    unprofiled = memory.unprofiled
    held = kv_bytes + memory.weights.bytes + memory.base_peak.bytes + memory.non_torch.bytes + graph_pool_bytes
    room = recipe.gpu.total_memory_bytes - held - kv_init.bytes - unprofiled.bytes
    margin = ALLOCATOR_ROUNDING_BYTES + unprofiled.uncertainty_bytes
    per_decode = (1 + recipe.num_speculative_tokens) * logits.padded_columns * logits.bytes_per_element
    worst = worst_decodes(recipe)
    max_decodes = max(room, 0) // per_decode
    safe_decodes = max(room - margin, 0) // per_decode
    held_by_profile = reserved.kind in (Reserved.HELD, Reserved.WORKSPACE)
    return OomRisk(room, held, kv_init, unprofiled, margin, per_decode, worst, max_decodes, safe_decodes,
                   not held_by_profile and worst > safe_decodes)


# The plan: every step for each top-k backend ---------------------------------------------------------------------

@dataclass(frozen=True)
class BackendPlan:
    backend: str
    available: bool
    reason: str  # why not available, or a note
    selected: bool  # the recipe's sparse-indexer-topk-backend
    decode_logits: DecodeLogits
    prefill_budget_bytes: int
    cudagraph_logits_rows: int
    cudagraph_logits_bytes: int
    cudagraph: Term
    cudagraph_subtracted_bytes: int  # what KV sizing subtracts for the graphs: the pool, or 0 where vLLM does not
    indexer_headroom_bytes: int
    release: Sizing  # this vLLM's own: what its profile reserves and its log prints
    other: Sizing  # the other side of the fix, for comparison
    oom: OomRisk

    @property
    def with_fix(self) -> Sizing:
        return self.release if self.release.reserves_decode_logits else self.other

    @property
    def reserved_bytes(self) -> int:
        return self.release.reserved_bytes

    @property
    def kv_cache_bytes(self) -> int:
        return self.release.kv_cache_bytes

    @property
    def kv_cache_tokens(self) -> int:
        return self.release.kv_cache_tokens

    @property
    def peak_activation_bytes(self) -> int:
        return self.release.peak_activation_bytes

    @property
    def max_concurrency(self) -> float:
        return self.release.max_concurrency


@dataclass(frozen=True)
class Plan:
    recipe: Recipe
    memory: RankMemory
    cudagraph_estimate: CudagraphEstimate
    backends: list[BackendPlan]

    def backend(self, name: str) -> BackendPlan:
        return next(b for b in self.backends if b.backend == name)


def refusal(recipe: Recipe, key: str, rule: str, reason: str) -> Refusal:
    """A refusal of the release, in its own words and with its source (engine.VLLM_RULES)."""
    return Refusal(key, f"{reason}: {recipe.engine.label} refuses to start ({recipe.engine.sources[rule]})")


def check_indexer_cache_dtype(recipe: Recipe) -> None:
    """An MXFP4 indexer cache runs on the SM10x family only: from 0.22.0 where use_fp4_indexer_cache is set, from 0.28.0
    however the dtype is spelt (engine.py mxfp4_indexer_needs_sm10x). ROCm's own MXFP4 rules are not modelled."""
    checked = recipe.engine.mxfp4_indexer_needs_sm10x
    arch = recipe.gpu.arch
    if checked is None or arch.startswith("gfx") or arch in SM10X or recipe.indexer_kv_dtype != "mxfp4":
        return
    if checked == "use_fp4_indexer_cache" and "use_fp4_indexer_cache" not in recipe.given:
        return
    key = "attention-config." + checked
    raise refusal(recipe, key, "mxfp4_indexer_needs_sm10x", f"mxfp4 on {recipe.gpu.name} ({arch}): vLLM's MXFP4 "
                                                            f"indexer cache needs Blackwell datacenter GPUs (sm_10x)")


def check_v41_cache_dtype(recipe: Recipe) -> None:
    """DeepSeek-V4.1's attention resolves the cache dtype by its layout: the packed records take the release's dtypes
    (v41_packed_cache_dtypes), plain rows none of the packed names (0.31.0+), and nvfp4_ds_mla needs the SM10x family's
    MXFP8 records (0.31.0+)."""
    engine, dtype = recipe.engine, recipe.cache_dtype
    if v41_packed(recipe):
        dtypes, reason = engine.v41_packed_cache_dtypes
        if dtype not in dtypes:
            raise refusal(recipe, "kv-cache-dtype", "v41_packed_cache_dtypes", reason.format(dtype=dtype))
        if dtype == "nvfp4_ds_mla" and engine.v41_nvfp4_needs_sm10x and recipe.gpu.arch not in SM10X:
            raise refusal(recipe, "kv-cache-dtype", "v41_nvfp4_needs_sm10x",
                          f"nvfp4_ds_mla on {recipe.gpu.name}: the V4.1 records it needs FlashMLA decodes only on "
                          f"SM100")
    elif dtype.endswith("_ds_mla") and engine.v41_plain_rows_refuse_packed:
        raise refusal(recipe, "kv-cache-dtype", "v41_plain_rows_refuse_packed",
                      f"{dtype} is a packed FlashMLA DeepSeek V4.1 KV cache format; the selected backend stores plain "
                      f"KV rows")


def check_v41_pipeline_stages(recipe: Recipe) -> None:
    """DeepSeek-V4.1's compressed layers read the compressed KV of the latest kv-source layer at or below them, which
    must be built on the same pipeline stage (vllm==0.33.0 vllm/models/deepseek_v41/attention.py:600-613, the same
    since vllm==0.30.0 :493-506): a stage with a compressed layer whose source lies on an earlier stage is refused."""
    model = recipe.model
    for stage in stage_layers(model.num_layers, recipe.pipeline_parallel_size)[1:]:
        for layer in stage:
            source = max(s for s in model.kv_source_layers if s <= layer)
            if model.compress_ratios[layer] > 0 and source < stage.start:
                raise Refusal("pipeline-parallel-size", f"{recipe.pipeline_parallel_size}: {recipe.engine.label} "
                              f"refuses to start: the stage of layers {stage.start}-{stage.stop - 1} holds layer "
                              f"{layer}, whose compressed KV is layer {source}'s, on the stage before: 'PP splits "
                              f"inside a v4.1 kv-sharing group are not supported.' (vllm==0.33.0 "
                              f"vllm/models/deepseek_v41/attention.py:600-613)")


def check_cache_dtype(recipe: Recipe, memory: RankMemory) -> None:
    """vLLM starts only where the sparse-MLA backend runs on the GPU and takes the KV-cache dtype (DeepSeek-V4's own
    attention resolves its backend and fp8 layout itself, and its FlashMLA layout takes only fp8; V4.1's by its
    layout), and where the indexer's cache dtype runs on the GPU."""
    check_indexer_cache_dtype(recipe)
    if recipe.model.family == "deepseek_v41":
        check_v41_cache_dtype(recipe)
    if recipe.model.family == "deepseek_v4":
        flashmla = recipe.gpu.arch in V4_FLASHMLA_ARCHS and recipe.attention_backend != "FLASHINFER_MLA_SPARSE_DSV4"
        ds_mla_layout = flashmla or recipe.gpu.arch in V4_SM120_ARCHS  # catalog.V4_FLASHMLA_ARCHS
        auto_fp8 = recipe.cache_dtype == "auto" and recipe.engine.v4_auto_cache_dtype_fp8
        if ds_mla_layout and not (recipe.cache_dtype.startswith("fp8") or auto_fp8):
            source = recipe.engine.sources["v4_auto_cache_dtype_fp8"]
            raise Refusal("kv-cache-dtype", f"{recipe.kv_cache_dtype}: {recipe.engine.label} refuses to start: "
                                            f"DeepSeek-V4's attention on {recipe.gpu.name} stores fp8_ds_mla and "
                                            f"takes fp8 only ({source}): give kv-cache-dtype: fp8")
    if recipe.model.family not in ("mla", "glm5next"):
        return
    backend = memory.sparse_mla_backend
    refused = sparse_mla_refusal(recipe, backend)
    if refused is not None:  # a backend named: vLLM's selector refuses it
        key, reason = refused
        key = key if key == "kv-cache-dtype" else "attention-backend"
        raise Refusal(key, f"{recipe.cache_dtype} on {recipe.gpu.name} ({recipe.gpu.arch}): {recipe.engine.label} "
                           f"refuses to start: its sparse-MLA backend {reason}")
    dcp = recipe.decode_context_parallel_size
    if backend == "FLASHMLA_SPARSE" and dcp > 1 and not recipe.quantized_cache and \
            recipe.engine.flashmla_sparse_dcp_needs_quantized:
        raise refusal(recipe, "decode-context-parallel-size", "flashmla_sparse_dcp_needs_quantized",
                      f"{dcp} with a {recipe.cache_dtype} cache on FLASHMLA_SPARSE: DCP for FlashMLA sparse requires an "
                      f"fp8_ds_mla kv-cache; the bf16 sparse path is not supported under DCP")


def check_weights_fit(recipe: Recipe, memory: RankMemory) -> None:
    """Weights that leave no room refuse the plan, unless they are an estimate and the KV memory is pinned
    (kv-cache-memory-bytes): then vLLM's own figure for them does not enter the KV cache."""
    pinned = recipe.kv_cache_memory_bytes is not None and memory.weights.provenance != "measured"
    if not pinned and memory.weights.bytes + memory.non_torch.bytes >= memory.requested_bytes:
        key = "memory.weights_gib" if memory.weights.provenance == "measured" else "model"
        raise RecipeError(key, f"{recipe.model.name} needs {memory.weights.bytes / GIB:.1f} GiB of weights per rank; "
                               f"{recipe.gpu.name} at gpu-memory-utilization {recipe.gpu_memory_utilization} allows "
                               f"{memory.requested_bytes / GIB:.1f} GiB (shard it: tensor-parallel-size, "
                               f"enable-expert-parallel)")


def check_graph_pools(recipe: Recipe, logits_then: dict[str, int]) -> None:
    """A measured graph pool holds at least its FULL decode graphs' logits at the shape it was measured at."""
    for backend, pool in recipe.cudagraph_bytes.items():
        needed = logits_then.get(recipe.topk_backend if backend == "*" else backend, 0)
        if pool < needed:
            name = "memory.cudagraph_gib" + ("" if backend == "*" else f".{backend}")
            raise RecipeError(name, f"{pool / GIB:.2f} GiB is less than the {needed / GIB:.2f} GiB of indexer logits "
                                    f"its largest FULL decode graph holds: not a measurement of this recipe")


def backend_plan(recipe: Recipe, memory: RankMemory, backend: Backend, logits: dict[str, DecodeLogits],
                 graph_rows: int, graph_logits: dict[str, int], logits_then: dict[str, int],
                 floors: tuple[int, int]) -> BackendPlan:
    """The doc's steps for one top-k backend, on this release's side of the fix and on the other; floors: the graph
    estimate's per-graph floors here and where the memory block was measured."""
    dl = logits[backend.name]
    headroom = indexer_headroom(recipe, logits, backend.name)
    graphs = cudagraph_pool(recipe, backend.name, graph_logits, logits_then, *floors)
    subtracted = graphs.bytes if cudagraphs_subtracted(recipe) else 0
    sides = {reserves: sizing(recipe, memory, reserves, reservation(recipe, dl, reserves), headroom, subtracted)
             for reserves in (True, False)}
    release = sides[recipe.reserves_decode_logits]
    risk = oom(recipe, memory, dl, release.reservation, release.kv_cache_bytes, graphs.bytes)
    reason = availability(recipe, backend)
    note = backend.note.format(cooperative_rows=recipe.engine.cooperative_topk_max_rows)
    return BackendPlan(
        backend=backend.name, available=reason is None, reason=reason or note,
        selected=backend.name == recipe.topk_backend,
        decode_logits=dl, prefill_budget_bytes=recipe.prefill_budget_bytes,
        cudagraph_logits_rows=graph_rows, cudagraph_logits_bytes=graph_logits[backend.name], cudagraph=graphs,
        cudagraph_subtracted_bytes=subtracted, indexer_headroom_bytes=headroom,
        release=release, other=sides[not recipe.reserves_decode_logits],
        oom=risk)


def plan(recipe: Recipe, only: set[str] | None = None, kv_specs: dict | None = None) -> Plan:
    """Every backend of the recipe's engine through the doc's steps, or those in `only` (and auto, which the report
    compares them with): a sweep plans just the backends it shows, with the KV-cache specs it has built so far. A
    max-model-len of auto is first fitted, as vLLM fits it."""
    if recipe.fit_max_model_len:
        recipe = fitted(recipe, kv_specs)
    memory = rank_memory(recipe, kv_specs)
    check_cache_dtype(recipe, memory)
    if recipe.model.family == "deepseek_v41" and recipe.engine.name == "vllm":
        check_v41_pipeline_stages(recipe)
    check_weights_fit(recipe, memory)
    backends = engine_backends(recipe)
    logits = backend_logits(recipe, backends)
    graph_logits = graph_logits_bytes(recipe, logits)
    then = recipe.measured_on
    logits_then = graph_logits if then is None else graph_logits_bytes(then, backend_logits(then, backends))
    check_graph_pools(recipe, logits_then)
    graph_rows = cudagraph_logits_rows(recipe)
    estimate = cudagraph_estimate(recipe)
    floors = (estimate.floor_bytes, estimate.floor_bytes if then is None else cudagraph_estimate(then).floor_bytes)
    shown = [b for b in backends if only is None or b.name in only or b.name == "auto"]
    return Plan(recipe, memory, estimate, [backend_plan(recipe, memory, b, logits, graph_rows, graph_logits,
                                                        logits_then, floors) for b in shown])


# vLLM's fit of max-model-len -1 (auto): the profile runs at the model's maximum; where one request of that does not
# fit the KV memory it left, the longest length whose request does, by bisection (the same in every release modelled).
FIT_RULE = "vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:1337-1405"  # vllm==0.19.0 kv_cache_utils.py:1405-1460


def fitted(recipe: Recipe, kv_specs: dict | None) -> Recipe:
    """The recipe at the max-model-len vLLM fits for -1 (auto): the model's maximum where one request of it fits
    the KV memory the profile at that length leaves (with the recipe's top-k backend, else auto), else the longest
    length whose request fits it. Noted in the recipe, with the rule."""
    at_most = replace(recipe, fit_max_model_len=False)
    profiled = plan(at_most, kv_specs=kv_specs)
    runs = [b for b in profiled.backends if b.available] or profiled.backends  # none runs here: the plan says why
    backend = next((b for b in runs if b.selected), next((b for b in runs if b.backend == "auto"), runs[0]))
    available = backend.kv_cache_bytes
    mla = profiled.memory.sparse_mla_backend

    def too_long(length: int) -> bool:
        return kv_spec(replace(at_most, max_model_len=length), mla, kv_specs).request_bytes > available

    longest = recipe.max_model_len
    good = largest(too_long, 1, longest)
    if good == longest:
        return replace(at_most, notes=(*recipe.notes, f"max-model-len auto: the model's maximum, {longest:,}, fits "
                                                      f"({FIT_RULE})"))
    if good is None:  # vLLM stops: "Cannot auto-fit max_model_len", and the plan refuses
        return replace(at_most, notes=(*recipe.notes, f"max-model-len auto: not one token fits the KV memory, so vLLM "
                                                      f"stops ({FIT_RULE})"))
    return replace(at_most, max_model_len=good, notes=(
        *recipe.notes, f"max-model-len auto: vLLM fits it to {good:,}, the longest whose one request fits the "
                       f"{available / GIB:.2f} GiB its profile at {longest:,} leaves ({FIT_RULE})"))


# Defaults that can decide the answer ------------------------------------------------------------------------------

# The values a deployment plausibly has instead of each default.
PLAUSIBLE_DEFAULTS = {
    "max_num_batched_tokens": (2048, 8192, 16384),
    "async_scheduling": (True, False),
    "kv_cache_dtype": ("auto", "fp8"),
}
MOVES_THE_ANSWER = 0.01


@dataclass(frozen=True)
class DefaultImpact:
    field: str  # a recipe field the recipe left to its default
    value: object  # the default taken
    other: object  # a plausible other value
    tokens_change: float  # the selected backend's KV tokens there against here, as a fraction


def default_impacts(recipe: Recipe) -> list[DefaultImpact]:
    """Each default the recipe leaves out that moves the KV tokens by more than 1 % between its plausible values."""
    tokens = plan(recipe, {recipe.topk_backend}).backend(recipe.topk_backend).kv_cache_tokens
    found = []
    for field_name, values in PLAUSIBLE_DEFAULTS.items():
        value = getattr(recipe, field_name)
        if field_name in recipe.given or value not in values:
            continue
        for other in (v for v in values if v != value):
            changed = {field_name: other} | ({"cache_dtype": other} if field_name == "kv_cache_dtype" else {})
            try:
                other_tokens = plan(replace(recipe, **changed), {recipe.topk_backend}).backend(
                    recipe.topk_backend).kv_cache_tokens
            except RecipeError:  # a value this deployment cannot take
                continue
            change = other_tokens / tokens - 1 if tokens else 0.0
            if abs(change) > MOVES_THE_ANSWER:
                found.append(DefaultImpact(field_name, value, other, round(change, 4)))
    return found
