"""verify --gpu without the GPU: the shapes to check, what plan predicts for them, and the verdict on what the live
pass (gpu.py) measured. Pure: the dataclasses below are what verify and gpu.py hand each other; the report gpu.py
assembles from them is JSON-shaped, and render/verify.py prints it."""

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from dsa_kvcalc import capacity
from dsa_kvcalc.capacity import DecodeLogits, Plan
from dsa_kvcalc.catalog import DEEPGEMM_RELEASES, FAMILIES, GPUS, LAYOUTS, Gpu, Layout, family_archs, layout_for
from dsa_kvcalc.deployment import check_indexer_cache_dtype
from dsa_kvcalc.units import MIB
from dsa_kvcalc.keys import Recipe, RecipeError
from dsa_kvcalc.kv_cache import round_up
from dsa_kvcalc.names import find_gpu
from dsa_kvcalc.recipe import load, read_recipe

# DeepGEMM's sdist (deepinfer-gemm) imports torch to build and names itself deepgemm unless told: docs/usage.md, "verify on
# a GPU", says why each part is there.
INSTALL = ("with a CUDA torch installed (pip install torch setuptools wheel packaging), in the checkout: "
           "DG_PACKAGE_NAME=deepinfer-gemm DG_FORCE_BUILD=1 CXX=g++ pip install --no-build-isolation '.[gpu]'")
RECIPES_DIR = Path(__file__).parent / "recipes"
DEEPGEMM_FAMILIES = ("sm90", "sm100")
ENTRY_POINTS = {"2.8": "fp8_fp4_paged_mqa_logits"}  # every older release: the legacy fp8_paged_mqa_logits
LEGACY_ENTRY_POINT = "fp8_paged_mqa_logits"
GRANULE_BYTES = 2 * MIB  # CUDA and PyTorch's caching allocator hand out large blocks in whole 2 MiB granules
REFERENCE_TOLERANCE = {"fp32": 1e-5, "bf16": 1e-4}  # DeepGEMM's own test: diff < 5e-6 against FP8-exact inputs

