"""The capacity model of docs/design.md, as pure arithmetic over a Deployment's values and a rank's memory terms.

Reads in the design's order, one step a section: the decode logits' rows, width and bytes per element ("The decode
logits"), the profile run's reservation, the peak it raises, the CUDA graphs, the KV bytes, and the blocks and tokens
they hold ("How vLLM sizes the KV cache"), then the out-of-memory risk and plan(), which strings the steps together for
each top-k backend. What vLLM decides before it counts memory (the "Top-k backends", the sparse-MLA backend, the
KV-cache spec) and every refusal of vLLM's at start-up are deployment.py's resolve(); the terms its profile measures are
memory_terms.py's; the KV bytes per token ("KV-cache groups") are kv_cache/'s; planning.py walks a recipe through them.
Nothing here reads the recipe, compares a release or raises: bytes and tokens are integers.
"""

import math
from dataclasses import dataclass
from enum import Enum

from dsa_kvcalc import estimates
from dsa_kvcalc.catalog import STRIDE_ALIGNMENT_BYTES, Backend, Layout, Rows
from dsa_kvcalc.deployment import Deployment, LogitsShape
from dsa_kvcalc.estimates import Term, estimated
from dsa_kvcalc.graphs import CudagraphEstimate
from dsa_kvcalc.kv_cache import round_up
from dsa_kvcalc.memory_terms import RankMemory
from dsa_kvcalc.units import MIB

DTYPE_BYTES = {"bf16": 2, "fp32": 4}
FP32_BYTES = 4


# 1. Rows: the decode worst case ---------------------------------------------------------------------------------

def decode_rows(shape: LogitsShape, rule: Rows) -> int:
    """rows = min(max_num_seqs, max_num_batched_tokens) x (1 + num_speculative_tokens)   (vLLM #62860)
    rows = min(max_num_seqs x (1 + num_speculative_tokens), max_num_batched_tokens)     (the kpool indexer's profile
           branch, vllm==0.30.0 vllm/model_executor/layers/sparse_attn_indexer_kpool.py:312-321)
    rows = max_num_seqs x (1 + nextn)                                                     (DeepInfer's profile run)"""
    seqs, tokens, per_seq = shape.max_num_seqs, shape.max_num_batched_tokens, 1 + shape.num_speculative_tokens
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


def decode_logits(shape: LogitsShape, topk_reads_bf16: bool) -> DecodeLogits:
    """[rows, padded(max_model_len // ratio)] in DeepGEMM's dtype, plus the FP32 copy where the top-k reads FP32
    (deployment.reads_bf16)."""
    layout = shape.layout
    columns = shape.max_model_len // shape.indexer_width_ratio
    needs_copy = layout.logits_dtype != "fp32" and not topk_reads_bf16
    return DecodeLogits(shape.rows_rule, decode_rows(shape, shape.rows_rule), columns, width_multiple(layout),
                        stride_columns(layout), padded_columns(columns, layout), layout.logits_dtype,
                        DTYPE_BYTES[layout.logits_dtype], FP32_BYTES if needs_copy else 0)


def backend_logits(shape: LogitsShape, backends: tuple[Backend, ...]) -> dict[str, DecodeLogits]:
    """Each backend's decode logits: one computation per way the top-k reads them."""
    by_reader = {reads: decode_logits(shape, reads) for reads in {b.name in shape.bf16_readers for b in backends}}
    return {b.name: by_reader[b.name in shape.bf16_readers] for b in backends}


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


def reservation(deployment: Deployment, budget: int, logits: DecodeLogits, reserves_decode_logits: bool) -> Reservation:
    """reserved = max(prefill_budget, rows x padded_width x bytes_per_element)   (with #62860; without: the budget)
    reserved = max(prefill_budget, rows x width x 4)        (the kpool indexer's own: FP32, unpadded)
    DeepInfer's profile run holds the decode logits themselves; ROCm's locked workspace holds them on top of the
    budget. Both are the same on either side of #62860. ROCm's workspace: its rows (deployment.py
    rocm_workspace_rows) at max_model_len FP32 columns, 32 GiB at 8192 x 1M (vLLM issue #55132). budget: the prefill
    logits budget the profile allocates (memory_terms.profile_budget_bytes)."""
    workspace = deployment.rocm_workspace_rows * deployment.logits_shape.max_model_len * FP32_BYTES
    unpadded_fp32 = logits.rows * logits.columns * FP32_BYTES
    if deployment.profile_holds_decode_logits:
        return Reservation(Reserved.HELD, budget, logits.bytes, logits.bytes)
    if workspace:
        return Reservation(Reserved.WORKSPACE, budget, workspace, budget + workspace)
    if reserves_decode_logits and deployment.reserves_unpadded_fp32:
        return Reservation(Reserved.UNPADDED_FP32, budget, unpadded_fp32, max(budget, unpadded_fp32))
    if reserves_decode_logits:
        return Reservation(Reserved.DECODE_LOGITS, budget, logits.bytes, max(budget, logits.bytes))
    return Reservation(Reserved.BUDGET, budget, 0, budget)


