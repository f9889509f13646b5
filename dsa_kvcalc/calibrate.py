"""Calibration: a vLLM startup log's measured terms set against plan() for the same recipe, and the recipe `memory`
block that makes plan() reproduce the log. Pure: takes a LogReading and a raw recipe, returns data.

The log is read as its vLLM version logs: plan's own tokens for that version (no release up to 0.33.0 has PR #62860, so
its peak activation is the base peak) are the ones that must reproduce the log's KV tokens. A second log of the same
deployment on vLLM main after #62860 gives the indexer headroom: headroom = reserved - (KV bytes before - KV after).
"""

import math
import re
from dataclasses import dataclass, field, replace

from dsa_kvcalc import capacity, planning
from dsa_kvcalc import engine as engines
from dsa_kvcalc.catalog import GPUS
from dsa_kvcalc.deployment import draft_layers, kv_spec, resolve, sparse_mla_backend
from dsa_kvcalc.memory_terms import RankMemory
from dsa_kvcalc.engine import RELEASES, build_of
from dsa_kvcalc.kv_cache import round_up
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.keys import KEYS, Recipe, RecipeError, canonical, memory_unit
from dsa_kvcalc.recipe import load
from dsa_kvcalc.values import check_value
from dsa_kvcalc.vllm_log import LogReading, OomReading, RankReading

# Engine arguments of the non-default args line that the recipe takes (vLLM's spelling): the keys declared args_line.
RECIPE_ARGS = {k.name.split(".")[0].replace("-", "_") for k in KEYS.values() if k.args_line}
PRINT_ROUNDING_BYTES = GIB // 200  # the log prints GiB with two decimals: each term is within 0.005 GiB
GPU_MATCH_BYTES = GIB // 20  # a logged total memory names a catalog GPU within 0.05 GiB
ESTIMATED_NON_TORCH = "plan's estimate (the log gives only the sum with activation)"
MEMORY_LINES = "Model loading took, Actual usage is ..., Available KV cache memory, Estimated CUDA graph memory"


@dataclass(frozen=True)
class Measured:
    """The sizing rank's terms in bytes (None where the log printed nothing), and the engine's KV figures."""

    rank: str
    ranks: int
    version: str | None = None
    weights_bytes: int | None = None
    peak_activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None  # the estimate the KV sizing subtracted
    available_kv_bytes: int | None = None
    total_memory_bytes: int | None = None
    approximate_total_memory_bytes: int | None = None  # graphs estimate / (utilisation - utilisation without graphs)
    kv_tokens: int | None = None
    max_model_len: int | None = None
    max_concurrency: float | None = None
    disagreements: list[str] = field(default_factory=list)
    lines: dict = field(default_factory=dict)  # a figure above -> the number of the log's line it was read from


@dataclass(frozen=True)
class TermRow:
    term: str
    unit: str  # bytes, B/token or tokens
    log: int | None
    plan: int | None
    source: str  # where the calibrated value comes from
    line: int | None = None  # the number of the log's line the log's figure was read from

    @property
    def difference(self) -> int | None:
        """plan - log, where both have the term."""
        return None if self.log is None or self.plan is None else self.plan - self.log


@dataclass(frozen=True)
class Headroom:
    backend: str
    reserved_bytes: int
    kv_bytes_before: int
    kv_bytes_after: int
    headroom_bytes: int
    kv_source: str
    after_tokens_log: int | None
    after_tokens_plan: int


@dataclass(frozen=True)
class OomMeasure:
    """A CUDA out-of-memory message read against the recipe's plan: which decode-logits allocation failed, at how many
    decodes, and the room the step had for them."""
    backend: str
    allocation: str  # what failed: the logits, or their FP32 copy
    decodes: int
    allocation_bytes: int  # that allocation as plan sizes it at those decodes, in 2 MiB segments
    free_bytes: int  # the message's free memory, at the low end of its rounding
    live_bytes: int  # the same call's BF16 logits, live when their FP32 copy failed
    room_bytes: int  # free + live: what the step had for the decode logits
    unprofiled_bytes: int  # total - held - KV-init buffers - room (capacity.oom)
    max_decodes: int  # re-planned with it: the edge
    safe_decodes: int  # and the margin below it
    margin_bytes: int


@dataclass(frozen=True)
class Calibration:
    recipe: Recipe
    raw_recipe: dict  # the recipe as read (--recipe, or the log's engine arguments) with the calibrated memory block
    recipe_source: str
    measured: Measured
    rows: list[TermRow]
    memory: dict  # the memory block written: term name -> bytes (per backend where the recipe keys it)
    kv_tokens_calibrated: int
    block_tokens: int  # the logged tokens one block is worth
    kv_bytes_per_token_implied: int | None
    notes: list[str]
    headroom: Headroom | None = None
    warnings: list[str] = field(default_factory=list)
    oom: OomMeasure | None = None


def gib_bytes(value: float | None) -> int | None:
    return None if value is None else round(value * GIB)


