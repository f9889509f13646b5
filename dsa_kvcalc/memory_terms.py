"""The memory terms of one rank: what vLLM's profile run measures (weights, the base activation peak, non-torch memory),
as the recipe's memory block gives them or as plan estimates them (estimates.py), each with its provenance; the
prefill logits budgets the profile allocates and the base peak holds; and the buffers the model runner makes after the
KV cache is sized (kv_init_buffers.py). capacity.py takes them as values."""

import math
from dataclasses import dataclass, replace

from dsa_kvcalc import estimates, kv_cache, weights
from dsa_kvcalc.deployment import Deployment
from dsa_kvcalc.estimates import Term, estimated
from dsa_kvcalc.keys import KEYS, Recipe
from dsa_kvcalc.kv_cache import KvSpec
from dsa_kvcalc.kv_init_buffers import kv_init_buffer_bytes


DEFAULT_BUDGET_MB = KEYS["prefill_budget_mb"].default


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


@dataclass(frozen=True)
class RankMemory:
    total_bytes: int  # the GPU's memory
    requested_bytes: int  # total x gpu-memory-utilization
    weights: Term
    base_peak: Term  # the dummy run's torch peak with only the prefill logits budget reserved
    non_torch: Term
    unprofiled: Term  # what a step finds taken at run time besides the derived terms (capacity.oom)
    kv_init_buffers: Term  # buffers the model runner makes after the KV bytes are fixed (kv_init_buffers.py)
    profile_budget_bytes: int  # the prefill logits budget the profile run allocates (profile_budget_bytes)
    peak_budget_bytes: int  # the prefill logits budget the base peak holds (peak_budget_bytes)
    kv: KvSpec
    sparse_mla_backend: str


def weights_estimate(recipe: Recipe) -> Term:
    """Derived from vLLM's model classes (weights.py), or, for a checkpoint they were not built for, from its config's
    shapes: the dense part / TP, the routed experts / (TP x DP) whether or not experts are parallel (vLLM shards them
    over TP x DP either way: weights.py), the draft layers' share where the speculative method loads them."""
    derived = weights.derived_weights(recipe)
    if derived is not None:
        offload = f"; {derived.host_bytes:,} B of Engram tables in host memory" if derived.host_bytes else ""
        return Term(derived.bytes, derived.provenance, derived.source + offload)
    model, checkpoint = recipe.model, recipe.model.checkpoint
    expert_ranks = recipe.tensor_parallel_size * recipe.data_parallel_size
    offloaded = model.offloadable_bytes if recipe.engram_cpu_offload else 0
    dense_bytes = checkpoint.value - model.routed_expert_bytes - model.offloadable_bytes
    on_gpu = model.offloadable_bytes - offloaded  # split over the data-parallel ranks (vllm/config/engram.py)
    stage_layers = model.num_layers // recipe.pipeline_parallel_size  # each stage its share of the layers
    drafts = model.mtp_layers if recipe.speculative_method in ("mtp", "dspark") and recipe.num_speculative_tokens else 0
    rank_bytes = dense_bytes // recipe.tensor_parallel_size + model.routed_expert_bytes // expert_ranks \
        + on_gpu // expert_ranks  # the whole model's share of one rank, before pipeline stages and drafts
    weights_bytes = rank_bytes * (stage_layers + drafts) // model.num_layers
    offload = f"; {offloaded:,} B of Engram tables in host memory" if offloaded else ""
    source = (f"from the config's shapes (vLLM's model classes were not built for this checkpoint at this TP size): "
              f"the dense part / TP + routed experts / (TP x DP) ranks, draft layers included{offload}; checkpoint: "
              f"{checkpoint.basis}")
    return Term(weights_bytes, checkpoint.provenance, source)


