"""Sweeps and recommendations: many plans over varied recipe keys. Pure: rows are dicts, nothing is printed here.

The base recipe is validated once. Each point's values go through the same per-key checks and the same resolution
as `plan --set KEY=VALUE`, so every row is what `plan --format json` prints for that point, flattened.
"""

import math
from contextlib import suppress
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path

import yaml

from dsa_kvcalc import capacity, planning
from dsa_kvcalc.bisection import largest
from dsa_kvcalc.capacity import BackendPlan, Plan
from dsa_kvcalc.catalog import BACKENDS
from dsa_kvcalc.deployment import Known
from dsa_kvcalc.inputs import RecipeLoader
from dsa_kvcalc.keys import BY_NAME, KEYS, MEMORY_TERMS, NESTED, Recipe, RecipeError, canonical, flatten_keys, \
    memory_unit, suggestion
from dsa_kvcalc.names import model_config_path
from dsa_kvcalc.overrides import as_written, set_value
from dsa_kvcalc.recipe import Resolved, load, load_recipe, read_command, read_recipe, resolve_as_written, \
    resolved_values, with_memory_gpu
from dsa_kvcalc.values import parse_size, read_values
from dsa_kvcalc.vllm_cli import IGNORED_KEYS
from dsa_kvcalc.report import backend_json

BACKEND_NAMES = tuple(b.name for b in BACKENDS)
MAX_POINTS = 1_000_000  # about two minutes of sweeping: a larger product is a typo in a range


class DecimalRange:
    """start, start + step, ... up to stop included, without building the list (a range of decimals)."""

    def __init__(self, start: Decimal, stop: Decimal, step: Decimal):
        self.start, self.step = start, step
        self.length = int((stop - start) / step) + 1

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        return (float(self.start + i * self.step) for i in range(self.length))


@dataclass(frozen=True)
class Vary:
    key: str  # as given: a recipe key, dotted for nested ones
    values: object  # a tuple, a range or a DecimalRange: sized and iterable, never built in full


def parse_varies(texts: list[str], option: str = "--vary") -> list[Vary]:
    if not texts:
        raise RecipeError(option, f"nothing to sweep: give at least one {option} KEY=SPEC")
    varies = [parse_vary(text, option) for text in texts]
    seen: dict[tuple[str, ...], str] = {}
    units: dict[str, str] = {}  # a memory term -> its unit: a file gives each term in one (whatever its backends)
    for text, vary in zip(texts, varies):
        path = varied_path(vary.key)
        other = next((key for known, key in seen.items() if overlap(known, path)), None)
        unit = memory_unit(vary.key.split(".")[1])[1] if path[0] == "memory" and len(path) > 1 else None
        if other is None and unit and units.setdefault(path[1], unit) != unit:
            other = next(key for key in seen.values() if varied_path(key)[:2] == path[:2])
        if other is not None:
            also = "" if other == vary.key else f": {other} sets it too"
            raise RecipeError(f"{option} {text}", f"{vary.key} is varied twice{also}")
        seen[path] = vary.key
    if point_count(varies) > MAX_POINTS:
        raise RecipeError(option, f"{point_count(varies):,} points is over the limit of {MAX_POINTS:,}: narrow a "
                                  f"range or raise its step")
    return varies


def varied_path(key: str) -> tuple[str, ...]:
    """What a varied key sets, as a recipe file nests it: the top-level key as vLLM spells it, a memory term without
    its unit (weights_gib and weights_bytes are one term, which a file may give once), then the nested keys."""
    top, *inner = [part.strip() for part in key.split(".")]
    if canonical(top) == "memory" and inner:
        inner[0] = memory_unit(inner[0])[0]
    return canonical(top), *inner