def sizing_rank(reading: LogReading) -> RankReading | None:
    """vLLM sizes the KV cache on the worker with the least memory left: the rank with the smallest Available KV."""
    with_kv = [r for r in reading.ranks if r.available_kv_gib is not None]
    if with_kv:
        return min(with_kv, key=lambda r: r.available_kv_gib)
    return next((r for r in reading.ranks if r.weights_gib is not None or r.consumed_gib is not None), None)


def measure(reading: LogReading) -> Measured:
    rank = sizing_rank(reading)
    if rank is None:
        found = sorted({name for r in reading.ranks for name, v in vars(r).items()
                        if v is not None and name not in ("rank", "lines")})
        found += ["non-default args"] if reading.engine_args else []
        have = f" (found only: {', '.join(found)})" if found else ""
        raise RecipeError("log", f"no memory terms: none of {MEMORY_LINES}{have}; nothing to calibrate")

    lines = {}

    def first(name: str, figure: str):
        """The sizing rank's figure, else the first rank's that printed it; its line noted as figure's."""
        reader = rank if getattr(rank, name) is not None else next(
            (r for r in reading.ranks if getattr(r, name) is not None), None)
        if reader is None:
            return None
        lines[figure] = reader.lines[name]
        return getattr(reader, name)

    weights = first("weights_gib", "weights_bytes") if rank.weights_gib is not None else None
    non_torch = first("non_torch_gib", "non_torch_bytes") if rank.non_torch_gib is not None else None
    if non_torch is None and rank.consumed_gib is not None and weights is not None:
        non_torch = rank.consumed_gib - weights
        lines["non_torch_bytes"] = rank.lines["consumed_gib"]
    peak = first("peak_activation_gib", "peak_activation_bytes") if rank.peak_activation_gib is not None else None
    available = first("available_kv_gib", "available_kv_bytes") if rank.available_kv_gib is not None else None
    disagreements = []
    for name, unit in (("weights_gib", "GiB"), ("available_kv_gib", "GiB"), ("peak_activation_gib", "GiB"),
                       ("kv_tokens", "tokens")):
        values = sorted({getattr(r, name) for r in reading.ranks if getattr(r, name) is not None})
        if len(values) > 1:
            disagreements.append(f"ranks disagree on {name.removesuffix('_gib').replace('_', ' ')}: {values[0]:,} - "
                                 f"{values[-1]:,} {unit}; using {rank.rank or 'the unprefixed process'} (least "
                                 f"Available KV) and the first KV tokens line")
    return Measured(
        rank=rank.rank, ranks=len(reading.ranks), version=first("version", "version"),
        weights_bytes=gib_bytes(weights), peak_activation_bytes=gib_bytes(peak),
        non_torch_bytes=gib_bytes(non_torch), cudagraph_bytes=gib_bytes(first("cudagraph_estimated_gib",
                                                                                "cudagraph_bytes")),
        available_kv_bytes=gib_bytes(available),
        total_memory_bytes=gib_bytes(first("total_memory_gib", "total_memory_bytes")),
        approximate_total_memory_bytes=approximate_total(rank),
        kv_tokens=first("kv_tokens", "kv_tokens"), max_model_len=first("max_model_len", "max_model_len"),
        max_concurrency=first("max_concurrency", "max_concurrency"), disagreements=disagreements, lines=lines)


def approximate_total(rank: RankReading) -> int | None:
    """vLLM prints the utilisation that would leave the same KV without graph profiling (4 decimals): the gap is
    graphs / total memory, which gives the device's memory to within about 1 %."""
    if None in (rank.cudagraph_estimated_gib, rank.gpu_memory_utilization, rank.utilization_without_graphs):
        return None
    gap = rank.gpu_memory_utilization - rank.utilization_without_graphs
    return round(rank.cudagraph_estimated_gib / gap * GIB) if gap > 0 else None


def model_name(value: str) -> str:
    """A Hugging Face cache path (.../models--deepseek-ai--DeepSeek-V3.2/snapshots/...) names its repository."""
    match = re.search(r"models--([^/]+?)--([^/]+)", value)
    return f"{match[1]}/{match[2]}" if match else value


def recipe_from_log(reading: LogReading) -> tuple[dict, list[str]]:
    """The raw recipe the log's engine arguments describe (vLLM's keys), and notes on what could not be read."""
    args = reading.engine_args
    if args is None:
        return {}, ["the log has no non-default args line: every engine argument is vLLM's default or --set"]
    raw = {canonical(k): v for k, v in args.values.items() if k in RECIPE_ARGS}
    if isinstance(raw.get("model"), str):
        raw["model"] = model_name(raw["model"])
    notes = []
    if args.truncated:
        notes.append(f"the non-default args line is cut short: read {len(args.values)} arguments, the last one is lost "
                     f"(check the recipe, or give --recipe)")
    unread = [k for k in args.unreadable if k in RECIPE_ARGS]
    if unread:
        notes.append(f"not readable as literals, left at their defaults: {', '.join(unread)}")
    rank = sizing_rank(reading)
    if "max-model-len" not in raw and rank is not None and rank.max_model_len:
        raw["max-model-len"] = rank.max_model_len
    return raw, notes


