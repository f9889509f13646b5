"""The walk from a recipe to its plan: resolve what vLLM decides (deployment.py), count the rank's memory terms
(memory_terms.py), refuse what that memory cannot start, then the arithmetic (capacity.py) on plain values. Also here,
because they re-plan a recipe: vLLM's fit of max-model-len auto, and the defaults that move the answer.

    recipe -> deployment.resolve -> memory_terms.rank_memory -> capacity.plan -> Plan
"""

from dataclasses import dataclass, replace

from dsa_kvcalc import capacity
from dsa_kvcalc.bisection import largest
from dsa_kvcalc.capacity import Plan
from dsa_kvcalc.deployment import Known, kv_spec, resolve
from dsa_kvcalc.keys import Recipe, RecipeError, Refusal
from dsa_kvcalc.memory_terms import RankMemory, rank_memory
from dsa_kvcalc.units import GIB


def check_weights_fit(recipe: Recipe, memory: RankMemory) -> None:
    """Weights that leave no room: vLLM finds no memory for the KV cache and refuses to start ("No available memory
    for the cache blocks", vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:50-58); unless they are
    an estimate and the KV memory is pinned (kv-cache-memory-bytes): then vLLM's own figure for them does not enter
    the KV cache."""
    pinned = recipe.kv_cache_memory_bytes is not None and memory.weights.provenance != "measured"
    if not pinned and memory.weights.bytes + memory.non_torch.bytes >= memory.requested_bytes:
        key = "memory.weights_gib" if memory.weights.provenance == "measured" else "model"
        raise Refusal(key, f"{recipe.model.name} needs {memory.weights.bytes / GIB:.1f} GiB of weights per rank; "
                           f"{recipe.gpu.name} at gpu-memory-utilization {recipe.gpu_memory_utilization} allows "
                           f"{memory.requested_bytes / GIB:.1f} GiB: vLLM refuses to start, no available memory for "
                           f"the cache blocks (shard it: tensor-parallel-size, enable-expert-parallel)")


def check_graph_pools(recipe: Recipe, logits_then: dict[str, int]) -> None:
    """A measured graph pool holds at least its FULL decode graphs' logits at the shape it was measured at
    (capacity.measured_graph_logits): else it is no measurement of this recipe, and its plan is not given."""
    for backend, pool in recipe.cudagraph_bytes.items():
        needed = logits_then.get(recipe.topk_backend if backend == "*" else backend, 0)
        if pool < needed:
            name = "memory.cudagraph_gib" + ("" if backend == "*" else f".{backend}")
            raise RecipeError(name, f"{pool / GIB:.2f} GiB is less than the {needed / GIB:.2f} GiB of indexer logits "
                                    f"its largest FULL decode graph holds: not a measurement of this recipe")


def plan(recipe: Recipe, only: set[str] | None = None, known: Known | None = None) -> Plan:
    """Every backend of the recipe's engine through capacity's steps, or those in `only` (and auto, which the report
    compares them with): a sweep plans just the backends it shows, with what it has resolved so far (Known). A
    max-model-len of auto is first fitted, as vLLM fits it."""
    if recipe.fit_max_model_len:
        recipe = fitted(recipe, known)
    deployment = resolve(recipe, known)
    memory = rank_memory(deployment)
    check_weights_fit(recipe, memory)
    planned = capacity.plan(deployment, memory, only)
    check_graph_pools(recipe, planned.measured_graph_logits)
    return planned


# vLLM's fit of max-model-len -1 (auto): the profile runs at the model's maximum; where one request of that does not
# fit the KV memory it left, the longest length whose request does, by bisection (the same in every release modelled).
FIT_RULE = "vllm==0.33.0 vllm/v1/core/kv_cache_planning.py:1337-1405"  # vllm==0.19.0 kv_cache_utils.py:1405-1460


def fitted(recipe: Recipe, known: Known | None) -> Recipe:
    """The recipe at the max-model-len vLLM fits for -1 (auto): the model's maximum where one request of it fits
    the KV memory the profile at that length leaves (with the recipe's top-k backend, else auto), else the longest
    length whose request fits it. Noted in the recipe, with the rule."""
    at_most = replace(recipe, fit_max_model_len=False)
    profiled = plan(at_most, known=known)
    runs = [b for b in profiled.backends if b.available] or profiled.backends  # none runs here: the plan says why
    backend = next((b for b in runs if b.selected), next((b for b in runs if b.backend == "auto"), runs[0]))
    available = backend.kv_cache_bytes
    mla = profiled.memory.sparse_mla_backend
    specs = None if known is None else known.specs

    def too_long(length: int) -> bool:
        return kv_spec(replace(at_most, max_model_len=length), mla, specs).request_bytes > available

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
