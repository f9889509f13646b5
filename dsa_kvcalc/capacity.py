"""The capacity model of shared/design/capacity-model.md, as pure arithmetic over a validated Recipe.

Reads top to bottom like the design doc: (1) the indexer's decode logits (the doc's section 1), (2) which top-k
backends run (section 2), (3) the memory terms vLLM's profile measures and (4) the steps of KV-cache sizing for one
backend, before and after vLLM PR #62860 (section 3), and plan(), which strings them together. The KV bytes per
token (section 4) are kv_cache.py's. Bytes and tokens are integers.
"""

import math
from dataclasses import dataclass, replace

from dsa_kvcalc import estimates, kv_cache
from dsa_kvcalc.engine import ALL, MTP_METHODS, release_tuple
from dsa_kvcalc.catalog import SPARSE_MLA_CACHE_DTYPES, BACKENDS, STRIDE_ALIGNMENT_BYTES, Backend, Layout
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.kv_cache import KvSpec
from dsa_kvcalc.recipe import Recipe, RecipeError

DTYPE_BYTES = {"bf16": 2, "fp32": 4}
FP32_BYTES = 4


def align(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# 1. Decode logits of the DSA indexer -------------------------------------------------------------------------

def stride_columns(layout: Layout) -> int:
    """Logits columns in one 1024-byte step of the row stride."""
    return STRIDE_ALIGNMENT_BYTES // DTYPE_BYTES[layout.logits_dtype]


def padded_columns(columns: int, layout: Layout) -> int:
    """DeepGEMM allocates [rows, padded] and returns a view of width `columns`: the row stride is `padded`."""
    if layout.stride_rule == "lcm":
        return align(columns, math.lcm(layout.split_columns, stride_columns(layout)))
    if layout.stride_rule == "split":
        return align(columns, layout.split_columns)
    return align(align(columns, layout.split_columns), stride_columns(layout))


@dataclass(frozen=True)
class DecodeLogits:
    rows: int
    columns: int  # the view's width: the keys the indexer scores (decode_logits)
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


def decode_rows(recipe: Recipe) -> int:
    """rows = min(max_num_seqs, max_num_batched_tokens) x (1 + num_speculative_tokens)   (vLLM #62860)
    rows = max_num_seqs x (1 + nextn)                                                     (DeepInfer's profile run)"""
    seqs = recipe.max_num_seqs
    if recipe.engine.rows_capped_by_batched_tokens:
        seqs = min(seqs, recipe.max_num_batched_tokens)
    return seqs * (1 + recipe.num_speculative_tokens)


def reads_bf16(recipe: Recipe, backend: Backend) -> bool:
    """The one predicate shared by the runtime upcast and the reservation: does the top-k read BF16 directly?
    DeepSelect (and DeepInfer's own top-k) do, except under decode context parallelism (DCP merges need FP32)."""
    return backend.reads_bf16 and recipe.decode_context_parallel_size == 1


def decode_logits(recipe: Recipe, topk_reads_bf16: bool, rows: int) -> DecodeLogits:
    """[rows, padded(max_model_len // ratio)] in DeepGEMM's dtype, plus the FP32 copy where the top-k reads FP32."""
    layout = recipe.layout
    columns = recipe.max_model_len // recipe.indexer_width_ratio
    needs_copy = layout.logits_dtype != "fp32" and not topk_reads_bf16
    return DecodeLogits(rows, columns, padded_columns(columns, layout), layout.logits_dtype,
                        DTYPE_BYTES[layout.logits_dtype], FP32_BYTES if needs_copy else 0)


# 2. Top-k backends ---------------------------------------------------------------------------------------------

def engine_backends(recipe: Recipe) -> list[Backend]:
    return [b for b in BACKENDS if recipe.engine.name in b.engines]


def availability(recipe: Recipe, backend: Backend) -> str | None:
    """None when the backend runs on this recipe's engine, GPU and model, else why not."""
    if recipe.engine.name not in backend.engines:
        return f"a {'/'.join(backend.engines)} backend; this recipe runs {recipe.engine.label}"
    if not recipe.engine.topk_backend_flag and backend.name != "auto":
        return f"{recipe.engine.label} has no --sparse-indexer-topk-backend (vLLM 0.30.0+): its built-in chain runs"
    if recipe.gpu.arch not in backend.archs:
        return f"needs {'/'.join(backend.archs)}; {recipe.gpu.name} is {recipe.gpu.arch}"
    if backend.topk is not None and recipe.model.index_topk not in backend.topk:
        supported = f"<= {backend.topk[-1]}" if len(backend.topk) > 8 else "/".join(map(str, backend.topk))
        return f"index_topk {recipe.model.index_topk} not supported ({supported})"
    return None


# 3. The memory terms of one rank ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    bytes: int
    provenance: str  # measured (the recipe's memory block, a log), derived (config and cited rule, or a measured
    # term carried over), fitted or estimated (estimates.py)
    source: str


def term(recipe: Recipe, name: str, estimate) -> Term:
    """The memory block's figure for a term, else plan's estimate (estimate: recipe -> Term). memory.rest marks the one
    figure that is what a measured sum leaves after plan's estimates of the others: as uncertain as they are. A figure
    measured at another shape (the recipe file's, before --set or a sweep's point) is carried by plan's estimate of
    the change: measured + estimate here - estimate there."""
    given = getattr(recipe, f"{name}_bytes")
    if given is None:
        return estimate(recipe)
    if recipe.memory_rest == name:
        return Term(given, "estimated", "the recipe's memory block: what a measured sum leaves after plan's estimates "
                                        "of the other terms (memory.rest)")
    then = recipe.measured_on
    change = 0 if then is None else estimate(recipe).bytes - estimate(then).bytes
    if not change:
        return Term(given, "measured", "the recipe's memory block")
    return Term(given + change, "derived", f"measured at {then.shape_change(recipe)}; carried here by plan's estimate "
                                           f"of the change ({change / GIB:+.2f} GiB)")


def estimated(value: int, figure: estimates.Figure) -> Term:
    return Term(value, figure.provenance, figure.basis)


@dataclass(frozen=True)
class RankMemory:
    requested_bytes: int  # total x gpu-memory-utilization
    weights: Term
    peak_activation: Term  # the dummy run's torch peak with only the prefill logits budget reserved
    non_torch: Term
    kv: KvSpec
    kv_provenance: Term  # bytes of one request of max_model_len, and where the spec comes from
    sparse_mla_backend: str


def weights_estimate(recipe: Recipe) -> Term:
    """The dense part / TP, plus the routed experts / (TP x DP with expert parallelism, else TP)."""
    model, checkpoint = recipe.model, recipe.model.checkpoint
    expert_ranks = recipe.tensor_parallel_size * (recipe.data_parallel_size if recipe.enable_expert_parallel else 1)
    offloaded = model.offloadable_bytes if recipe.engram_cpu_offload else 0
    dense_bytes = checkpoint.value - model.routed_expert_bytes - model.offloadable_bytes
    on_gpu = model.offloadable_bytes - offloaded  # split over the data-parallel ranks (vllm/config/engram.py)
    weights_bytes = (dense_bytes // recipe.tensor_parallel_size + model.routed_expert_bytes // expert_ranks
                     + on_gpu // (recipe.tensor_parallel_size * recipe.data_parallel_size)) \
        // recipe.pipeline_parallel_size  # each stage its share of the layers
    offload = f"; {offloaded / GIB:.1f} GiB of Engram tables in host memory" if offloaded else ""
    return Term(weights_bytes, checkpoint.provenance, f"the checkpoint's dense part / TP + routed experts / "
                                                      f"expert-parallel ranks{offload}; checkpoint: {checkpoint.basis}")


def prefill_workspace_bytes(recipe: Recipe) -> int:
    """The sparse-MLA prefill workspace, one buffer that its largest user sizes (vllm/v1/worker/workspace.py): the
    indexer's K gather, 8 x factor x max_model_len / compress ratio entries of 132 B, or, with an fp8_ds_mla cache,
    FlashMLA-sparse's BF16 gather of factor x max_model_len rows of 576 x 2 B; factor 5, and 2 above 262,144 tokens
    from vLLM 0.32.0 (engine.py sparse_mla_prefill_workspace_factor)."""
    length = recipe.max_model_len
    short, long = recipe.engine.sparse_mla_prefill_workspace_factor
    factor = short if length <= 262_144 else long
    gather_bytes = 8 * factor * length // recipe.model.indexer_logits_ratio * kv_cache.INDEXER_ENTRY_BYTES
    ds_mla = recipe.model.family == "mla" and kv_cache.mla_token_bytes(recipe.cache_dtype, sparse_mla_backend(recipe)) \
        == kv_cache.MLA_FP8_DS_BYTES
    return max(gather_bytes, factor * length * kv_cache.MLA_BF16_BYTES if ds_mla else 0)


def peak_activation_estimate(recipe: Recipe) -> Term:
    """The prefill logits budget + the sparse-MLA prefill workspace + max_num_batched_tokens x hidden x 2 B x
    ACTIVATION_HIDDEN_COPIES."""
    hidden_copies = estimates.ACTIVATION_HIDDEN_COPIES
    hidden_bytes = recipe.max_num_batched_tokens * recipe.model.hidden_size * 2 * hidden_copies.value
    return Term(profile_budget_bytes(recipe) + prefill_workspace_bytes(recipe) + hidden_bytes, hidden_copies.provenance,
                f"the prefill logits budget, the sparse-MLA prefill workspace (derived), and {hidden_copies.basis}")


def non_torch_estimate(recipe: Recipe) -> Term:
    """One process's CUDA context and workspaces, plus the collectives' buffers when TP x DP > 1."""
    single, collectives = estimates.NON_TORCH_SINGLE, estimates.NON_TORCH_COLLECTIVES
    if recipe.tensor_parallel_size * recipe.data_parallel_size == 1:
        return estimated(single.value, single)
    return Term(single.value + collectives.value, "estimated", f"{single.basis}; plus {collectives.basis}")


def sparse_mla_backend(recipe: Recipe) -> str:
    """vLLM's sparse-MLA backend (vllm==0.33.0 vllm/platforms/cuda.py:84-160): the recipe's attention-backend, else
    on SM12x the release's SM12x backend, on SM10x FLASHINFER_MLA_SPARSE for a quantized cache FlashInfer takes (not
    the DS-MLA formats), FLASHMLA_SPARSE elsewhere; ROCM_AITER_MLA_SPARSE on ROCm (vllm/platforms/rocm.py:537-539)."""
    arch = recipe.gpu.arch
    if recipe.attention_backend:
        return recipe.attention_backend
    if arch in ("sm120", "sm121"):
        return recipe.engine.sm12x_sparse_mla_backend
    if arch.startswith("gfx"):
        return "ROCM_AITER_MLA_SPARSE"
    if arch in ("sm100", "sm103") and recipe.quantized_cache and not recipe.cache_dtype.endswith("_ds_mla"):
        return "FLASHINFER_MLA_SPARSE"
    return "FLASHMLA_SPARSE"


def draft_layers(recipe: Recipe) -> int:
    """The draft layers whose caches join the KV cache: all the checkpoint's MTP layers under MTP, whatever k
    (vllm==0.26.0 vllm/models/deepseek_v4/nvidia/mtp.py:174-200), DeepSeek-V4's DSpark drafts under dspark."""
    method = recipe.speculative_method
    if not recipe.num_speculative_tokens:
        return 0
    if method == "dspark":
        return recipe.model.dspark_layers
    return recipe.model.mtp_layers if method is None or method in MTP_METHODS else 0


def concurrent_batches(recipe: Recipe) -> int:
    """The batches in flight whose new tokens a window holds (vllm==0.26.0 vllm/config/vllm.py:512-533): with async
    scheduling PP + 1 on Model Runner V2, 2 on V1 (PP 1), else PP; one before vLLM 0.26.0."""
    stages = recipe.pipeline_parallel_size
    if not recipe.engine.windows_count_concurrent_batches:
        return 1
    if not recipe.async_scheduling:
        return stages
    if on_model_runner_v2(recipe):
        return stages + 1
    return 2 if stages <= 1 else stages


def kv_spec(recipe: Recipe, backend: str) -> KvSpec:
    """The recipe's KV-cache groups (kv_cache.py), with the tokens in flight that windows hold (vLLM 0.26.0+: two
    batches under async scheduling) and the draft tokens multi-layer MTP keeps (0.28.0+)."""
    engine, k = recipe.engine, recipe.num_speculative_tokens
    in_flight = recipe.max_num_batched_tokens * concurrent_batches(recipe)
    multi_layer_mtp = recipe.speculative_method != "dspark" and draft_layers(recipe) > 1 and k > 1
    extra = k - 1 if engine.retains_draft_tokens and multi_layer_mtp else 0
    return kv_cache.spec(recipe, backend, draft_layers(recipe), in_flight, extra)


def kv_provenance(recipe: Recipe, kv: KvSpec) -> Term:
    return Term(kv.request_bytes, "derived", f"{recipe.model.name}'s config ({recipe.model.config_source}) and "
                                             f"{recipe.engine.label}'s KV-cache grouping (kv_cache.py)")


def rank_memory(recipe: Recipe) -> RankMemory:
    backend = sparse_mla_backend(recipe)
    kv = kv_spec(recipe, backend)
    return RankMemory(
        requested_bytes=math.ceil(recipe.gpu.total_memory_bytes * recipe.gpu_memory_utilization),
        weights=term(recipe, "weights", weights_estimate),
        peak_activation=term(recipe, "peak_activation", peak_activation_estimate),
        non_torch=term(recipe, "non_torch", non_torch_estimate),
        kv=kv, kv_provenance=kv_provenance(recipe, kv), sparse_mla_backend=backend)


# 4. KV-cache sizing, step by step ----------------------------------------------------------------------------------

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


def profile_budget_bytes(recipe: Recipe) -> int:
    """The prefill logits budget the profile run allocates: none on ROCm before vLLM 0.23.0, whose profiling branch
    returns at once."""
    if recipe.gpu.arch.startswith("gfx") and recipe.engine.rocm_indexer_workspace == "none":
        return 0
    return recipe.prefill_budget_bytes


def reservation(recipe: Recipe, logits: DecodeLogits, reserves_decode_logits: bool) -> int:
    """reserved = max(prefill_budget, rows x padded_width x bytes_per_element)   (with #62860; without: the budget)
    DeepInfer's profile run holds the decode logits themselves; ROCm's locked workspace holds them on top of the
    budget. Both are the same on either side of #62860."""
    budget = profile_budget_bytes(recipe)
    if recipe.engine.profile_holds_decode_logits:
        return logits.bytes
    workspace = rocm_indexer_workspace_bytes(recipe)
    if workspace:
        return budget + workspace
    if reserves_decode_logits:
        return max(budget, logits.bytes)
    return budget


def indexer_headroom(recipe: Recipe, logits: dict[str, DecodeLogits], backend: str) -> int:
    """How far the run's global peak sits above what is live inside the indexer when the reservation is made
    (global_peak - indexer_live): the reservation raises the peak only by what it adds beyond that. Measured for this
    backend, or for one with the same bytes per element (the same working set), or for every backend ("*"); else the
    prefill budget, so that the reservation raises the peak by all it adds beyond the budget. Never below the budget:
    the base peak already holds it."""
    measured = recipe.indexer_headroom_bytes
    same_working_set = [bytes_ for name, bytes_ in measured.items()
                        if name in logits and logits[name].bytes_per_element == logits[backend].bytes_per_element]
    headroom = measured.get(backend, same_working_set[0] if same_working_set else measured.get("*", 0))
    return max(headroom, recipe.prefill_budget_bytes)


def peak_activation(memory: RankMemory, reserved: int, headroom: int) -> int:
    """peak = base peak + max(0, reserved - indexer headroom): the reservation stacks on what is live inside the
    indexer, not on the run's global peak."""
    return memory.peak_activation.bytes + max(0, reserved - headroom)


def on_grid(size: int, limit: int, interactive: bool) -> bool:
    """vLLM's capture grid up to limit: 1, 2, 4 (every size up to 32 with performance-mode interactivity), multiples
    of 8 below 256, multiples of 16 from 256 (vllm==0.33.0 vllm/config/vllm.py _set_cudagraph_sizes)."""
    small = size <= 32 if interactive else size in (1, 2, 4)
    return 0 < size <= limit and (small or size % (8 if size < 256 else 16) == 0)


def largest_on_grid(at_most: int, limit: int, step: int, interactive: bool) -> int:
    """The largest grid size up to at_most that is a multiple of step (0 if none): a few steps down, never the whole
    grid, however large the limit."""
    size = min(at_most, limit) // step * step
    while size > 0 and not on_grid(size, limit, interactive):
        size -= step
    return size


# vLLM's default largest capture size off SM10x in every release modelled: capture_ceiling_sm10x's value before
# 0.28.0 raised it on SM10x alone (vllm==0.28.0 vllm/config/vllm.py:1936-1943)
DEFAULT_CAPTURE_CEILING = 512


def cudagraph_logits_rows(recipe: Recipe) -> int:
    """Decode rows whose logits the graph pool holds: the largest FULL graph of a uniform decode batch, a multiple of
    1 + k tokens, at most the decode worst case. vLLM captures the given sizes, or its grid up to
    min(max_num_seqs x (1 + k) x 2, ceiling), all at most max_num_batched_tokens, with the sizes each release adds
    (engine.py): max_num_batched_tokens itself, whole requests n x (1 + k) with n on the grid, and max_num_seqs."""
    if recipe.cudagraph_mode not in ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        return 0
    engine, seqs = recipe.engine, recipe.max_num_seqs
    per_seq = 1 + recipe.num_speculative_tokens
    worst, tokens = decode_rows(recipe), recipe.max_num_batched_tokens
    given_limit = recipe.max_cudagraph_capture_size  # None: vLLM's default rule
    interactive = recipe.performance_mode == "interactivity"
    if recipe.cudagraph_capture_sizes:
        largest = min(worst, tokens, tokens if given_limit is None else given_limit)
        return max((size for size in recipe.cudagraph_capture_sizes if size <= largest and size % per_seq == 0),
                   default=0)
    ceiling = engine.capture_ceiling_sm10x if recipe.gpu.arch in ("sm100", "sm103") else DEFAULT_CAPTURE_CEILING
    limit = min(min(seqs * per_seq * 2, ceiling) if given_limit is None else given_limit, tokens)
    candidates = [largest_on_grid(worst, limit, per_seq, interactive)]
    if engine.captures_max_num_batched_tokens and tokens <= min(limit, worst) and tokens % per_seq == 0:
        candidates.append(tokens)
    if given_limit is None and per_seq > 1 and engine.captures_whole_requests:  # n x (1 + k), n on the grid
        requests = min(seqs, ceiling)
        fits = min(limit, worst) // per_seq
        # request_counts: 1, 2, 4, multiples of 8 and 16, whatever the performance mode (vllm==0.29.0
        # vllm/config/vllm.py:2030-2037)
        candidates += [largest_on_grid(fits, requests, 1, False) * per_seq,
                       requests * per_seq if requests <= fits else 0]
    if given_limit is None and per_seq == 1 and engine.captures_max_num_seqs and seqs <= limit:
        candidates.append(seqs)
    return max(candidates)


def graph_logits_bytes(recipe: Recipe, logits: dict[str, DecodeLogits]) -> dict[str, int]:
    """Per backend, the indexer logits the graph pool holds: the largest FULL decode graph's rows at the padded width."""
    rows = cudagraph_logits_rows(recipe)
    return {name: rows * dl.padded_columns * dl.bytes_per_element for name, dl in logits.items()}


def cudagraph_pool(recipe: Recipe, backend: str, graph_logits: dict[str, int], logits_then: dict[str, int]) -> Term:
    """graphs = graph logits (the largest FULL decode graph's rows) + the rest of the pool. A pool measured for one
    backend carries over to the others, and one measured at another shape (logits_then) to this one: the rest stays,
    the logits are re-derived."""
    if recipe.cudagraph_mode == "NONE":
        return Term(0, "derived", "no CUDA graphs (enforce-eager or cudagraph_mode NONE)")
    measured = {recipe.topk_backend if b == "*" else b: v for b, v in recipe.cudagraph_bytes.items()}
    pool_backend = backend if backend in measured else next((b for b in measured if b in graph_logits), None)
    if pool_backend is None:
        besides_logits = estimates.CUDAGRAPH_BESIDES_LOGITS
        return estimated(besides_logits.value + graph_logits[backend], besides_logits)
    pool = measured[pool_backend] - logits_then[pool_backend] + graph_logits[backend]  # >= logits: check_graph_pools
    if pool_backend != backend:
        return Term(pool, "derived", f"the pool measured for {pool_backend}, with {backend}'s graph logits in place of "
                                     f"{pool_backend}'s")
    if logits_then[backend] != graph_logits[backend]:
        return Term(pool, "derived", f"measured at {recipe.measured_on.shape_change(recipe)}; its graph logits "
                                     f"re-derived at this shape, the rest of the pool kept")
    return Term(pool, "measured", "the recipe's memory block")


def on_model_runner_v2(recipe: Recipe) -> bool:
    """Model Runner V2 runs the model by default where the release lists its architecture (engine.py), on ROCm unless
    the release keeps it on V1, and whenever DSpark drafts (which V1 lacks)."""
    engine, architectures = recipe.engine, {ALL, recipe.model.architecture}
    if recipe.speculative_method == "dspark" and engine.dspark_on_model_runner_v2:
        return True
    if recipe.gpu.arch.startswith("gfx") and architectures & engine.rocm_model_runner_v1_architectures:
        return False
    return bool(architectures & engine.model_runner_v2_architectures)


def cudagraphs_subtracted(recipe: Recipe) -> bool:
    """Does this vLLM subtract its CUDA-graph estimate before sizing the KV cache? From v0.20.0
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS), on ROCm from v0.26.0; Model Runner V2 estimates nothing before 0.29.0."""
    engine = recipe.engine
    if not engine.estimates_cudagraphs or (recipe.gpu.arch.startswith("gfx") and not engine.rocm_estimates_cudagraphs):
        return False
    return not on_model_runner_v2(recipe) or engine.model_runner_v2_estimates_cudagraphs


def kv_cache_bytes(recipe: Recipe, requested: int, weights: int, peak: int, non_torch: int, graphs: int) -> int:
    """KV bytes = requested - weights - peak activation - non-torch - CUDA graphs (vllm/v1/worker/gpu_worker.py
    determine_available_memory; graphs only where this vLLM subtracts its estimate); --kv-cache-memory-bytes
    replaces it all."""
    if recipe.kv_cache_memory_bytes is not None:
        return recipe.kv_cache_memory_bytes
    if not cudagraphs_subtracted(recipe):
        graphs = 0
    return max(requested - weights - peak - non_torch - graphs, 0)


@dataclass(frozen=True)
class Sizing:
    """The KV cache on one side of vLLM #62860: what the profile run reserves for the indexer's logits, the peak it
    raises, and the KV bytes and tokens that leaves."""
    reserves_decode_logits: bool
    reserved_bytes: int
    peak_activation_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    max_concurrency: float  # KV tokens / max-model-len


def sizing(recipe: Recipe, memory: RankMemory, reserves_decode_logits: bool, reserved: int, headroom: int,
           graphs: int) -> Sizing:
    peak = peak_activation(memory, reserved, headroom)
    kv_bytes = kv_cache_bytes(recipe, memory.requested_bytes, memory.weights.bytes, peak, memory.non_torch.bytes, graphs)
    tokens = memory.kv.tokens(kv_bytes)
    return Sizing(reserves_decode_logits, reserved, peak, kv_bytes, tokens, round(tokens / recipe.max_model_len, 2))


@dataclass(frozen=True)
class OomRisk:
    """Where the profile run does not hold the decode logits, eager, piecewise and mixed steps allocate them from what
    the KV cache left."""
    free_bytes: int  # assumed: total x (1 - gpu-memory-utilization)
    bytes_per_decode: int  # one sequence's (1 + k) rows at the padded width, FP32 copy included
    max_decodes: int
    at_risk: bool  # on this release, fewer than max-num-seqs concurrent decodes fit


def oom(recipe: Recipe, memory: RankMemory, logits: DecodeLogits) -> OomRisk:
    """Decodes that fit = free at run time // one decode's logits; free = total x (1 - utilisation), assumed."""
    free_bytes = recipe.gpu.total_memory_bytes - memory.requested_bytes
    per_decode = (1 + recipe.num_speculative_tokens) * logits.padded_columns * logits.bytes_per_element
    max_decodes = free_bytes // per_decode
    held = recipe.reserves_decode_logits or recipe.engine.profile_holds_decode_logits or \
        rocm_indexer_workspace_bytes(recipe)
    return OomRisk(free_bytes, per_decode, max_decodes, not held and max_decodes < recipe.max_num_seqs)


@dataclass(frozen=True)
class Workaround:
    """What a release without #62860 lets the user do: raise the prefill logits budget, which its profile run
    reserves, until it covers the decode worst case."""
    prefill_budget_mb: int  # env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB
    sizing: Sizing


def workaround(recipe: Recipe, memory: RankMemory, logits: DecodeLogits, headroom: int, graphs: int) -> Workaround:
    budget_mb = -(-logits.bytes // MIB)
    return Workaround(budget_mb, sizing(recipe, memory, False, budget_mb * MIB, headroom, graphs))


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
    indexer_headroom_bytes: int
    release: Sizing  # this vLLM's own: what its profile reserves and its log prints
    other: Sizing  # the other side of #62860, for comparison
    oom: OomRisk
    workaround: Workaround | None  # where this release is at risk

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
    backends: list[BackendPlan]

    def backend(self, name: str) -> BackendPlan:
        return next(b for b in self.backends if b.backend == name)


NVFP4_DS_MLA_FIRST = "0.30.0"  # vllm==0.30.0 vllm/config/cache.py:48 (vllm==0.29.0 has no nvfp4_ds_mla); SM100 only


def check_cache_dtype(recipe: Recipe, memory: RankMemory) -> None:
    """vLLM starts only where the sparse-MLA backend takes the KV-cache dtype (DeepSeek-V4's own attention resolves
    its fp8 layout itself)."""
    if recipe.model.family != "mla":
        return
    backend = memory.sparse_mla_backend
    dtypes, source = SPARSE_MLA_CACHE_DTYPES[backend]
    rocm_fp8 = backend == "ROCM_AITER_MLA_SPARSE" and recipe.quantized_cache and not recipe.engine.rocm_accepts_fp8
    nvfp4 = recipe.cache_dtype == "nvfp4_ds_mla" and (recipe.gpu.arch not in ("sm100", "sm103") or release_tuple(
        recipe.engine.version) < release_tuple(NVFP4_DS_MLA_FIRST))
    if recipe.cache_dtype not in dtypes or rocm_fp8 or nvfp4:
        raise RecipeError("kv-cache-dtype", f"{recipe.cache_dtype}: {recipe.engine.label}'s sparse-MLA backend on "
                                            f"{recipe.gpu.name} ({backend}) takes {', '.join(dtypes)} ({source}); vLLM "
                                            f"would refuse to start")


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
                 graph_rows: int, graph_logits: dict[str, int], logits_then: dict[str, int]) -> BackendPlan:
    """The doc's steps for one top-k backend, on this release's side of #62860 and on the other."""
    dl = logits[backend.name]
    headroom = indexer_headroom(recipe, logits, backend.name)
    graphs = cudagraph_pool(recipe, backend.name, graph_logits, logits_then)
    sides = {reserves: sizing(recipe, memory, reserves, reservation(recipe, dl, reserves), headroom, graphs.bytes)
             for reserves in (True, False)}
    risk = oom(recipe, memory, dl)
    reason = availability(recipe, backend)
    note = backend.note.format(cooperative_rows=recipe.engine.cooperative_topk_max_rows)
    return BackendPlan(
        backend=backend.name, available=reason is None, reason=reason or note,
        selected=backend.name == recipe.topk_backend,
        decode_logits=dl, prefill_budget_bytes=recipe.prefill_budget_bytes,
        cudagraph_logits_rows=graph_rows, cudagraph_logits_bytes=graph_logits[backend.name], cudagraph=graphs,
        indexer_headroom_bytes=headroom,
        release=sides[recipe.reserves_decode_logits], other=sides[not recipe.reserves_decode_logits],
        oom=risk, workaround=workaround(recipe, memory, dl, headroom, graphs.bytes) if risk.at_risk else None)


# Defaults that can decide the answer, and the values a deployment plausibly has instead.
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


def backend_logits(recipe: Recipe, backends: list[Backend]) -> dict[str, DecodeLogits]:
    """Each backend's decode logits: one computation per way the top-k reads them."""
    rows = decode_rows(recipe)
    by_reader = {reads: decode_logits(recipe, reads, rows) for reads in {reads_bf16(recipe, b) for b in backends}}
    return {b.name: by_reader[reads_bf16(recipe, b)] for b in backends}


def plan(recipe: Recipe, only: set[str] | None = None) -> Plan:
    """Every backend of the recipe's engine through the doc's steps, or those in `only` (and auto, which the report
    compares them with): a sweep plans just the backends it shows."""
    memory = rank_memory(recipe)
    check_cache_dtype(recipe, memory)
    check_weights_fit(recipe, memory)
    backends = engine_backends(recipe)
    logits = backend_logits(recipe, backends)
    graph_logits = graph_logits_bytes(recipe, logits)
    then = recipe.measured_on
    logits_then = graph_logits if then is None else graph_logits_bytes(then, backend_logits(then, backends))
    check_graph_pools(recipe, logits_then)
    graph_rows = cudagraph_logits_rows(recipe)
    shown = [b for b in backends if only is None or b.name in only or b.name == "auto"]
    return Plan(recipe, memory, [backend_plan(recipe, memory, b, logits, graph_rows, graph_logits, logits_then)
                                 for b in shown])