def log_version(measured: Measured, reading: LogReading) -> tuple[str | None, str]:
    """The vLLM version a log comes from: the one it prints where that names a release (or main), else the release
    its [file.py:LINE] stamps name."""
    printed, releases = measured.version, reading.releases
    if printed is not None:
        try:
            return build_of(printed), f"vllm-version {build_of(printed)}: as the log prints it ({printed})"
        except ValueError as error:
            if not releases:
                raise RecipeError("log", f"{error} (its [file.py:LINE] stamps match no release either)") from None
    if not releases:
        return None, ""
    alike = f" ({', '.join(releases)}: the same rules)" if len(releases) > 1 else ""
    stamps = ", ".join(sorted(reading.stamps)[:4])
    unnamed = f"the log prints {printed}, no release" if printed else "the log prints no version"
    return releases[-1], f"vllm-version {releases[-1]}: {unnamed}; its stamps {stamps} are this release's{alike}"


def version_from_kv(raw: dict, measured: Measured, recipe_dir) -> tuple[str | None, str]:
    """For a log that names no release (no version, no [file.py:LINE] stamps): the releases whose KV-cache rules turn
    its Available KV memory (printed to 0.01 GiB) into its logged tokens; the newest of them."""
    if measured.available_kv_bytes is None or measured.kv_tokens is None:
        return None, ""
    fits = []
    for release in RELEASES:
        try:
            kv = resolve(load({**raw, "vllm-version": release}, recipe_dir)).kv
        except RecipeError:  # a release that predates the model, or refuses it
            continue
        low, high = (kv.tokens(measured.available_kv_bytes + d * PRINT_ROUNDING_BYTES) for d in (-1, 1))
        if low <= measured.kv_tokens <= high:
            fits.append(release)
    if not fits:
        return None, "the log names no release, and no release's KV-cache rules give its tokens from its KV memory"
    return fits[-1], (f"vllm-version {fits[-1]}: the log names no release; its KV memory gives its tokens under the "
                      f"KV-cache rules of {fits[0]} to {fits[-1]} (the newest taken)")


def with_log_facts(raw: dict, measured: Measured, reading: LogReading, recipe_dir) -> tuple[dict, list[str]]:
    """The log's vLLM version, where the recipe names none; enforce-eager, where the log says "Enforce eager set" and
    the recipe does not say it."""
    named = {canonical(k): v for k, v in raw.items() if isinstance(k, str)}
    raw, notes = dict(raw), []
    version, how = log_version(measured, reading)
    if version is None and "vllm-version" not in named:
        version, how = version_from_kv(raw, measured, recipe_dir)
    if version is not None and "vllm-version" not in named:
        raw["vllm-version"] = version
        notes.append(how)
    eager = reading.eager
    if eager and named.get("enforce-eager") is not True:
        raw = {k: v for k, v in raw.items() if not (isinstance(k, str) and canonical(k) == "enforce-eager")}
        raw["enforce-eager"] = True
        notes.append("enforce-eager: the log says 'Enforce eager set' (no CUDA graphs)")
    return raw, notes


def gpu_from_memory(total_bytes: int | None) -> str | None:
    if total_bytes is None:
        return None
    return next((g.name for g in GPUS if abs(g.total_memory_bytes - total_bytes) <= GPU_MATCH_BYTES), None)


def require(raw: dict, measured: Measured, reading: LogReading) -> dict:
    """model and gpu (and the tensor-parallel size, where the log's ranks are tensor-parallel but no line gives it),
    or one line naming every one that is missing and how to give it."""
    raw = dict(raw)
    named = {canonical(k) for k in raw if isinstance(k, str)}
    missing = []
    if "gpu" not in named:
        gpu = gpu_from_memory(measured.total_memory_bytes)
        if gpu is None:
            seen = (f"its device has {measured.total_memory_bytes / GIB:.2f} GiB, no catalog GPU"
                    if measured.total_memory_bytes else "no total-memory line")
            missing.append(("gpu", f"--set gpu=NAME ({seen})"))
        else:
            raw["gpu"] = gpu
    if "model" not in named:
        missing.append(("model", "--set model=NAME or --recipe (no non-default args line)"))
    tensor_parallel = sorted({r.rank.split()[0] for r in reading.ranks if re.search(r"(^|_)TP\d", r.rank)})
    if reading.engine_args is None and "tensor-parallel-size" not in named and tensor_parallel:
        missing.append(("tensor-parallel-size", f"--set tensor-parallel-size=N (the log's ranks are "
                                                f"{', '.join(tensor_parallel)}, and no line gives the size)"))
    if missing:
        raise RecipeError(", ".join(key for key, _ in missing), "the log does not give "
                          + ("it" if len(missing) == 1 else "them") + ": " + "; ".join(how for _, how in missing))
    return raw