# 5. Peak: the activation peak the reservation raises ------------------------------------------------------------

def indexer_headroom(measured: dict[str, int], logits: dict[str, DecodeLogits], backend: str, budget: int) -> int:
    """How far the run's global peak sits above what is live inside the indexer when the reservation is made
    (global_peak - indexer_live): the reservation raises the peak only by what it adds beyond that. Measured for this
    backend, or for one with the same bytes per element (the same working set), or for every backend ("*"); else the
    prefill budget the base peak holds, so that the reservation raises the peak by all it adds beyond that budget.
    Never below it: the base peak already holds it (budget: memory_terms.peak_budget_bytes)."""
    same_working_set = [bytes_ for name, bytes_ in measured.items()
                        if name in logits and logits[name].bytes_per_element == logits[backend].bytes_per_element]
    headroom = measured.get(backend, same_working_set[0] if same_working_set else measured.get("*", 0))
    return max(headroom, budget)


def raised_peak_bytes(memory: RankMemory, reserved: int, headroom: int) -> int:
    """peak = base peak + max(0, reserved - indexer headroom): the reservation stacks on what is live inside the
    indexer, not on the run's global peak."""
    return memory.base_peak.bytes + max(0, reserved - headroom)


# 6. Graphs: the decode logits vLLM's FULL graphs hold, and the pool it subtracts for them (which graphs it captures
# and how it estimates them is deployment.py's, graphs.py) ----------------------------------------------------------

def graph_logits_bytes(rows: int, logits: dict[str, DecodeLogits]) -> dict[str, int]:
    """Per backend, the indexer logits the graph pool holds: the largest FULL decode graph's rows at the padded width."""
    return {name: rows * dl.padded_columns * dl.bytes_per_element for name, dl in logits.items()}


def cudagraph_pool(deployment: Deployment, backend: str, graph_logits: dict[str, int], logits_then: dict[str, int],
                   floor_bytes: int, floor_then_bytes: int) -> Term:
    """graphs = graph logits (the largest FULL decode graph's rows) + the rest, which a measured figure holds with
    the estimate's per-graph floors (floor_bytes: 0 where this vLLM subtracts no estimate). A figure measured for one
    backend carries over to the others, and one measured at another shape (logits_then, floor_then_bytes) to this one:
    the rest stays, the logits and the floors are re-derived. A measured figure is what vLLM subtracted: its estimate
    where it makes one (calibrate writes the log's). Without one, estimates.CUDAGRAPH_BESIDES_LOGITS stands for all
    besides the logits, floors included: the logs it rests on print whole estimates."""
    if not deployment.captures_graphs:
        return Term(0, "derived", "no CUDA graphs (enforce-eager or cudagraph_mode NONE)")
    measured = deployment.cudagraph_pool_bytes
    pool_backend = backend if backend in measured else next((b for b in measured if b in graph_logits), None)
    if pool_backend is None:
        besides_logits = estimates.CUDAGRAPH_BESIDES_LOGITS
        return estimated(besides_logits.value + graph_logits[backend], besides_logits)
    # >= logits: planning.check_graph_pools
    pool = measured[pool_backend] - logits_then[pool_backend] - floor_then_bytes + graph_logits[backend] + floor_bytes
    if pool_backend != backend:
        return Term(pool, "derived", f"the pool measured for {pool_backend}, with {backend}'s graph logits in place of "
                                     f"{pool_backend}'s")
    if pool != measured[backend]:
        return Term(pool, "derived", f"measured at {deployment.measured_shape_change}; its graph logits and "
                                     f"per-graph floors re-derived at this shape, the rest of the pool kept")
    return Term(pool, "measured", "the recipe's memory block")


# 7. KV bytes, 8. blocks and 9. tokens ---------------------------------------------------------------------------

def kv_cache_bytes(pinned: int | None, requested: int, weights: int, peak: int, non_torch: int, graphs: int) -> int:
    """KV bytes = requested - weights - peak activation - non-torch - CUDA graphs (vllm/v1/worker/gpu_worker.py
    determine_available_memory; `graphs` is 0 where this vLLM subtracts no estimate); --kv-cache-memory-bytes
    (pinned) replaces it all."""
    if pinned is not None:
        return pinned
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


