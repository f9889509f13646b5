"""The memory terms vLLM's profile run measures for one rank (weights, the base activation peak, non-torch memory), as
the recipe's memory block gives them or as plan estimates them (estimates.py), each with its provenance."""

import math
from dataclasses import dataclass, replace

from dsa_kvcalc import estimates, kv_cache
from dsa_kvcalc.choices import kv_spec, sparse_mla_backend
from dsa_kvcalc.kv_cache import KvSpec
from dsa_kvcalc.keys import KEYS, Recipe


DEFAULT_BUDGET_MB = KEYS["prefill_budget_mb"].default


@dataclass(frozen=True)
class Term:
    bytes: int
    provenance: str  # measured (the recipe's memory block, a log), derived (config and cited rule, or a measured
    # term carried over), fitted or estimated (estimates.py)
    source: str
    carried_bytes: int = 0  # what plan's estimate of the change adds to a figure measured at another shape
    uncertainty_bytes: int = 0  # how far off it may be, either way, where that is stated


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
                                           f"of the change", change)


def estimated(value: int, figure: estimates.Figure) -> Term:
    return Term(value, figure.provenance, figure.basis, uncertainty_bytes=figure.uncertainty)


@dataclass(frozen=True)
class RankMemory:
    requested_bytes: int  # total x gpu-memory-utilization
    weights: Term
    base_peak: Term  # the dummy run's torch peak with only the prefill logits budget reserved
    non_torch: Term
    unprofiled: Term  # what a step finds taken at run time besides the derived terms (capacity.oom)
    kv: KvSpec
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
    offload = f"; {offloaded:,} B of Engram tables in host memory" if offloaded else ""
    return Term(weights_bytes, checkpoint.provenance, f"the checkpoint's dense part / TP + routed experts / "
                                                      f"expert-parallel ranks{offload}; checkpoint: {checkpoint.basis}")


def profile_budget_bytes(recipe: Recipe) -> int:
    """The prefill logits budget the profile run allocates: none on ROCm before vLLM 0.23.0, whose profiling branch
    returns at once."""
    if recipe.gpu.arch.startswith("gfx") and recipe.engine.rocm_indexer_workspace == "none":
        return 0
    return recipe.prefill_budget_bytes


def peak_budget_bytes(recipe: Recipe) -> int:
    """The prefill logits budget the base peak holds: that of the recipe its peak was measured on, or vLLM's default
    (vllm==0.33.0 vllm/envs.py:62) where plan estimates the peak. A budget above it raises the peak as a reservation
    does (capacity.raised_peak_bytes)."""
    if recipe.peak_activation_bytes is None:
        return profile_budget_bytes(replace(recipe, prefill_budget_mb=DEFAULT_BUDGET_MB))
    return profile_budget_bytes(recipe.measured_on or recipe)


def prefill_workspace_bytes(recipe: Recipe) -> int:
    """The sparse-MLA prefill workspace, one buffer that its largest user sizes (vllm/v1/worker/workspace.py): the
    indexer's K gather, 8 x factor x max_model_len / compress ratio entries of 132 B (the kpool indexer's / kpool
    from vLLM 0.32.0, engine.py kpool_gather_over_pools), or, with an fp8_ds_mla cache, FlashMLA-sparse's BF16
    gather of factor x max_model_len rows of 576 x 2 B; factor 5, and 2 above 262,144 tokens from vLLM 0.32.0
    (engine.py sparse_mla_prefill_workspace_factor)."""
    length, model = recipe.max_model_len, recipe.model
    short, long = recipe.engine.sparse_mla_prefill_workspace_factor
    factor = short if length <= 262_144 else long
    pooled = model.index_kpool if recipe.engine.kpool_gather_over_pools else 1
    gather_bytes = 8 * factor * length // (model.indexer_logits_ratio * pooled) * kv_cache.INDEXER_ENTRY_BYTES
    ds_mla = recipe.model.family == "mla" and kv_cache.mla_token_bytes(recipe.cache_dtype, sparse_mla_backend(recipe)) \
        == kv_cache.MLA_FP8_DS_BYTES
    return max(gather_bytes, factor * length * kv_cache.MLA_BF16_BYTES if ds_mla else 0)


def base_peak_estimate(recipe: Recipe) -> Term:
    """The prefill logits budget + the sparse-MLA prefill workspace + max_num_batched_tokens x hidden x 2 B x
    ACTIVATION_HIDDEN_COPIES."""
    hidden_copies = estimates.ACTIVATION_HIDDEN_COPIES
    hidden_bytes = recipe.max_num_batched_tokens * recipe.model.hidden_size * 2 * hidden_copies.value
    return Term(peak_budget_bytes(recipe) + prefill_workspace_bytes(recipe) + hidden_bytes, hidden_copies.provenance,
                f"the prefill logits budget, the sparse-MLA prefill workspace (derived), and {hidden_copies.basis}")


def non_torch_estimate(recipe: Recipe) -> Term:
    """One process's CUDA context and workspaces, plus the collectives' buffers when TP x DP > 1."""
    single, collectives = estimates.NON_TORCH_SINGLE, estimates.NON_TORCH_COLLECTIVES
    if recipe.tensor_parallel_size * recipe.data_parallel_size == 1:
        return estimated(single.value, single)
    return Term(single.value + collectives.value, "estimated", f"{single.basis}; plus {collectives.basis}")


def rank_memory(recipe: Recipe, kv_specs: dict | None = None) -> RankMemory:
    """The terms of one rank's memory; `kv_specs`: a sweep's KV-cache specs so far (choices.kv_spec)."""
    backend = sparse_mla_backend(recipe)
    return RankMemory(
        requested_bytes=math.ceil(recipe.gpu.total_memory_bytes * recipe.gpu_memory_utilization),
        weights=term(recipe, "weights", weights_estimate),
        base_peak=term(recipe, "peak_activation", base_peak_estimate),
        non_torch=term(recipe, "non_torch", non_torch_estimate),
        unprofiled=term(recipe, "unprofiled", lambda _: estimated(estimates.UNPROFILED.value, estimates.UNPROFILED)),
        kv=kv_spec(recipe, backend, kv_specs), sparse_mla_backend=backend)