def recipe_source(reading: LogReading) -> str:
    """Where a recipe read from the log comes from: its non-default args line or its engine config line."""
    args = reading.engine_args
    if args is None:
        return "from vLLM's defaults: the log has no non-default args or engine config line"
    return f"from the log's {args.kind}, line {args.line}"


def kv_target_bytes(memory: RankMemory, measured: Measured) -> tuple[int | None, bool | None]:
    """The KV bytes plan must reach: the logged tokens through plan's KV-cache groups when they agree with the
    logged Available KV memory (exact to the block, unlike the two-decimal GiB), else the logged memory."""
    tokens = measured.kv_tokens
    available = measured.available_kv_bytes
    if tokens is None:
        return available, None
    tokens_bytes = memory.kv.bytes_for(tokens)
    if available is None:
        return tokens_bytes, None
    agrees = abs(tokens_bytes - available) <= PRINT_ROUNDING_BYTES + memory.kv.block_bytes
    return (tokens_bytes if agrees else available), agrees


def logged_token_bytes(recipe: Recipe) -> int:
    return kv_spec(recipe, sparse_mla_backend(recipe)).bytes_per_logged_token


def mismatch_notes(recipe: Recipe, measured: Measured, kv_per_token: int, implied: int) -> list[str]:
    notes = [f"KV bytes per logged token: the log implies {implied:,} B (Available KV "
             f"{measured.available_kv_bytes / GIB:.2f} GiB / {measured.kv_tokens:,} tokens); plan's KV-cache groups give "
             f"{kv_per_token:,} B for {recipe.model.name} with {recipe.kv_cache_dtype} KV on {recipe.engine.label}"]
    mtp_on = bool(draft_layers(recipe))
    toggled = replace(recipe, num_speculative_tokens=0 if mtp_on else 1, speculative_method="mtp")
    if recipe.model.mtp_layers and abs(logged_token_bytes(toggled) - implied) < abs(kv_per_token - implied):
        notes.append(f"with{'out' if mtp_on else ''} the MTP layer's KV cache the figure is "
                     f"{logged_token_bytes(toggled):,} B: set speculative-config to match the deployment")
    if recipe.decode_context_parallel_size > 1:
        notes.append(f"DCP {recipe.decode_context_parallel_size}: the logged tokens are logical (x DCP) per rank")
    return notes


def device_notes(recipe: Recipe, measured: Measured) -> list[str]:
    """Where the log's device is not the recipe's GPU."""
    total, approximate, gpu = measured.total_memory_bytes, measured.approximate_total_memory_bytes, recipe.gpu
    if total and abs(total - gpu.total_memory_bytes) > GPU_MATCH_BYTES:
        return [f"the log's device has {total / GIB:.2f} GiB; {gpu.name} in the catalog has "
                f"{gpu.total_memory_bytes / GIB:.2f} GiB: the derived terms absorb the gap"]
    if total is None and approximate and abs(approximate / gpu.total_memory_bytes - 1) > 0.02:
        return [f"the log's device has about {approximate / GIB:.1f} GiB (CUDA graph estimate / utilisation gap), not "
                f"{gpu.name}'s {gpu.total_memory_bytes / GIB:.2f} GiB: the derived terms absorb the gap; is the gpu "
                f"right?"]
    return []


@dataclass(frozen=True)
class Split:
    """Peak activation and non-torch memory, from the log or from vLLM's sizing identity, and where each came from."""
    activation: int
    non_torch: int
    sources: dict
    notes: list[str]


def split_residual(recipe: Recipe, residual: int, activation: int | None, non_torch: int | None,
                   estimate_non_torch: int, tolerance: int) -> Split:
    """activation + non-torch = residual (vLLM's identity): logged terms where the log has them, the rest derived."""
    derived = "derived: requested - logged terms - KV"
    if activation is not None and non_torch is not None:
        gap = residual - activation - non_torch
        if abs(gap) <= tolerance:
            return Split(activation + gap, non_torch, {"peak_activation": "log", "non_torch": "log"},
                         [f"peak activation adjusted by {gap / 2**20:+.1f} MiB: the log's terms are rounded to 0.01 "
                          f"GiB; the adjustment makes them add up to its KV tokens"])
        return Split(activation, non_torch, {"peak_activation": "log", "non_torch": "log"},
                     [f"the logged terms leave {gap / GIB:+.2f} GiB unexplained on {recipe.gpu.name} at "
                      f"gpu-memory-utilization {recipe.gpu_memory_utilization}: check the gpu and the utilisation"])
    if activation is not None:
        return Split(activation, max(residual - activation, 0), {"peak_activation": "log", "non_torch": derived}, [])
    if non_torch is not None:
        return Split(max(residual - non_torch, 0), non_torch, {"peak_activation": derived, "non_torch": "log"}, [])
    if residual < estimate_non_torch:
        return Split(0, residual, {"peak_activation": derived, "non_torch": derived},
                     [f"the log leaves {residual / GIB:.2f} GiB for peak activation and non-torch together, less than "
                      f"plan's non-torch estimate alone: all of it taken as non-torch"])
    return Split(residual - estimate_non_torch, estimate_non_torch,
                 {"peak_activation": "derived: requested - weights - graphs - KV - non-torch estimate",
                  "non_torch": ESTIMATED_NON_TORCH},
                 [f"the log gives peak activation + non-torch only as a sum ({residual / GIB:.2f} GiB, from vLLM's "
                  f"sizing identity); split with plan's non-torch estimate"])