def overlap(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """Whether two varied paths set one value: they are the same, or one holds the other (memory.cudagraph_gib and
    memory.cudagraph_gib.auto)."""
    shorter = min(len(one), len(other))
    return one[:shorter] == other[:shorter]


def parse_vary(text: str, option: str = "--vary") -> Vary:
    """KEY=SPEC: SPEC is start:stop:step (stop included; 128k-style sizes and decimals too) or a comma list."""
    option = f"{option} {text}"
    if "=" not in text:
        raise RecipeError(option, "expected KEY=SPEC, e.g. max-num-seqs=64:1024:64 or kv-cache-dtype=fp8,auto")
    key, spec = (part.strip() for part in text.split("=", 1))
    check_key(option, key)
    if not spec:
        raise RecipeError(option, "no values")
    items = [item.strip() for item in spec.split(",")]
    values = [] if ":" in spec else [parse_scalar(item) for item in items]
    # bytes that are not UTF-8 on the command line, or a YAML escape ("\ud800") that decodes to such a surrogate
    texts = [spec, *(value for value in values if isinstance(value, str))]
    if any("\ud800" <= char <= "\udfff" for text in texts for char in text):
        raise RecipeError(option, "the values are not UTF-8 text")
    if ":" in spec:
        return Vary(key, parse_range(option, spec))
    if not all(items):
        raise RecipeError(option, "empty value in the list")
    return Vary(key, tuple(as_written(key, item, value) for item, value in zip(items, values)))


def check_key(option: str, key: str) -> None:
    top, *nested = [part.strip() for part in key.split(".")]
    name = canonical(top)
    if name in IGNORED_KEYS:
        raise RecipeError(option, f"{top} does not change memory (dsa-kvcalc ignores it)")
    if name not in BY_NAME and name not in NESTED:
        raise RecipeError(option, f"unknown key {top!r}" + suggestion(name, [*BY_NAME, *NESTED, *IGNORED_KEYS])
                          + "; see dsa-kvcalc schema")
    if not nested:
        return
    if name not in NESTED:
        raise RecipeError(option, f"{top} has no nested keys")
    inner, *backend = nested
    known = sorted(k.name.split(".", 1)[1] for k in KEYS.values() if k.name.startswith(name + "."))
    if name == "memory" and inner in ("gpu", "rest"):
        ok = not backend
    elif name == "memory":
        term, unit = memory_unit(inner)
        ok = unit is not None and term in MEMORY_TERMS
        per_backend = ok and MEMORY_TERMS[term].per_backend and len(backend) == 1 and backend[0] in BACKEND_NAMES
        ok = ok and (not backend or per_backend)
    else:
        ok = inner in known and not backend
    if not ok:
        raise RecipeError(option, f"unknown key {key!r}" + suggestion(inner, known)
                          + f"; {top} takes {', '.join(known)}"
                                  + (" as NAME_gib or NAME_bytes (per backend: NAME_gib.BACKEND)"
                                     if name == "memory" else ""))


def parse_range(option: str, spec: str):
    """start:stop:step, stop included: a range of whole numbers (128k and 1M too), else a DecimalRange. Each number
    is at most 10^18 with at most 12 decimals, so that counting the values is exact and quick."""
    parts = [part.strip() for part in spec.split(":")]
    if len(parts) != 3:
        raise RecipeError(option, f"expected a range start:stop:step, got {spec!r}")
    numbers = []
    for part in parts:
        try:
            numbers.append(Decimal(parse_size(option, part)))
        except RecipeError:
            try:
                numbers.append(Decimal(part))
            except InvalidOperation:
                raise RecipeError(option, f"range bounds and step must be numbers, got {spec!r}") from None
    if not all(n.is_finite() and abs(n) <= 10 ** 18 and n.normalize().as_tuple().exponent >= -12 for n in numbers):
        raise RecipeError(option, f"range bounds and step must be finite, at most 1e18 and have at most 12 decimals, "
                                  f"got {spec!r}")
    start, stop, step = numbers
    if step <= 0:
        raise RecipeError(option, f"step must be above 0, got {step}")
    if start > stop:
        raise RecipeError(option, f"start {start} is above stop {stop}")
    if (stop - start) / step >= MAX_POINTS:
        raise RecipeError(option, f"over {MAX_POINTS:,} values: raise the step")
    if all(n == n.to_integral_value() for n in numbers):
        return range(int(start), int(stop) + 1, int(step))
    return DecimalRange(start, stop, step)


def parse_scalar(text: str):
    """As YAML reads it (the way --set does): 3 is a number, fp8 a word, true a flag."""
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except (yaml.YAMLError, RecipeError, RecursionError):
        return text


def point_count(varies: list[Vary]) -> int:
    return math.prod(len(vary.values) for vary in varies)


def points(varies: list[Vary]):
    """The cartesian product, lazily (itertools.product would build each range in full first)."""
    first, *rest = varies
    for value in first.values:
        if rest:
            for tail in points(rest):
                yield (value, *tail)
        else:
            yield (value,)


@dataclass(frozen=True)
class Base:
    """The base recipe, validated once: raw for keys that merge into the memory block, values for the rest."""
    raw: dict
    values: dict
    ignored: dict
    recipe_dir: Path
    recipe: Recipe  # the base itself: it must be a valid recipe
    measured_on: Recipe  # the recipe its memory block was measured on: the base, or the file under its --set
    resolved: Resolved  # its values with every default, each with the names it read: a point works out what it moves


def base_of(raw: dict, recipe_dir: Path, measured_on: Recipe | None = None) -> Base:
    values, ignored = read_values(raw)
    recipe = resolve_as_written(raw, values, recipe_dir, ignored)
    measured_on = measured_on or recipe
    return Base(raw, values, ignored, recipe_dir, recipe, measured_on, resolved_values(values, recipe_dir))


def load_base(path: Path | None, overrides: list[str] = (), command: str | None = None) -> Base:
    """The base of a recipe file (or of a pasted command) with --set overrides, its memory block measured where
    load_recipe says."""
    raw = read_command(command, overrides) if path is None else read_recipe(path, overrides)
    folder = Path(".") if path is None else path.parent
    return base_of(raw, folder, load_recipe(path, overrides, command).measured_on)


def title(base: Base, varies: list[Vary]) -> str:
    """The model, the GPU and the engine a sweep plans, or which of them it varies."""
    varied = {canonical(vary.key.split(".")[0]) for vary in varies}
    r = base.recipe
    shown = [("model", r.model.name), ("gpu", r.gpu.name), ("vllm-version", r.engine.label)]
    model, gpu, engine = (f"{key} varied" if key in varied or (key == "vllm-version" and "engine" in varied) else name
                          for key, name in shown)
    return f"{model} on {gpu}, {engine}"


def model_configs(base: Base, varies: list[Vary]) -> list[Path]:
    """The local config.json files a sweep reads, the base model's and each varied model's: never an output."""
    paths = [base.recipe.model.config_path]
    for vary in varies:
        if canonical(vary.key.split(".")[0]) == "model":
            for name in vary.values:
                with suppress(RecipeError):  # a name that is no path fails in its own row
                    paths.append(model_config_path(str(name), base.recipe_dir))
    return [path for path in paths if path is not None]


def recipe_at(base: Base, point: dict) -> Recipe:
    """The base with the point's values, each through the same checks as in a recipe file. The memory block was
    measured on the base with the point's memory values: a point that changes the shape carries it (measured_on),
    as plan --set does."""
    recipe = values_at(base, point)
    memory_point = {key: value for key, value in point.items() if canonical(key.split(".")[0]) == "memory"}
    if not recipe.measured or memory_point == point:
        return recipe
    if not memory_point:  # measured on the base (or on the file under the base's --set), compared once
        return recipe if recipe.shape == base.measured_on.shape else replace(recipe, measured_on=base.measured_on)
    measured_on = values_at(base, memory_point)
    return recipe if recipe.shape == measured_on.shape else replace(recipe, measured_on=measured_on)


def values_at(base: Base, point: dict) -> Recipe:
    if any(canonical(key.split(".")[0]) == "memory" or value is None for key, value in point.items()):
        raw = dict(base.raw)  # memory keys merge into the measured block; null restores a default
        for key, value in point.items():
            set_value(raw, key, value)
        return load(with_memory_gpu(raw, base.raw.get("gpu")), base.recipe_dir)  # as --set records it
    changes: dict = {}
    for key, value in point.items():
        set_value(changes, key, value)
    values, _ = read_values(changes)
    return resolve_as_written(base.raw, values, base.recipe_dir, base.ignored, base=base.resolved)


@dataclass
class Failures:
    """Points whose recipe is invalid (each a row with an error column), counted as the rows stream by."""
    count: int = 0
    first: str = ""


def rows(base: Base, varies: list[Vary], backends: list[str], points, failures: Failures):
    """One row per point and backend: the varied values, then plan's JSON for that backend, flattened.
    Without `backends`, every available backend; named backends come even when unavailable (with the reason).
    A point is resolved in one place, recipe_at(base, values): the base resolved once, the varied keys on top."""
    keys = [vary.key for vary in varies]
    known = Known()
    for point in points:
        values = dict(zip(keys, point))
        try:
            plan = planning.plan(recipe_at(base, values), set(backends) if backends else None, known)
        except RecipeError as error:
            failures.count += 1
            failures.first = failures.first or str(error)
            yield {**values, "error": str(error)}
            continue
        planned = {b.backend: b for b in plan.backends}
        for name in backends or [b.backend for b in plan.backends if b.available]:
            if name in planned:
                yield values | flatten_keys(backend_json(plan, planned[name]))
            else:
                yield {**values, "backend": name, "available": False,
                       "reason": f"not a backend of {plan.recipe.engine.label}"}


class Planner:
    """Plans at points of the base recipe, each once: fit's questions and recommend's bisections probe many of the
    same points (and share KV-cache specs where only max-num-seqs moves)."""

    def __init__(self, base: Base):
        self.base = base
        self.plans: dict[tuple, Plan] = {}
        self.known = Known()

    def at(self, point: dict) -> Plan:
        key = tuple(sorted(point.items()))
        if key not in self.plans:
            self.plans[key] = planning.plan(recipe_at(self.base, point), known=self.known)
        return self.plans[key]

    def backend(self, point: dict, name: str) -> tuple[Plan, BackendPlan]:
        plan = self.at(point)
        return plan, plan.backend(name)


def seqs_ceiling(r: Recipe) -> int:
    return min(r.max_num_batched_tokens, int(KEYS["max_num_seqs"].maximum))


# recommend ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    backend: str
    spec_tokens: int
    max_num_seqs: int | None  # the largest that meets every target; None when even the target concurrency fails
    kv_cache_tokens: int | None  # at max_num_seqs
    max_concurrency: float | None  # at max_num_seqs: KV tokens / max-model-len
    stops: list[str]  # why max_num_seqs + 1 (or the target concurrency, when None) fails


def pick_point(c: Candidate) -> dict:
    """A candidate as the keys that set it."""
    return {"max-num-seqs": c.max_num_seqs, "speculative-config.num_speculative_tokens": c.spec_tokens,
            "sparse-indexer-topk-backend": c.backend}


def shortfalls(plan: capacity.Plan, b: capacity.BackendPlan, min_kv_tokens: int) -> list[str]:
    """The targets this point misses; empty when it meets them all."""
    recipe, missed = plan.recipe, []
    if plan.deployment.scheduler_refusal:
        missed.append(f"above max-num-batched-tokens {recipe.max_num_batched_tokens:,} (vLLM refuses to start)")
    if b.kv_cache_tokens < min_kv_tokens:
        missed.append(f"KV cache {b.kv_cache_tokens:,} tokens per rank < {min_kv_tokens:,}")
    if b.oom.at_risk:
        missed.append(f"OOM risk on {recipe.engine.label}: room for the decode logits of {b.oom.safe_decodes} decodes "
                      f"with the margin kept ({b.oom.max_decodes} at the edge)")
    return missed


def recommend(base: Base, target_concurrency: int, min_kv_tokens: int, backends: list[str],
              spec_tokens: list[int]) -> list[Candidate]:
    """For each backend and spec-token count, the largest max-num-seqs >= target_concurrency that meets the
    targets. KV tokens only shrink and the OOM bound only tightens as max-num-seqs grows, so the feasible
    max-num-seqs form one interval [target, largest]: bisection finds its end. Best candidate first."""
    candidates = []
    planner = Planner(base)
    most = int(KEYS["max_num_seqs"].maximum)
    for k in spec_tokens:
        spec = {"speculative-config.num_speculative_tokens": k}

        def missed(seqs: int, name: str) -> list[str]:
            plan, b = planner.backend({"max-num-seqs": seqs, **spec}, name)
            return shortfalls(plan, b, min_kv_tokens)

        at_target = planner.at({"max-num-seqs": target_concurrency, **spec})
        for b in at_target.backends:
            name = b.backend
            if not (name in backends if backends else b.available):
                continue
            if not b.available:
                candidates.append(Candidate(name, k, None, None, None, [f"unavailable: {b.reason}"]))
                continue
            if at_target_missed := missed(target_concurrency, name):
                candidates.append(Candidate(name, k, None, None, None, at_target_missed))
                continue
            edge = largest(lambda seqs: missed(seqs, name), target_concurrency, seqs_ceiling(recipe_at(base, spec)))
            stops = missed(edge + 1, name) if edge < most else [f"max-num-seqs is at most {most:,}"]
            at_edge = planner.at({"max-num-seqs": edge, **spec}).backend(name)
            candidates.append(Candidate(name, k, edge, at_edge.kv_cache_tokens, at_edge.max_concurrency, stops))
    return sorted(candidates, key=lambda c: (c.max_num_seqs is None, -(c.max_num_seqs or 0), -c.spec_tokens,
                                             -(c.kv_cache_tokens or 0)))