def sizing(deployment: Deployment, memory: RankMemory, reserves_decode_logits: bool, reserved: Reservation,
           headroom: int, subtracted_graph_bytes: int) -> Sizing:
    peak = raised_peak_bytes(memory, reserved.bytes, headroom)
    blocks_given = deployment.num_gpu_blocks_override
    kv_bytes = kv_cache_bytes(deployment.kv_cache_memory_bytes, memory.requested_bytes, memory.weights.bytes, peak,
                              memory.non_torch.bytes, subtracted_graph_bytes) if blocks_given is None else \
        blocks_given * memory.kv.block_bytes  # the blocks given, whatever memory is left
    blocks = memory.kv.blocks(kv_bytes)
    tokens = memory.kv.tokens(kv_bytes)
    return Sizing(reserves_decode_logits, reserved, peak, kv_bytes, blocks, tokens,
                  round(tokens / deployment.logits_shape.max_model_len, 2))


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


def worst_decodes(shape: LogitsShape) -> int:
    """One step schedules at most max_num_seqs requests and max_num_batched_tokens tokens, 1 + k a decode."""
    return min(shape.max_num_seqs, shape.max_num_batched_tokens // (1 + shape.num_speculative_tokens))


def oom(shape: LogitsShape, memory: RankMemory, logits: DecodeLogits, reserved: Reservation, kv_bytes: int,
        graph_pool_bytes: int) -> OomRisk:
    kv_init = memory.kv_init_buffers
    unprofiled = memory.unprofiled
    held = kv_bytes + memory.weights.bytes + memory.base_peak.bytes + memory.non_torch.bytes + graph_pool_bytes
    room = memory.total_bytes - held - kv_init.bytes - unprofiled.bytes
    margin = ALLOCATOR_ROUNDING_BYTES + unprofiled.uncertainty_bytes
    per_decode = (1 + shape.num_speculative_tokens) * logits.padded_columns * logits.bytes_per_element
    worst = worst_decodes(shape)
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
    deployment: Deployment
    memory: RankMemory
    backends: list[BackendPlan]
    measured_graph_logits: dict[str, int]  # per backend, the graph logits where the memory block was measured

    @property
    def recipe(self):
        """The recipe planned, for the report: the arithmetic here never reads it."""
        return self.deployment.recipe

    @property
    def cudagraph_estimate(self) -> CudagraphEstimate:
        return self.deployment.cudagraph_estimate

    def backend(self, name: str) -> BackendPlan:
        return next(b for b in self.backends if b.backend == name)


def measured_graph_logits(deployment: Deployment) -> dict[str, int]:
    """Per backend, the graph logits at the shape the recipe's memory block was measured at: what its graph pools
    hold at least (planning.check_graph_pools), and what a pool carried from there sheds."""
    measured = deployment.measured
    return graph_logits_bytes(measured.cudagraph_logits_rows, backend_logits(measured.logits_shape, deployment.backends))


def backend_plan(deployment: Deployment, memory: RankMemory, backend: Backend, logits: dict[str, DecodeLogits],
                 graph_logits: dict[str, int], logits_then: dict[str, int]) -> BackendPlan:
    """The doc's steps for one top-k backend, on this release's side of the fix and on the other."""
    dl = logits[backend.name]
    headroom = indexer_headroom(deployment.indexer_headroom_bytes, logits, backend.name, memory.peak_budget_bytes)
    floors = (deployment.cudagraph_estimate.floor_bytes, deployment.measured.cudagraph_floor_bytes)
    graphs = cudagraph_pool(deployment, backend.name, graph_logits, logits_then, *floors)
    subtracted = graphs.bytes if deployment.cudagraph_estimate.subtracted else 0
    sides = {reserves: sizing(deployment, memory, reserves,
                              reservation(deployment, memory.profile_budget_bytes, dl, reserves), headroom, subtracted)
             for reserves in (True, False)}
    release = sides[deployment.reserves_decode_logits]
    risk = oom(deployment.logits_shape, memory, dl, release.reservation, release.kv_cache_bytes, graphs.bytes)
    return BackendPlan(
        backend=backend.name, available=backend.name in deployment.available,
        reason=deployment.reasons[backend.name],
        selected=backend.name == deployment.topk_backend,
        decode_logits=dl, prefill_budget_bytes=deployment.prefill_budget_bytes,
        cudagraph_logits_rows=deployment.cudagraph_logits_rows, cudagraph_logits_bytes=graph_logits[backend.name],
        cudagraph=graphs, cudagraph_subtracted_bytes=subtracted, indexer_headroom_bytes=headroom,
        release=release, other=sides[not deployment.reserves_decode_logits],
        oom=risk)


def plan(deployment: Deployment, memory: RankMemory, only: set[str] | None = None) -> Plan:
    """Every backend of the deployment's engine through the doc's steps, or those in `only` (and auto, which the
    report compares them with)."""
    logits = backend_logits(deployment.logits_shape, deployment.backends)
    graph_logits = graph_logits_bytes(deployment.cudagraph_logits_rows, logits)
    logits_then = measured_graph_logits(deployment)
    shown = [b for b in deployment.backends if only is None or b.name in only or b.name == "auto"]
    return Plan(deployment, memory, [backend_plan(deployment, memory, b, logits, graph_logits, logits_then)
                                     for b in shown], logits_then)