def profiled_terms(recipe: Recipe, estimate: capacity.Plan, measured: Measured, weights: int, graphs: int,
                   target: int) -> Split:
    """The log's peak activation and non-torch memory, as the recipe's memory block keeps them: without the CUDA
    graphs and without #62860's reservation of the decode logits."""
    notes = []
    activation = measured.peak_activation_bytes
    if activation is not None and recipe.engine.logged_peak_includes_cudagraphs:
        activation -= graphs
        notes.append(f"{recipe.engine.label} logs peak activation with the CUDA-graph estimate in it (vLLM PR #49208): "
                     f"taken out")
    # vLLM's sizing identity, solved for what the log gives only as a sum: activation + non-torch
    subtracted = graphs if estimate.cudagraph_estimate.subtracted else 0
    residual = capacity.kv_cache_bytes(recipe.kv_cache_memory_bytes, estimate.memory.requested_bytes, weights, 0, 0,
                                      subtracted) - target
    if residual < 0:
        logged_bytes = weights + subtracted + target
        raise RecipeError("gpu", f"the log's weights, CUDA graphs and KV ({logged_bytes / GIB:.2f} GiB) exceed "
                                 f"what {recipe.gpu.name} at gpu-memory-utilization {recipe.gpu_memory_utilization} "
                                 f"allows ({estimate.memory.requested_bytes / GIB:.2f} GiB): is the gpu right?")
    split = split_residual(recipe, residual, activation, measured.non_torch_bytes, estimate.memory.non_torch.bytes,
                           4 * PRINT_ROUNDING_BYTES + estimate.memory.kv.block_bytes)
    notes += split.notes
    activation = split.activation
    if recipe.reserves_decode_logits:
        rise = estimate.backend(recipe.topk_backend).peak_activation_bytes - estimate.memory.base_peak.bytes
        activation = max(activation - rise, 0)  # the base peak, before the reservation (#62860, or the kpool indexer's)
        notes.append(f"{recipe.engine.label} reserves the decode logits in its profile run: the profile's peak holds "
                     f"{rise / GIB:.2f} GiB of it above the prefill budget; the memory block keeps the base peak")
    return replace(split, activation=activation, notes=notes)


def logged_graphs(recipe: Recipe, estimate: capacity.Plan, measured: Measured) -> tuple[int, str, list[str]]:
    """The CUDA-graph memory this release subtracted: the log's estimate, none where it subtracts none, or plan's
    estimate where it does but the log does not print it (an excerpt, a fork)."""
    if measured.cudagraph_bytes is not None:
        return measured.cudagraph_bytes, "log", []
    if not estimate.cudagraph_estimate.subtracted:
        return 0, "log (none)", [f"no CUDA graph estimate in the log, and {recipe.engine.label} subtracts none for this "
                                 f"recipe"]
    graphs = estimate.backend(recipe.topk_backend).cudagraph.bytes
    return graphs, "plan's estimate", [
        f"no CUDA graph estimate in the log, but {recipe.engine.label} subtracts one for this recipe: plan's "
        f"{graphs / GIB:.2f} GiB stands in, and what the log's KV leaves absorbs its error"]


