"""Sweeps and recommendations: many plans over varied recipe keys. Pure: rows are dicts, nothing is printed here.

Each point is applied to the raw recipe with recipe.set_value and validated by recipe.build_recipe, so every row
is what `plan --set KEY=VALUE ... --format json` prints for that point.
"""

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import yaml

from dsa_kvcalc import capacity
from dsa_kvcalc.catalog import BACKENDS, GIB
from dsa_kvcalc.recipe import (
    ALL_KEYS, COMPILATION_KEYS, ENV_KEYS, IGNORED_VLLM_KEYS, MEMORY_TERMS, PER_BACKEND_TERMS, SPECULATIVE_KEYS,
    Recipe, RecipeError, build_recipe, canonical, parse_size, set_value)
from dsa_kvcalc.render import backend_json, flatten

BACKEND_NAMES = tuple(b.name for b in BACKENDS) + (capacity.DEEPINFER.name,)
NESTED_KEYS = {"speculative-config": SPECULATIVE_KEYS, "compilation-config": COMPILATION_KEYS, "env": ENV_KEYS,
               "memory": {f"{term}_{unit}" for term in MEMORY_TERMS for unit in ("gib", "bytes")}}


@dataclass(frozen=True)
class Vary:
    key: str  # as given: a recipe key, dotted for nested keys
    values: tuple


def parse_varies(texts: list[str]) -> list[Vary]:
    if not texts:
        raise RecipeError("--vary", "nothing to sweep: give at least one --vary KEY=SPEC")
    varies = [parse_vary(text) for text in texts]
    seen = set()
    for text, vary in zip(texts, varies):
        name = ".".join(canonical(part.strip()) for part in vary.key.split("."))
        if name in seen:
            raise RecipeError(f"--vary {text}", f"{vary.key} is varied twice")
        seen.add(name)
    return varies


def parse_vary(text: str) -> Vary:
    """KEY=SPEC: SPEC is start:stop:step (stop included; 128k-style sizes and decimals too) or a comma list."""
    option = f"--vary {text}"
    if "=" not in text:
        raise RecipeError(option, "expected KEY=SPEC, e.g. max-num-seqs=64:1024:64 or kv-cache-dtype=fp8,auto")
    key, spec = (part.strip() for part in text.split("=", 1))
    check_key(option, key)
    if not spec:
        raise RecipeError(option, "no values")
    if ":" in spec:
        return Vary(key, parse_range(option, spec))
    items = [item.strip() for item in spec.split(",")]
    if not all(items):
        raise RecipeError(option, "empty value in the list")
    return Vary(key, tuple(parse_scalar(item) for item in items))


def check_key(option: str, key: str) -> None:
    top, *nested = [part.strip() for part in key.split(".")]
    name = canonical(top)
    if name in IGNORED_VLLM_KEYS:
        raise RecipeError(option, f"{top} does not change memory (dsa-kvcalc ignores it)")
    if name not in ALL_KEYS:
        raise RecipeError(option, f"unknown recipe key {top!r}; see dsa-kvcalc schema")
    if not nested:
        return
    if name not in NESTED_KEYS:
        raise RecipeError(option, f"{top} has no nested keys")
    inner, *backend = nested
    per_backend = inner.rsplit("_", 1)[0] in PER_BACKEND_TERMS
    if inner not in NESTED_KEYS[name] or len(backend) > per_backend or (backend and backend[0] not in BACKEND_NAMES):
        raise RecipeError(option, f"unknown key {key!r}; {top} takes {', '.join(sorted(NESTED_KEYS[name]))}"
                                  + (" (per backend: NAME.BACKEND)" if name == "memory" else ""))


def parse_range(option: str, spec: str) -> tuple:
    parts = [part.strip() for part in spec.split(":")]
    if len(parts) != 3:
        raise RecipeError(option, f"expected a range start:stop:step, got {spec!r}")
    try:
        start, stop, step = (parse_size(option, part) for part in parts)
    except RecipeError:
        try:
            start, stop, step = (Decimal(part) for part in parts)
        except InvalidOperation:
            raise RecipeError(option, f"range bounds and step must be numbers, got {spec!r}") from None
        if not all(part.is_finite() for part in (start, stop, step)):
            raise RecipeError(option, f"range bounds and step must be finite, got {spec!r}")
    if step <= 0:
        raise RecipeError(option, f"step must be above 0, got {step}")
    if start > stop:
        raise RecipeError(option, f"start {start} is above stop {stop}")
    if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
        return tuple(range(start, stop + 1, step))
    return tuple(float(start + i * step) for i in range(int((stop - start) / step) + 1))


