"""The error bar on a planned KV cache: how far the terms plan estimates or fits may be off, sized from how far they
were from the logs that print them (fits.json), as a share of the KV bytes. A measured term (the recipe's memory block,
calibrate) carries none.

    weights      derived: the largest share by which derived weights missed a "Model loading took" line
                 estimated (from a config's shapes): ESTIMATED_WEIGHTS_SHARE
    peak + non-torch  fitted: the fit's largest residual; on a unified-memory GPU plus UNIFIED_NON_TORCH_SPREAD
    CUDA graphs  estimated and subtracted: the largest miss of an "Estimated CUDA graph memory" line
"""

from dataclasses import dataclass

from dsa_kvcalc import estimates, fits
from dsa_kvcalc.capacity import BackendPlan, Plan

# A config's shapes give the weights to about a tenth (hf_config.py: 2.5 hidden^2 a layer besides the experts)
ESTIMATED_WEIGHTS_SHARE = 0.10


@dataclass(frozen=True)
class ErrorBar:
    bytes: int  # +- KV bytes
    relative: float  # +- share of the KV cache
    basis: str  # what the terms are: "weights derived, activation fitted on 9 logs"


def error_bar(plan: Plan, b: BackendPlan) -> ErrorBar | None:
    """None where no term is estimated or fitted, or the KV memory is pinned (kv-cache-memory-bytes)."""
    memory, stored = plan.memory, fits.stored()
    if plan.recipe.kv_cache_memory_bytes is not None:
        return None
    spread, parts = 0, []
    weights = memory.weights
    if weights.provenance == "derived" and weights.carried_bytes == 0:
        spread += round(weights.bytes * stored.weights.spread)
        parts.append("weights derived")
    elif weights.provenance in ("estimated", "fitted"):
        spread += round(weights.bytes * ESTIMATED_WEIGHTS_SHARE)
        parts.append("weights estimated")
    if {memory.base_peak.provenance, memory.non_torch.provenance} & {"fitted", "estimated"}:
        spread += stored.activation.spread_bytes
        parts.append(f"activation fitted on {len(stored.activation.points)} logs")
        if plan.recipe.gpu.unified_memory:
            spread += estimates.UNIFIED_NON_TORCH_SPREAD.value
            parts.append("non-KV memory of a unified-memory GPU estimated")
    if b.cudagraph_subtracted_bytes and b.cudagraph.provenance in ("fitted", "estimated"):
        spread += stored.graphs.spread
        parts.append("CUDA graphs estimated")
    if not spread:
        return None
    return ErrorBar(spread, spread / max(b.kv_cache_bytes, 1), ", ".join(parts))