def profile_budget_bytes(recipe: Recipe) -> int:
    """The prefill logits budget the profile run allocates: none on ROCm before vLLM 0.23.0, whose profiling branch
    returns at once."""
    if recipe.gpu.family == "rocm" and recipe.engine.rocm_indexer_workspace == "none":
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
    """What the sparse-MLA prefill workspace grows by in the profile run: one buffer that its largest user sizes
    (vllm/v1/worker/workspace.py), here the indexer's K gather, 8 x factor x max_model_len / compress ratio entries of
    132 B (the kpool indexer's / kpool from vLLM 0.32.0, engine.py kpool_gather_over_pools); factor 5, and 2 above
    262,144 tokens from vLLM 0.32.0 (engine.py sparse_mla_prefill_workspace_factor). FlashMLA-sparse reserved its
    workspace when the model was built (weights.mla_workspace_bytes, counted in the weights): the gather grows the
    buffer only beyond it."""
    length, model = recipe.max_model_len, recipe.model
    short, long = recipe.engine.sparse_mla_prefill_workspace_factor
    factor = short if length <= 262_144 else long
    pooled = model.index_kpool if recipe.engine.kpool_gather_over_pools else 1
    gather_bytes = 8 * factor * length // (model.indexer_logits_ratio * pooled) * kv_cache.INDEXER_ENTRY_BYTES
    reserved = weights.mla_workspace_bytes(recipe, model.num_attention_heads // recipe.tensor_parallel_size) \
        if model.family == "mla" else 0
    return max(gather_bytes - reserved, 0)


def hidden_bytes(recipe: Recipe) -> int:
    """max_num_batched_tokens x hidden_size x 2 B: one BF16 activation of the profile run's dummy batch."""
    return recipe.max_num_batched_tokens * recipe.model.hidden_size * 2


def collectives(recipe: Recipe) -> int:
    """1 where ranks talk (TP x DP > 1): NCCL and custom all-reduce buffers."""
    return int(recipe.tensor_parallel_size * recipe.data_parallel_size > 1)


def base_peak_estimate(recipe: Recipe) -> Term:
    """The prefill logits budget + the sparse-MLA workspace's growth (both derived) + ACTIVATION_HIDDEN_COPIES x
    max_num_batched_tokens x hidden x 2 B (fitted, fits.py)."""
    copies = estimates.ACTIVATION_HIDDEN_COPIES
    fitted = round(copies.value * hidden_bytes(recipe))
    return Term(peak_budget_bytes(recipe) + prefill_workspace_bytes(recipe) + fitted, copies.provenance,
                f"the prefill logits budget and the sparse-MLA workspace's growth (derived), and {copies.basis}")


def non_torch_estimate(recipe: Recipe) -> Term:
    """One process's CUDA context and workspaces, plus the collectives' buffers when TP x DP > 1 (fitted, fits.py)."""
    single, shared = estimates.NON_TORCH_SINGLE, estimates.NON_TORCH_COLLECTIVES
    return Term(single.value + shared.value * collectives(recipe), "fitted",
                single.basis if not collectives(recipe) else f"{single.basis}; plus {shared.basis}")


def rank_memory(deployment: Deployment) -> RankMemory:
    """The terms of one rank's memory."""
    recipe = deployment.recipe
    return RankMemory(
        total_bytes=recipe.gpu.total_memory_bytes,
        requested_bytes=math.ceil(recipe.gpu.total_memory_bytes * recipe.gpu_memory_utilization),
        weights=term(recipe, "weights", weights_estimate),
        base_peak=term(recipe, "peak_activation", base_peak_estimate),
        non_torch=term(recipe, "non_torch", non_torch_estimate),
        unprofiled=term(recipe, "unprofiled", lambda _: estimated(estimates.UNPROFILED.value, estimates.UNPROFILED)),
        kv_init_buffers=kv_init_buffer_bytes(recipe, deployment.kv, deployment.model_runner_v2,
                                             deployment.draft_layers),
        profile_budget_bytes=profile_budget_bytes(recipe), peak_budget_bytes=peak_budget_bytes(recipe),
        kv=deployment.kv, sparse_mla_backend=deployment.sparse_mla_backend)