def parse_scalar(text: str):
    """As YAML reads it (the way --set does): 3 is a number, fp8 a word, true a flag."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def point_count(varies: list[Vary]) -> int:
    return math.prod(len(vary.values) for vary in varies)


def points(varies: list[Vary]):
    return itertools.product(*(vary.values for vary in varies))


def recipe_at(raw: dict, recipe_dir: Path, values: dict) -> Recipe:
    point = dict(raw)
    for key, value in values.items():
        set_value(point, key, value)
    return build_recipe(point, recipe_dir)


@dataclass
class Failures:
    """Points whose recipe is invalid (each a row with an error column), counted as the rows stream by."""
    count: int = 0
    first: str = ""


def rows(raw: dict, recipe_dir: Path, varies: list[Vary], backends: list[str], points, failures: Failures):
    """One row per point and backend: the varied values, then plan's JSON for that backend, flattened.
    Without `backends`, every available backend; named backends come even when unavailable (with the reason)."""
    keys = [vary.key for vary in varies]
    only = {*backends, "auto"} if backends else None  # backend_json compares every backend with auto
    for point in points:
        values = dict(zip(keys, point))
        try:
            plan = capacity.plan(recipe_at(raw, recipe_dir, values), only)
        except RecipeError as error:
            failures.count += 1
            failures.first = failures.first or str(error)
            yield {**values, "error": str(error)}
            continue
        for b in plan.backends:
            if b.backend in backends if backends else b.available:
                yield flatten("", backend_json(plan, b), dict(values))


# recommend ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    backend: str
    spec_tokens: int
    max_num_seqs: int | None  # the largest that meets every target; None when even the target concurrency fails
    kv_cache_tokens: int | None  # at max_num_seqs
    max_concurrency: float | None  # at max_num_seqs: KV tokens / max-model-len
    stops: list[str]  # why max_num_seqs + 1 (or the target concurrency, when None) fails


def shortfalls(recipe: Recipe, b: capacity.BackendPlan, min_kv_tokens: int) -> list[str]:
    """The targets this point misses; empty when it meets them all."""
    missed = []
    if recipe.max_num_seqs > recipe.max_num_batched_tokens:
        missed.append(f"above max-num-batched-tokens {recipe.max_num_batched_tokens:,} (vLLM refuses to start)")
    if b.kv_cache_tokens < min_kv_tokens:
        missed.append(f"KV cache {b.kv_cache_tokens:,} tokens per rank < {min_kv_tokens:,}")
    if b.oom_before_fix.at_risk:
        missed.append(f"OOM risk without #62860: {b.oom_before_fix.free_bytes / GIB:.2f} GiB free holds the decode "
                      f"logits of {b.oom_before_fix.max_decodes} decodes")
    return missed


def recommend(raw: dict, recipe_dir: Path, target_concurrency: int, min_kv_tokens: int, backends: list[str],
              spec_tokens: list[int]) -> list[Candidate]:
    """For each backend and spec-token count, the largest max-num-seqs >= target_concurrency that meets the
    targets. KV tokens only shrink and the OOM bound only tightens as max-num-seqs grows, so the feasible
    max-num-seqs form one interval [target, largest]: bisection finds its end. Best candidate first."""
    candidates = []
    for k in spec_tokens:
        spec = {"speculative-config.num_speculative_tokens": k}
        ceiling = recipe_at(raw, recipe_dir, spec).max_num_batched_tokens + 1  # always fails (vLLM's rule)

        def check(seqs: int) -> dict[str, tuple[list[str], capacity.BackendPlan]]:
            recipe = recipe_at(raw, recipe_dir, {"max-num-seqs": seqs, **spec})
            plan = capacity.plan(recipe)
            return {b.backend: (shortfalls(recipe, b, min_kv_tokens), b) for b in plan.backends
                    if (b.backend in backends if backends else b.available)}

        at_target = check(target_concurrency)
        for name, (missed, b) in at_target.items():
            if not b.available:
                candidates.append(Candidate(name, k, None, None, None, [f"unavailable: {b.reason}"]))
                continue
            if missed:
                candidates.append(Candidate(name, k, None, None, None, missed))
                continue
            good, bad = target_concurrency, ceiling  # the target passed, so it is below the ceiling
            good_plan, bad_missed = b, check(bad)[name][0]
            while bad - good > 1:
                middle = (good + bad) // 2
                missed, middle_plan = check(middle)[name]
                if missed:
                    bad, bad_missed = middle, missed
                else:
                    good, good_plan = middle, middle_plan
            candidates.append(Candidate(name, k, good, good_plan.kv_cache_tokens, good_plan.max_concurrency,
                                        bad_missed))
    return sorted(candidates, key=lambda c: (c.max_num_seqs is None, -(c.max_num_seqs or 0), -c.spec_tokens,
                                             -(c.kv_cache_tokens or 0)))
