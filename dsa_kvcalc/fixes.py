"""What the user can change so that plan's own OOM verdict clears, each fix re-planned: its verdict and its KV cost
are plan's at the fixed recipe, so every fix closes its loop (`plan --set KEY=VALUE` prints the same).

Each search starts from the fix the room formula gives (capacity.OomRisk) and steps only where the re-planned
recipe moves the room itself (the KV-init buffers shrink with max-num-seqs, a fixed release's reservation with the
decode rows). A CUDA-graph capture size is no fix: mixed batches run the indexer outside FULL graphs (PIECEWISE or
eager, vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:321-370, 547-553), and under data parallelism every rank
takes the lowest graph mode of the step (vllm/v1/worker/gpu/dp_utils.py:156-173).
"""

from dataclasses import dataclass

from dsa_kvcalc import planning
from dsa_kvcalc.capacity import BackendPlan, Plan, Reserved
from dsa_kvcalc.fit import largest
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.sweep import Base, recipe_at
from dsa_kvcalc.units import MIB

BUDGET_KEY = "env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB"
# On SM100 DeepGEMM's prefill logits are BF16 and the indexer upcasts each chunk to FP32 while both are live
# (vllm==0.33.0 vllm/model_executor/layers/sparse_attn_indexer.py:727-737): a chunk the budget sizes at 4 B an element
# (vllm/v1/attention/backends/mla/indexer.py:1366-1411) holds (2 + 4) / 4 = 1.5 x the budget, where the profile
# run reserves 1 x (sparse_attn_indexer.py:503-506). FP32 logits (SM90) hold 1 x.
CHUNK_BUDGET_BYTES_PER_ELEMENT = 4


@dataclass(frozen=True)
class Fix:
    name: str  # as `plan --fix` takes it: seqs, budget, deep_select, kv
    key: str  # as `--set` takes it
    value: object
    plan: BackendPlan  # the backend re-planned with the fix
    tokens_change: int  # its KV tokens against the unfixed plan's
    moves_risk: str | None = None  # where the fix moves the risk instead, priced


def replanned(base: Base, point: dict, backend: str) -> BackendPlan | None:
    try:
        return planning.plan(recipe_at(base, point), {backend}).backend(backend)
    except RecipeError:  # a value this deployment cannot take
        return None


def seqs_fix(base: Base, b: BackendPlan) -> Fix | None:
    """The largest max-num-seqs whose worst step keeps the margin, re-planned at each count (fewer sequences also
    shrink the KV-init buffers, so the room grows as the count falls): the same edge as fit's largest max-num-seqs."""
    def at_risk(seqs: int) -> bool:
        fixed = replanned(base, {"max-num-seqs": seqs}, b.backend)
        return fixed is None or fixed.oom.at_risk

    seqs = largest(at_risk, 1, base.recipe.max_num_seqs - 1)
    if seqs is None:
        return None
    fixed = replanned(base, {"max-num-seqs": seqs}, b.backend)
    return Fix("seqs", "max-num-seqs", seqs, fixed, fixed.kv_cache_tokens - b.kv_cache_tokens)


def prefill_overshoot(b: BackendPlan, fixed: BackendPlan, budget_bytes: int) -> str | None:
    """A raised budget also sizes the prefill chunks: on a BF16 layout a one-request chunk holds 1.5 x the budget, where
    the profile reserves 1 x. The half beyond must come from the room the reservation did not add, with no credit from
    the profile's unused peak."""
    excess = budget_bytes * b.decode_logits.logits_bytes_per_element // CHUNK_BUDGET_BYTES_PER_ELEMENT \
        if b.decode_logits.logits_dtype != "fp32" else 0
    rise = fixed.peak_activation_bytes - b.peak_activation_bytes
    prefill_room = fixed.oom.room_bytes - rise - max(0, -fixed.oom.unprofiled.bytes) - fixed.oom.margin_bytes
    if excess <= prefill_room:
        return None
    return (f"a prefill chunk this budget sizes holds {excess / MIB:,.0f} MiB beyond the reservation (BF16 logits and "
            f"their FP32 copy: 1.5 x the budget), where {max(prefill_room, 0) / MIB:,.0f} MiB is free for it: the OOM "
            f"moves to long prefills")


def budget_fix(base: Base, plan: Plan, b: BackendPlan) -> Fix | None:
    """The smallest VLLM_SPARSE_INDEXER_MAX_LOGITS_MB whose reservation raises the room enough: the profile run
    reserves the budget (sparse_attn_indexer.py:503), the peak rises by what it adds beyond the indexer headroom,
    and the KV cache gives that up to the step."""
    if b.release.reservation.kind not in (Reserved.BUDGET, Reserved.DECODE_LOGITS, Reserved.UNPADDED_FP32):
        return None
    need = b.oom.worst_decodes * b.oom.bytes_per_decode + b.oom.margin_bytes
    rise_now = b.peak_activation_bytes - plan.memory.base_peak.bytes
    budget_mb = -(-(need - b.oom.room_bytes + rise_now + b.indexer_headroom_bytes) // MIB)
    budget_mb = max(budget_mb, base.recipe.prefill_budget_mb + 1)
    for step in range(8):  # the room formula's budget, or a few MiB above where the re-planned room moved
        fixed = replanned(base, {BUDGET_KEY: budget_mb + step}, b.backend)
        if fixed is not None and not fixed.oom.at_risk:
            return Fix("budget", BUDGET_KEY, budget_mb + step, fixed, fixed.kv_cache_tokens - b.kv_cache_tokens,
                       prefill_overshoot(b, fixed, (budget_mb + step) * MIB))
    return None


def kv_memory_fix(base: Base, plan: Plan, b: BackendPlan) -> Fix | None:
    """--kv-cache-memory-bytes pinned below the line: vLLM then measures nothing (the dummy forward still runs,
    vllm==0.33.0 vllm/v1/worker/gpu_worker.py:656-676) and the room is what the pinned KV leaves."""
    need = b.oom.worst_decodes * b.oom.bytes_per_decode + b.oom.margin_bytes
    kv_bytes = b.kv_cache_bytes - (need - b.oom.room_bytes)
    if kv_bytes <= 0:
        return None
    fixed = replanned(base, {"kv-cache-memory-bytes": kv_bytes}, b.backend)
    if fixed is None or fixed.oom.at_risk or fixed.kv_cache_bytes < plan.memory.kv.request_bytes:
        return None
    return Fix("kv", "kv-cache-memory-bytes", kv_bytes, fixed, fixed.kv_cache_tokens - b.kv_cache_tokens)


def fixes(base: Base, plan: Plan, b: BackendPlan) -> list[Fix]:
    """Every fix of backend b's verdict on this release, most KV tokens first: another top-k backend that runs here
    without the risk (deep_select reads the BF16 logits: no FP32 copy), max-num-seqs, the prefill budget,
    kv-cache-memory-bytes."""
    if not b.oom.at_risk:
        return []
    found = [Fix("deep_select", "sparse-indexer-topk-backend", other.backend, other, other.kv_cache_tokens - b.kv_cache_tokens)
             for other in plan.backends if other.backend == "deep_select" and other.available and not other.oom.at_risk
             and b.backend != "deep_select"]
    found += [fix for fix in (seqs_fix(base, b), budget_fix(base, plan, b),
                                           kv_memory_fix(base, plan, b)) if fix is not None]
    return sorted(found, key=lambda fix: (fix.moves_risk is not None, -fix.plan.kv_cache_tokens))
