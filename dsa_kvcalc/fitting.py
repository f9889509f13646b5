"""A startup record as a fit's data point (fits.Point), and a record planned from its serving arguments with a given fit
of the activation peak and non-torch memory: what tools/fit_terms.py fits and benchmarks/leave_one_out.py checks."""

from dataclasses import dataclass

from dsa_kvcalc import capacity, fits, planning
from dsa_kvcalc.memory_terms import collectives, hidden_bytes, peak_budget_bytes, prefill_workspace_bytes
from dsa_kvcalc.recipe import load
from dsa_kvcalc.records import Record


def planned(record: Record) -> capacity.Plan:
    recipe = load(record.recipe)
    return planning.plan(recipe, {recipe.topk_backend})


def point(record: Record) -> fits.Point:
    """The record's rest (peak + non-torch as logged): requested - available KV - weights (logged, else derived) -
    graph estimate (logged, else capacity's), and what the fit explains it by."""
    plan = planned(record)
    recipe, memory = plan.recipe, plan.memory
    selected = plan.backend(recipe.topk_backend)
    weights = memory.weights.bytes if record.weights_gib is None else round(record.weights_gib * fits.GIB)
    graphs = selected.cudagraph_subtracted_bytes if record.cudagraph_estimate_gib is None else round(
        record.cudagraph_estimate_gib * fits.GIB)
    rest = memory.requested_bytes - record.available_bytes - weights - graphs
    peak = None if record.peak_activation_gib is None else round(record.peak_activation_gib * fits.GIB)
    non_torch = None if record.non_torch_gib is None else round(record.non_torch_gib * fits.GIB)
    return fits.Point(record.name, record.deployment, recipe.gpu.name, hidden_bytes(recipe), collectives(recipe),
                      peak_budget_bytes(recipe) + prefill_workspace_bytes(recipe), rest, peak, non_torch)


@dataclass(frozen=True)
class Planned:
    """A record planned from its serving arguments with a fit: the KV memory and tokens, against the log's."""
    record: Record
    kv_bytes: int
    tokens: int

    @property
    def error(self) -> float:
        """Against the logged tokens, or the logged KV memory where the start failed before it sized the tokens."""
        if self.record.tokens is None:
            return self.kv_bytes / self.record.available_bytes - 1
        return self.tokens / self.record.tokens - 1


def plan_with(record: Record, fit: fits.Fit) -> Planned:
    """KV bytes = requested - derived weights - (derived peak + the fit's peak) - the fit's non-torch - capacity's graph
    estimate (capacity.kv_cache_bytes), and the tokens plan's KV-cache groups hold in them."""
    plan = planned(record)
    recipe, memory = plan.recipe, plan.memory
    selected = plan.backend(recipe.topk_backend)
    peak = peak_budget_bytes(recipe) + prefill_workspace_bytes(recipe) + fit.peak_bytes(hidden_bytes(recipe))
    kv_bytes = capacity.kv_cache_bytes(recipe.kv_cache_memory_bytes, memory.requested_bytes, memory.weights.bytes,
                                       peak, fit.non_torch_bytes(collectives(recipe)),
                                       selected.cudagraph_subtracted_bytes)
    return Planned(record, kv_bytes, memory.kv.tokens(kv_bytes))


def weights_residuals(records: list[Record]) -> dict:
    """Derived weights against every vLLM release's "Model loading took" line, a share of the logged figure."""
    return {r.name: planned(r).memory.weights.bytes / round(r.weights_gib * fits.GIB) - 1
            for r in records if r.weights_gib is not None and not r.fork}


def graphs_residuals(records: list[Record]) -> dict:
    """Capacity's graph estimate against every "Estimated CUDA graph memory" line that KV sizing subtracted, bytes."""
    found = {}
    for r in records:
        if r.cudagraph_estimate_gib is not None and not r.fork:
            plan = planned(r)
            found[r.name] = plan.backend(plan.recipe.topk_backend).cudagraph_subtracted_bytes - round(
                r.cudagraph_estimate_gib * fits.GIB)
    return found