def calibrate(reading: LogReading, raw: dict, recipe_source: str, recipe_dir) -> Calibration:
    measured = measure(reading)
    raw, notes = with_log_facts(require(raw, measured, reading), measured, reading, recipe_dir)
    recipe = load(raw, recipe_dir)
    if recipe.engine.profile_holds_decode_logits:
        raise RecipeError("engine", f"calibrate reads vLLM startup logs; this recipe runs {recipe.engine.label}")
    estimate = planning.plan(recipe)
    kv_per_token = logged_token_bytes(recipe)  # DeepSeek V4: each request's window and state pages folded in
    notes += device_notes(recipe, measured)
    graphs, graphs_source, graph_notes = logged_graphs(recipe, estimate, measured)
    notes += graph_notes
    target, agrees = kv_target_bytes(estimate.memory, measured)
    if target is None:
        raise RecipeError("log", "no Available KV cache memory or GPU KV cache size (cut short before the KV cache was "
                                 "sized?): calibrating needs the KV the other terms left")
    implied = None
    if measured.available_kv_bytes is not None and measured.kv_tokens:
        implied = round(measured.available_kv_bytes / measured.kv_tokens)  # per logged token, as plan's figure is
    if agrees is False and implied is not None:  # no per-token figure without KV tokens
        notes += mismatch_notes(recipe, measured, kv_per_token, implied)
    weights, rest, weight_notes = logged_weights(recipe, estimate, measured, graphs, target)
    notes += weight_notes
    split = profiled_terms(recipe, estimate, measured, weights, graphs, target)
    notes += split.notes
    memory = {"weights": weights, "peak_activation": split.activation, "non_torch": split.non_torch,
              "cudagraph": {recipe.topk_backend: graphs}}
    sources = split.sources | {"weights": "log" if measured.weights_bytes is not None else rest or "plan's estimate",
                               "cudagraph": graphs_source}
    # The memory block holds what the log gives (and what its sums leave): plan's own estimate written there would
    # read back as measured. No CUDA graphs is a measurement only where the recipe captures none.
    non_torch_estimated = sources["non_torch"] == ESTIMATED_NON_TORCH  # then the peak is the logged sum less it
    if rest == "weights":  # the others are plan's estimates
        kept = {"weights"}
    else:
        kept = {"peak_activation"} | ({"weights"} if measured.weights_bytes is not None else set())
        kept |= set() if non_torch_estimated else {"non_torch"}
        rest = "peak_activation" if non_torch_estimated or measured.weights_bytes is None else None
    if graphs_source == "log" or recipe.cudagraph_mode == "NONE":
        kept.add("cudagraph")
    calibrated_raw = with_memory(raw, {t: v for t, v in memory.items() if t in kept}, recipe.gpu.name, rest)
    oom = None
    if reading.oom is not None:  # the same deployment died later in the log: the room it had at run time
        calibrated_raw, oom = oom_measure(reading.oom, calibrated_raw, recipe_dir)
        memory["unprofiled"] = oom.unprofiled_bytes
    calibrated = planning.plan(load(calibrated_raw, recipe_dir))
    return Calibration(recipe=calibrated.recipe, raw_recipe=calibrated_raw, recipe_source=recipe_source,
                       measured=measured, rows=term_rows(recipe, estimate, measured, sources, implied, kv_per_token),
                       memory=memory, kv_tokens_calibrated=calibrated.backend(recipe.topk_backend).kv_cache_tokens,
                       block_tokens=math.ceil(recipe.max_model_len / estimate.memory.kv.pages_per_request),
                       kv_bytes_per_token_implied=implied, notes=notes, warnings=measured.disagreements, oom=oom)


def calibrate_oom(reading: LogReading, raw: dict, recipe_source: str, recipe_dir) -> Calibration:
    """A log that holds an out-of-memory message and no memory lines (the seed's traceback): the recipe says the
    deployment, the message the room its step had."""
    calibrated_raw, oom = oom_measure(reading.oom, raw, recipe_dir)
    calibrated = planning.plan(load(calibrated_raw, recipe_dir))
    return Calibration(recipe=calibrated.recipe, raw_recipe=calibrated_raw, recipe_source=recipe_source,
                       measured=Measured(reading.oom.rank, 1), rows=[], memory={"unprofiled": oom.unprofiled_bytes},
                       kv_tokens_calibrated=calibrated.backend(oom.backend).kv_cache_tokens,
                       block_tokens=math.ceil(calibrated.recipe.max_model_len / calibrated.memory.kv.pages_per_request),
                       kv_bytes_per_token_implied=None, notes=[], oom=oom)


def logged_weights(recipe: Recipe, estimate: capacity.Plan, measured: Measured, graphs: int,
                   target: int) -> tuple[int, str | None, list[str]]:
    """The weights per rank: the log's, else plan's estimate; where that estimate leaves less than plan's peak and
    non-torch estimates beside the log's KV, the weights are the rest of the sum instead (memory.rest)."""
    if measured.weights_bytes is not None:
        return measured.weights_bytes, None, []
    weights = estimate.memory.weights.bytes
    others = estimate.memory.base_peak.bytes + estimate.memory.non_torch.bytes
    subtracted = graphs if estimate.cudagraph_estimate.subtracted else 0
    spare = capacity.kv_cache_bytes(recipe.kv_cache_memory_bytes, estimate.memory.requested_bytes, weights, others, 0,
                                   subtracted) - target
    if spare > 0 or recipe.kv_cache_memory_bytes is not None:
        return weights, None, [f"the log prints no weights: plan's estimate ({weights / GIB:.2f} GiB) stands in, and "
                               f"the peak activation is what the log's KV leaves"]
    rest = estimate.memory.requested_bytes - subtracted - target - others
    if rest < 0:
        raise RecipeError("log", f"its KV ({target / GIB:.2f} GiB) and CUDA graphs leave less than plan's peak and "
                                 f"non-torch estimates on {recipe.gpu.name} at gpu-memory-utilization "
                                 f"{recipe.gpu_memory_utilization}: is the gpu right?")
    return rest, "weights", [f"the log prints no weights, and plan's estimate ({weights / GIB:.2f} GiB) does not fit "
                             f"beside its KV: the weights are what the KV leaves after plan's peak and non-torch "
                             f"estimates ({rest / GIB:.2f} GiB)"]