# Widths that are not multiples of the padding, both SM90 head counts (32, 64) and both next_n paths (2 native,
# 1 + k > 2 fed as rows of next_n 1). Parallel sizes only make the weights fit one GPU: they do not change the logits.
EXTRA_SHAPES = [
    ("DeepSeek-V3.2, max-model-len 4097", {
        "model": "deepseek-ai/DeepSeek-V3.2", "max-model-len": 4097, "max-num-seqs": 256,
        "tensor-parallel-size": 8, "enable-expert-parallel": True}),
    ("GLM-5, max-model-len 5000, 1 MTP token", {
        "model": "zai-org/GLM-5", "max-model-len": 5000, "max-num-seqs": 64, "tensor-parallel-size": 8,
        "enable-expert-parallel": True, "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}),
    ("DeepSeek-V4-Flash, max-model-len 400004 (indexer width 100001), 3 MTP tokens", {
        "model": "deepseek-ai/DeepSeek-V4-Flash", "max-model-len": 400004, "max-num-seqs": 128,
        "tensor-parallel-size": 2, "enable-expert-parallel": True,
        "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}),
]


class Unavailable(Exception):
    """No live pass is possible here (exit 3); the message says what to install."""


# What verify and the live pass hand each other -------------------------------------------------------------------

@dataclass(frozen=True)
class LocalGpu:
    """What gpu.probe() read: the local GPU, torch and DeepGEMM."""
    gpu_name: str
    compute_capability: tuple[int, int]
    total_memory_bytes: int
    free_at_start_bytes: int
    cuda_context_bytes: int  # total - free before the pass allocates anything
    torch_version: str
    deepgemm_version: str
    entry_points: tuple[str, ...]  # the paged MQA logits entry points this DeepGEMM has


@dataclass(frozen=True)
class PassRequest:
    """One kernel call of the live pass: `batch` sequences of `next_n` decode rows each."""
    rows: int
    batch: int
    next_n: int
    heads: int
    head_dim: int
    max_context_len: int  # the logits' width
    topk: int
    fp32_copy: bool  # the backend's top-k reads an FP32 copy of the logits
    entry_point: str
    mx_inputs: bool  # DeepGEMM 2.8's SM100 path: UE8M0 scales, BF16 weights, varlen indices


@dataclass(frozen=True)
class ReferenceCheck:
    """A few rows of the kernel's logits against plain torch from the same FP8 inputs."""
    rows: list[int]
    diff: float  # 1 - 2<x, y> / (|x|^2 + |y|^2), DeepGEMM's own measure
    max_abs_error: float
    max_abs_reference: float


@dataclass(frozen=True)
class TopkRun:
    kernel: str
    k: int
    window_columns: int
    extra_peak_bytes: int  # what the top-k adds at peak above the logits and the copy


@dataclass(frozen=True)
class PassMeasurement:
    """What the live pass measured: the logits' layout and torch's allocator statistics."""
    rows: int
    batch: int
    next_n: int
    heads: int
    logits_dtype: str
    columns: int
    row_stride: int
    storage_bytes: int
    fp32_copy: bool
    copy_storage_bytes: int
    peak_bytes: int  # max_memory_allocated above the inputs while the logits and the copy are made
    topk: TopkRun
    reference: ReferenceCheck

    @classmethod
    def from_json(cls, data: dict) -> "PassMeasurement":
        """As the report's JSON holds it (tests/fixtures/verify keeps an H200's)."""
        return cls(**data | {"topk": TopkRun(**data["topk"]), "reference": ReferenceCheck(**data["reference"])})


@dataclass(frozen=True)
class LiveMemory:
    """The process's GPU memory once the passes ran, for --profile."""
    total_memory_bytes: int
    free_at_start_bytes: int
    cuda_context_bytes: int
    non_torch_bytes: int  # held on the GPU beyond torch's reserved pool: CUDA context, DeepGEMM's modules


@dataclass(frozen=True)
class OomRequest:
    """What --reproduce-oom leaves free and holds, and how far it searches."""
    room_bytes: int  # plan's room for the decode logits at run time (capacity.OomRisk), in whole 2 MiB granules
    chunk_bytes: int  # the last prefill chunk's FP32 logits, live when the decode logits are allocated
    max_search_decodes: int


@dataclass(frozen=True)
class OomRun:
    """What --reproduce-oom found: the step as vLLM 0.33.0 runs it, at growing decode counts."""
    room_target_bytes: int
    room_left_bytes: int  # what the ballast actually left free beside the chunk
    chunk_bytes: int
    attempts: list[tuple[int, bool]]  # (decodes, fitted), in the order run
    first_failing_decodes: int | None

    @classmethod
    def from_json(cls, data: dict) -> "OomRun":
        return cls(**data | {"attempts": [tuple(attempt) for attempt in data["attempts"]]})


# The local GPU and DeepGEMM -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    gpu: Gpu  # the catalog GPU the local one is planned as
    release: str  # DeepGEMM major.minor, a DEEPGEMM_RELEASES key
    notes: tuple[str, ...]


def local_target(env: LocalGpu) -> Target:
    """The catalog GPU and DeepGEMM release for what gpu.probe() read."""
    major, minor = env.compute_capability
    arch = f"sm{major}{minor}"
    name = env.gpu_name
    if FAMILIES.get(arch) not in DEEPGEMM_FAMILIES:
        raise Unavailable(f"{name} is {arch}: DeepGEMM's paged MQA logits needs SM90 (H100, H200) or SM100 "
                          f"(B200, GB200, B300)")
    version = env.deepgemm_version
    release = ".".join(version.split(".")[:2])
    if release not in DEEPGEMM_RELEASES:
        raise Unavailable(f"DeepGEMM {version} has no known logits layout (known: 2.1 - 2.6, 2.8): {INSTALL}")
    wanted = ENTRY_POINTS.get(release, LEGACY_ENTRY_POINT)
    if wanted not in env.entry_points:
        raise Unavailable(f"DeepGEMM {version} lacks {wanted}: {INSTALL}")
    notes = []
    try:
        gpu = find_gpu(name)
    except RecipeError:
        same_arch = [g for g in GPUS if g.arch == arch]
        gpu = min(same_arch, key=lambda g: abs(g.total_memory_bytes - env.total_memory_bytes))
        notes.append(f"{name} is not in the GPU catalog: planned as {gpu.name} ({arch}, the nearest in memory)")
    notes.insert(0, f"DeepGEMM {version}: {wanted}, layout {layout_name(layout_for(release, gpu))}")
    return Target(gpu, release, tuple(notes))


def layout_name(layout) -> str:
    return (f"DeepGEMM {layout.versions} on {'/'.join(family_archs((layout.family,)))} ({layout.logits_dtype} logits, "
            f"{layout.split_columns}-column splits{', 1024-byte row strides' if layout.stride_aligned else ''})")


# Shapes ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    name: str
    planned: Recipe  # for the local GPU and the installed DeepGEMM: the byte-for-byte prediction
    named: Recipe  # as the recipe names it
    notes: tuple[str, ...]


def shape_for(name: str, raw: dict, recipe_dir: Path, target: Target, as_local: bool) -> Shape:
    named = load({**raw, "gpu": raw.get("gpu", target.gpu.name)}, recipe_dir)
    notes = []
    if named.gpu != target.gpu and "memory" in raw:  # measured on the named GPU: they do not carry over
        raw = {k: v for k, v in raw.items() if k != "memory"}
        notes.append(f"the recipe's measured memory terms are {named.gpu.name}'s: {target.gpu.name}'s are estimated")
    planned = load({**raw, "gpu": target.gpu.name, "deepgemm": target.release}, recipe_dir)
    runnable = runnable_here(raw, planned)
    if runnable is not raw:
        raw, planned = runnable, load({**runnable, "gpu": target.gpu.name, "deepgemm": target.release}, recipe_dir)
        notes.append(f"vLLM runs no MXFP4 indexer cache on {target.gpu.name} ({target.gpu.arch}): re-planned with its "
                     f"default indexer cache, which the decode logits do not depend on")
    if named.deepgemm != target.release:
        notes.append(f"the recipe names DeepGEMM {named.deepgemm}; predicted with the installed {target.release}'s "
                     f"layout")
    if named.gpu != target.gpu:
        notes.append(f"re-planned for {target.gpu.name} (--as-local); the recipe names {named.gpu.name}" if as_local
                     else f"the recipe names {named.gpu.name} ({named.gpu.arch}); this is {target.gpu.name} "
                          f"({target.gpu.arch}): bytes are checked against {target.gpu.name}'s plan, rows and width "
                          f"against the recipe's")
    return Shape(name, planned, planned if as_local else named, tuple(notes))


def runnable_here(raw: dict, planned: Recipe) -> dict:
    """The recipe with the indexer cache vLLM runs on the planned GPU: an MXFP4 one, which vLLM refuses off the SM10x
    family (deployment.check_indexer_cache_dtype), is left to the default; the same raw recipe where nothing changes."""
    try:
        check_indexer_cache_dtype(planned)
        return raw
    except RecipeError:
        attention = {k: v for k, v in (raw.get("attention-config") or {}).items()
                     if k not in ("indexer_kv_dtype", "use_fp4_indexer_cache")}
        return {**raw, "attention-config": attention}


def recipe_shapes(path: Path, target: Target, as_local: bool) -> list[Shape]:
    return [shape_for(path.stem, read_recipe(path), path.parent, target, as_local)]


def builtin_shapes(target: Target) -> list[Shape]:
    """The bundled recipes re-planned for this GPU, then EXTRA_SHAPES."""
    shapes = [shape_for(f"{path.stem} (re-planned)", read_recipe(path), path.parent, target, True)
              for path in sorted(RECIPES_DIR.glob("*.yaml"))]
    return shapes + [shape_for(name, raw, RECIPES_DIR, target, True) for name, raw in EXTRA_SHAPES]


# What the live pass runs -----------------------------------------------------------------------------------------

def pass_request(recipe: Recipe, dl: DecodeLogits, rows: int, entry_point: str) -> PassRequest:
    """The kernel call for `rows` decode rows. SM90 takes next_n 1 or 2: larger speculation is fed as more
    sequences of next_n 1 (same rows). SM100 (2.8) takes varlen rows of next_n 1."""
    per_sequence = 1 + recipe.num_speculative_tokens
    next_n = per_sequence if per_sequence <= 2 and recipe.gpu.family == "sm90" else 1
    return PassRequest(rows=rows, batch=rows // next_n, next_n=next_n, heads=recipe.model.index_n_heads,
                       head_dim=recipe.model.index_head_dim, max_context_len=dl.columns, topk=recipe.model.index_topk,
                       fp32_copy=dl.copy_bytes_per_element > 0, entry_point=entry_point,
                       mx_inputs=entry_point == ENTRY_POINTS["2.8"] and recipe.gpu.family != "sm90")


def rows_that_fit(dl: DecodeLogits, free_bytes: int, next_n: int) -> int:
    """The worst case's rows, or fewer (whole sequences) when its logits do not fit in free memory."""
    row_bytes = dl.padded_columns * dl.bytes_per_element
    usable = free_bytes - free_bytes // 8  # room for the inputs, the top-k and the allocator's granules
    return min(dl.rows, usable // row_bytes // next_n * next_n)


# The comparison ---------------------------------------------------------------------------------------------------

QUANTITIES = ("logits_dtype", "rows", "columns", "row_stride", "storage_bytes", "copy_storage_bytes", "peak_bytes")


SPLIT_THRESHOLD_BYTES = MIB  # a block keeps a segment's remainder of up to 1 MiB (kSmallSize) instead of splitting it
SEGMENT_THRESHOLD_BYTES = 10 * MIB  # from here (kMinLargeAlloc) a tensor gets a segment of its own whole granules


def allocator_bytes(size: int) -> int:
    """What PyTorch's caching allocator charges (memory_allocated) for a `size`-byte tensor in a fresh segment
    (c10/cuda/CUDACachingAllocator.cpp): 512-byte multiples; from 10 MiB a segment of whole 2 MiB granules, whose
    remainder stays in the block when it is 1 MiB or less."""
    rounded = round_up(size, 512)
    segment = round_up(rounded, GRANULE_BYTES)
    if rounded >= SEGMENT_THRESHOLD_BYTES and segment - rounded <= SPLIT_THRESHOLD_BYTES:
        return segment
    return rounded


def predicted_pass(dl: DecodeLogits, rows: int) -> dict:
    """plan's numbers for the rows the pass ran (fewer than dl.rows when scaled down); the peak as the allocator
    charges plan's logits and FP32 copy."""
    run = dataclasses.replace(dl, rows=rows)
    logits_bytes = run.bytes - run.copy_bytes
    return {"logits_dtype": dl.logits_dtype, "rows": rows, "columns": dl.columns, "row_stride": dl.padded_columns,
            "storage_bytes": logits_bytes, "copy_storage_bytes": run.copy_bytes,
            "peak_bytes": allocator_bytes(logits_bytes) + (allocator_bytes(run.copy_bytes) if run.copy_bytes else 0)}


@dataclass(frozen=True)
class Check:
    quantity: str
    predicted: int | str
    measured: int | str
    agree: bool


@dataclass(frozen=True)
class BackendVerdict:
    backend: str
    available: bool
    reason: str | None
    cannot_show: list[str]  # what the recipe's GPU would show that this one cannot
    checks: list[Check]
    agree: bool | None  # None: not run
    verdict: str


def checks(predicted: dict, measured: PassMeasurement) -> list[Check]:
    return [Check(q, predicted[q], getattr(measured, q), predicted[q] == getattr(measured, q)) for q in QUANTITIES]


def reference_ok(reference: ReferenceCheck, dtype: str) -> bool:
    return reference.diff < REFERENCE_TOLERANCE[dtype]


def likely_reason(found: list[Check], measured: PassMeasurement, predicted: Layout, arch: str, version: str) -> str:
    """Why measured and predicted differ: the catalog layout that gives what was measured, if any."""
    wrong = {c.quantity for c in found if not c.agree}
    predicted_peak = next(c.predicted for c in found if c.quantity == "peak_bytes")
    if wrong <= {"peak_bytes"}:
        extra = measured.peak_bytes - predicted_peak
        return (f"the pass's peak is {extra:,} B above the logits{' and the FP32 copy' if measured.fp32_copy else ''}"
                f" as the allocator charges them: a DeepGEMM workspace or allocation that plan does not count "
                f"(DeepGEMM {version})")
    if wrong <= {"copy_storage_bytes", "peak_bytes"}:
        return ("the FP32 copy differs from plan's rows x row stride x 4 B: the runtime upcast is laid out otherwise "
                "than plan assumes")
    matches = [layout for layout in LAYOUTS.values() if layout != predicted
               and layout.logits_dtype == measured.logits_dtype
               and capacity.padded_columns(measured.columns, layout) == measured.row_stride]
    if matches:
        names = "; ".join(f"DeepGEMM {m.versions} on {'/'.join(family_archs((m.family,)))}" for m in matches)
        return (f"the logits are laid out as {names}, not as predicted (DeepGEMM {predicted.versions} on {arch}): "
                f"another DeepGEMM layout or another arch than the installed DeepGEMM {version} was taken for")
    return (f"no catalog layout gives {measured.logits_dtype} logits with row stride {measured.row_stride:,} "
            f"for width {measured.columns:,}: DeepGEMM {version} lays them out in a way the catalog does not know")


def cannot_show(named_dl: DecodeLogits, planned_dl: DecodeLogits, named: Recipe, planned: Recipe) -> list[str]:
    """What the recipe's GPU would show that this arch cannot."""
    if named.gpu.arch == planned.gpu.arch and named.layout == planned.layout:
        return []
    here = f"{planned.gpu.name} ({planned.gpu.arch})"
    found = []
    if named_dl.logits_dtype != planned_dl.logits_dtype:
        found.append(f"{named_dl.logits_dtype} logits (this {here} writes {planned_dl.logits_dtype})")
    if named_dl.padded_columns != planned_dl.padded_columns:
        found.append(f"a row stride of {named_dl.padded_columns:,} columns (here {planned_dl.padded_columns:,})")
    if named_dl.copy_bytes_per_element:
        found.append(f"the FP32 copy ({named_dl.bytes_per_element} B per element in all, "
                     f"{named_dl.bytes:,} B for {named_dl.rows:,} rows)")
    return [f"needs a {named.gpu.name} ({named.gpu.arch}) with DeepGEMM {named.layout.versions}: "
            + "; ".join(found)] if found else []


def backend_result(shape: Shape, plan: Plan, named_plan: Plan, name: str, measured: PassMeasurement | None,
                   version: str) -> BackendVerdict:
    """One backend's verdict. measured is None when the backend cannot run on the local GPU."""
    b = plan.backend(name)
    named_b = named_plan.backend(name)
    shown = cannot_show(named_b.decode_logits, b.decode_logits, shape.named, shape.planned)
    if measured is None:
        return BackendVerdict(backend=name, available=b.available, reason=b.reason, cannot_show=shown, checks=[],
                              agree=None, verdict=f"not run: {b.reason}" if not b.available else "not run")
    rows = measured.rows
    found = checks(predicted_pass(b.decode_logits, rows), measured)
    if shape.named != shape.planned:
        named_dl = named_b.decode_logits
        found += [Check(f"{q} ({shape.named.gpu.name} recipe)", value, getattr(measured, q),
                        value == getattr(measured, q))
                  for q, value in (("rows", named_dl.rows if rows == b.decode_logits.rows else rows),
                                   ("columns", named_dl.columns))]
    layout_agrees = all(c.agree for c in found)
    agree = layout_agrees and reference_ok(measured.reference, measured.logits_dtype)
    if agree:
        verdict = "agrees byte for byte"
    elif not layout_agrees:
        verdict = "differs: " + likely_reason(found, measured, shape.planned.layout, shape.planned.gpu.arch, version)
    else:
        verdict = f"differs: the kernel's logits are off the torch reference (diff {measured.reference.diff:.2e})"
    if rows != b.decode_logits.rows:
        verdict += (f" (scaled down from {b.decode_logits.rows:,} to {rows:,} rows to fit free memory: bytes per row "
                    f"compared)")
    return BackendVerdict(backend=name, available=b.available, reason=b.reason, cannot_show=shown, checks=found,
                          agree=agree, verdict=verdict)


# --profile: vLLM's memory accounting replayed with what this GPU measured ----------------------------------------

@dataclass(frozen=True)
class ProfileReplay:
    backend: str
    free_at_start_bytes: int
    cuda_context_bytes: int
    non_torch_bytes: int
    non_torch_bytes_planned: int
    requested_bytes: int
    starts: bool  # vLLM's start-up check: free memory at start >= requested
    weights_bytes: int
    weights_measured: bool
    indexer_reservation_bytes: int
    peak_activation_bytes: int
    cudagraph_bytes: int
    kv_cache_bytes: int
    kv_cache_tokens: int
    kv_cache_tokens_planned: int


def profile_replay(plan: Plan, name: str, measured: PassMeasurement, live: LiveMemory) -> ProfileReplay:
    """requested = total x util; KV = requested - weights - peak activation - non-torch - CUDA graphs, with the
    measured total memory, non-torch memory and indexer logits in place of plan's, as a vLLM with #62860 reserves
    them; weights never loaded."""
    recipe, memory, b = plan.recipe, plan.memory, plan.backend(name)
    requested = math.ceil(live.total_memory_bytes * recipe.gpu_memory_utilization)
    logits_bytes = measured.storage_bytes + measured.copy_storage_bytes
    reserved = max(recipe.prefill_budget_bytes, logits_bytes * b.decode_logits.rows // measured.rows)
    peak = capacity.raised_peak_bytes(memory, reserved, b.indexer_headroom_bytes)
    kv_bytes = capacity.kv_cache_bytes(recipe.kv_cache_memory_bytes, requested, memory.weights.bytes, peak,
                                       live.non_torch_bytes, b.cudagraph_subtracted_bytes)
    return ProfileReplay(
        backend=name,
        free_at_start_bytes=live.free_at_start_bytes,
        cuda_context_bytes=live.cuda_context_bytes,
        non_torch_bytes=live.non_torch_bytes, non_torch_bytes_planned=memory.non_torch.bytes,
        requested_bytes=requested, starts=live.free_at_start_bytes >= requested,
        weights_bytes=memory.weights.bytes, weights_measured=memory.weights.provenance == "measured",
        indexer_reservation_bytes=reserved, peak_activation_bytes=peak,
        cudagraph_bytes=b.cudagraph.bytes,
        kv_cache_bytes=max(kv_bytes, 0),
        kv_cache_tokens=memory.kv.tokens(kv_bytes),
        kv_cache_tokens_planned=b.with_fix.kv_cache_tokens,
    )


# --reproduce-oom ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OomVerdict:
    backend: str
    predicted_max_decodes: int  # plan's edge: OOM above it
    predicted_safe_decodes: int  # the margin below it
    margin_decodes: int  # the margin, in whole decodes (rounded up)
    bytes_per_decode: int
    plan_room_bytes: int
    run: OomRun
    agree: bool
    verdict: str


def oom_request(plan: Plan, name: str) -> OomRequest:
    """Leave plan's room free, in whole 2 MiB granules (what the allocator can hand out), beside a prefill chunk of
    the budget's FP32 logits: the indexer's decode call allocates its logits while the last chunk's are still bound
    (vllm==0.33.0 vllm/model_executor/layers/sparse_attn_indexer.py:880-893); the chunk sits in the profile's base
    peak, not in the room. The search stops at twice the predicted failure."""
    b = plan.backend(name)
    return OomRequest(room_bytes=b.oom.room_bytes // GRANULE_BYTES * GRANULE_BYTES,
                      chunk_bytes=plan.recipe.prefill_budget_bytes,
                      max_search_decodes=1 << (2 * (b.oom.max_decodes + 1)).bit_length())


def oom_verdict(plan: Plan, name: str, run: OomRun) -> OomVerdict:
    """Plan's edge and safe count in the room the run left (plan's room when it ran: the run checks what a step
    allocates in it, not the terms that size it). They agree where the step ran at the safe count and failed no later
    than one past the edge plus the margin."""
    oom = plan.backend(name).oom
    per_decode = oom.bytes_per_decode
    edge, safe = run.room_target_bytes // per_decode, max(run.room_target_bytes - oom.margin_bytes, 0) // per_decode
    margin = -(-oom.margin_bytes // per_decode)
    failed_at = run.first_failing_decodes
    agree = failed_at is not None and safe < failed_at <= edge + 1 + margin
    if failed_at is None:
        verdict = f"no failure up to {run.attempts[-1][0]} decodes; plan predicts {edge + 1}"
    elif agree:
        verdict = f"failed at {failed_at} decodes; plan: OOM above {edge}, safe up to {safe} (margin {margin})"
    else:
        verdict = (f"failed at {failed_at} decodes; plan predicts {edge + 1}, safe up to {safe} "
                   f"({run.room_left_bytes:,} B were left free beside the chunk, room for "
                   f"{run.room_left_bytes // per_decode} decodes by plan's {per_decode:,} B each)")
    return OomVerdict(backend=name, predicted_max_decodes=edge, predicted_safe_decodes=safe, margin_decodes=margin,
                      bytes_per_decode=per_decode, plan_room_bytes=run.room_target_bytes, run=run, agree=agree,
                      verdict=verdict)


def exit_code(report: dict) -> int:
    results = [b["agree"] for s in report["shapes"] for b in s["backends"]]
    results += [s["reproduce_oom"]["agree"] for s in report["shapes"] if "reproduce_oom" in s]
    return 0 if all(r is not False for r in results) and any(r is True for r in results) else 1