def term_rows(recipe: Recipe, estimate: capacity.Plan, measured: Measured, sources: dict, implied: int | None,
              kv_per_token: int) -> list[TermRow]:
    """What the log says against what plan predicts for the same recipe, term by term."""
    memory, selected = estimate.memory, estimate.backend(recipe.topk_backend)
    line = measured.lines.get
    return [
        TermRow("weights", "bytes", measured.weights_bytes, memory.weights.bytes, sources["weights"],
                line("weights_bytes")),
        TermRow("peak activation", "bytes", measured.peak_activation_bytes, memory.base_peak.bytes,
                sources["peak_activation"], line("peak_activation_bytes")),
        TermRow("non-torch", "bytes", measured.non_torch_bytes, memory.non_torch.bytes, sources["non_torch"],
                line("non_torch_bytes")),
        TermRow("CUDA graphs", "bytes", measured.cudagraph_bytes, selected.cudagraph.bytes, sources["cudagraph"],
                line("cudagraph_bytes")),
        TermRow("KV memory", "bytes", measured.available_kv_bytes, selected.kv_cache_bytes, "log",
                line("available_kv_bytes")),
        TermRow("KV bytes per logged token", "B/token", implied, kv_per_token, "KV-cache groups"),
        TermRow("KV tokens", "tokens", measured.kv_tokens, selected.kv_cache_tokens, "log", line("kv_tokens")),
    ]


def with_memory(raw: dict, memory: dict, gpu: str, rest: str | None = None) -> dict:
    """raw with its memory block's terms replaced by the calibrated ones (in bytes), the GPU they were measured on
    and the term that is the rest of a sum (memory.rest); other terms kept, and their rest if it is not replaced."""
    block = {k: v for k, v in (raw.get("memory") or {}).items()
             if memory_unit(str(k))[0] not in memory and not (k == "rest" and v in memory)}
    written = block | {f"{term}_bytes": value for term, value in memory.items()} | {"gpu": gpu}
    return {**raw, "memory": written | ({"rest": rest} if rest else {})}


def measured_kv_bytes(recipe: Recipe, rank: Measured) -> tuple[int, str]:
    if rank.available_kv_bytes is not None:
        return rank.available_kv_bytes, "Available KV cache memory"
    return (resolve(recipe).kv.bytes_for(rank.kv_tokens),
            "GPU KV cache size through plan's KV-cache groups")


def headroom_from_logs(recipe: Recipe, before: Measured, after: Measured) -> Headroom:
    """How far the profile's peak sat above what was live inside the indexer: the #62860 reservation minus the KV
    it cost."""
    for name, rank in (("log", before), ("--after", after)):
        if rank.available_kv_bytes is None and rank.kv_tokens is None:
            raise RecipeError(name, "no Available KV cache memory or GPU KV cache size: the headroom needs both logs' KV")
    both_memory = before.available_kv_bytes is not None and after.available_kv_bytes is not None
    if not both_memory:  # compare like with like: tokens x bytes per token in both
        before, after = replace(before, available_kv_bytes=None), replace(after, available_kv_bytes=None)
    kv_before, source = measured_kv_bytes(recipe, before)
    kv_after, _ = measured_kv_bytes(recipe, after)
    reserved = planning.plan(recipe).backend(recipe.topk_backend).with_fix.reserved_bytes
    headroom = reserved - (kv_before - kv_after)
    if not 0 <= headroom <= reserved:
        raise RecipeError("--after", f"the KV cache changed by {(kv_before - kv_after) / GIB:.2f} GiB against a "
                                     f"reservation of {reserved / GIB:.2f} GiB: not the same deployment before and "
                                     f"after vLLM #62860?")
    return Headroom(recipe.topk_backend, reserved, kv_before, kv_after, headroom, source, after.kv_tokens, 0)


def calibrate_pair(reading: LogReading, after_reading: LogReading, raw: dict, recipe_source: str,
                   recipe_dir) -> Calibration:
    """Calibrate on the log before #62860, then derive the indexer headroom from the log after it."""
    result = calibrate(reading, raw, recipe_source, recipe_dir)
    before, after = result.measured, measure_kv(after_reading)
    if (after.available_kv_bytes, after.kv_tokens) == (before.available_kv_bytes, before.kv_tokens):
        raise RecipeError("--after", "its KV figures are the first log's: the same log twice? (Were #62860 to change "
                                     "nothing, the two logs would say nothing of the headroom either)")
    if after.version is None:
        raise RecipeError("--after", "the log prints no vLLM version: the headroom needs the log of a vLLM that "
                                     "reserves the decode logits (#62860), and this one does not say which it is")
    if not engines.vllm(check_value("--after", KEYS["vllm_version"], after.version)).reserves_decode_logits:
        raise RecipeError("--after", f"the log is of vLLM {after.version}, which does not reserve the decode logits "
                                     f"(#62860): give the log of a vLLM with the fix")
    headroom = headroom_from_logs(result.recipe, before, after)
    measured = {"indexer_headroom": {headroom.backend: headroom.headroom_bytes}}
    memory = result.memory | measured
    raw_recipe = with_memory(result.raw_recipe, measured, result.recipe.gpu.name)
    after_tokens = planning.plan(load(raw_recipe, recipe_dir)).backend(headroom.backend).with_fix.kv_cache_tokens
    return replace(result, raw_recipe=raw_recipe, memory=memory,
                   headroom=replace(headroom, after_tokens_plan=after_tokens))


def measure_kv(reading: LogReading) -> Measured:
    """The after log needs only its KV figures."""
    rank = sizing_rank(reading) or next((r for r in reading.ranks if r.kv_tokens is not None), None)
    if rank is None:
        raise RecipeError("--after", "no Available KV cache memory or GPU KV cache size in the log")
    tokens = rank.kv_tokens or next((r.kv_tokens for r in reading.ranks if r.kv_tokens is not None), None)
    version = rank.version or next((r.version for r in reading.ranks if r.version is not None), None)
    return Measured(rank=rank.rank, ranks=len(reading.ranks), version=version,
                    available_kv_bytes=gib_bytes(rank.available_kv_gib), kv_tokens=tokens,
                    max_model_len=rank.max_model_len, max_concurrency=rank.max_concurrency)


# An out-of-memory message: the room a step had for the decode logits ---------------------------------------------

SEGMENT_BYTES = 2 * MIB  # PyTorch rounds a large request up to 2 MiB segments before it prints it (capacity.py)


def failed_allocation(oom: OomReading, b: capacity.BackendPlan, per_seq: int) -> tuple[str, int, int]:
    """(what failed, decodes, live bytes): the decode-logits allocation of the backend whose size, at a whole number of
    decodes up to the worst step, prints as the message's "Tried to allocate". Where several match, the fewest
    decodes (the least room)."""
    dl = b.decode_logits
    kinds = [("the FP32 copy", 4, dl.logits_bytes_per_element)] if dl.copy_bytes_per_element else []
    kinds.append((f"the {dl.logits_dtype.upper()} logits", dl.logits_bytes_per_element, 0))
    matches = []
    for name, element_bytes, live_element_bytes in kinds:
        per_decode = per_seq * dl.padded_columns * element_bytes
        low, high = oom.tried.bytes - oom.tried.rounding_bytes, oom.tried.bytes + oom.tried.rounding_bytes
        for decodes in range(max(low // per_decode - 1, 1), min(high // per_decode + 2, b.oom.worst_decodes + 1)):
            if low <= round_up(decodes * per_decode, SEGMENT_BYTES) <= high:
                matches.append((decodes, name, decodes * per_seq * dl.padded_columns * live_element_bytes))
    if not matches:
        raise RecipeError("log", f"its out-of-memory message tried to allocate {oom.tried.bytes / GIB:.2f} GiB: no "
                                 f"decode logits of this recipe ({b.backend}, {dl.padded_columns:,} columns, up to "
                                 f"{b.oom.worst_decodes} decodes of {per_seq} rows) take that; is it this deployment's?")
    decodes, name, live = min(matches)
    return name, decodes, live


def oom_measure(oom: OomReading, raw: dict, recipe_dir) -> tuple[dict, OomMeasure]:
    """The memory block's unprofiled term from the message: the step had free (the low end of its rounding) plus the
    logits live in the same call, so unprofiled = total - held - KV-init buffers - that room (capacity.oom's room
    formula, solved for its one unknown). The recipe with it and what plan then says."""
    recipe = load(raw, recipe_dir)
    if abs(oom.total.bytes - recipe.gpu.total_memory_bytes) > oom.total.rounding_bytes:
        raise RecipeError("gpu", f"the out-of-memory message's GPU has {oom.total.bytes / GIB:.2f} GiB; "
                                 f"{recipe.gpu.name} has {recipe.gpu.total_memory_bytes / GIB:.2f} GiB")
    plan = planning.plan(recipe)
    b = plan.backend(recipe.topk_backend)
    if not b.available:
        raise RecipeError("sparse-indexer-topk-backend", f"{b.backend} cannot run here: {b.reason}")
    allocation, decodes, live = failed_allocation(oom, b, 1 + recipe.num_speculative_tokens)
    free = oom.free.bytes - oom.free.rounding_bytes
    room = free + live
    unprofiled = recipe.gpu.total_memory_bytes - b.oom.held_bytes - b.oom.kv_init_buffers.bytes - room
    calibrated_raw = with_memory(raw, {"unprofiled": unprofiled}, recipe.gpu.name)
    replanned = planning.plan(load(calibrated_raw, recipe_dir)).backend(b.backend).oom
    return calibrated_raw, OomMeasure(b.backend, allocation, decodes, oom.tried.bytes, free, live, room, unprofiled,
                                      replanned.max_decodes, replanned.safe_decodes, replanned.margin_bytes)
