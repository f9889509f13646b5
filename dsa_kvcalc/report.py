"""A Plan as plain data: the JSON contract of `plan --format json`, its warnings and assumptions. Every renderer and
sweep read a plan through this module; it formats nothing for people."""

from dsa_kvcalc import __version__, planning, published
from dsa_kvcalc.capacity import BackendPlan, Plan, Reserved, Sizing
from dsa_kvcalc.engine import MAIN, NEWEST_VLLM, VLLM_RULES, plain
from dsa_kvcalc.estimates import Term
from dsa_kvcalc.graphs import CudagraphEstimate
from dsa_kvcalc.keys import KEYS
from dsa_kvcalc.uncertainty import error_bar
from dsa_kvcalc.units import GIB, MIB

FIX = "vLLM #62860"
OOM_ROOM = ("a step that allocates the decode logits outside a FULL CUDA graph has total - what vLLM sized (KV, "
            "weights, base peak, non-torch, graph pool) - the buffers its model runner makes after sizing (derived: "
            "block tables, indexer metadata) - the unprofiled rest (measured from an OOM message by calibrate, or fitted "
            "to the seed's death at 131 decodes: 3.04 GiB free plus 1.54 GiB of BF16 logits live)")
TOOL = {"name": "dsa-kvcalc", "version": __version__}  # in every JSON the tool writes


def nulled(value):
    """The same keys, every value null: a figure that does not apply keeps its key."""
    return {key: nulled(inner) for key, inner in value.items()} if isinstance(value, dict) else None


def provenance(t: Term) -> dict:
    return {"provenance": t.provenance, "source": t.source, "carried_bytes": t.carried_bytes}


def tokens_vs(b: BackendPlan, reference: BackendPlan | None) -> float | None:
    if reference is None or not reference.kv_cache_tokens:
        return None
    return round(b.kv_cache_tokens / reference.kv_cache_tokens - 1, 4)


def fix_name(plan: Plan, reserves: bool) -> str:
    """With or without what reserves the decode logits for this model's indexer: vLLM #62860, or the kpool indexer's
    own reservation."""
    return f"{'with' if reserves else 'without'} {plan.recipe.model.indexer.reserver}"


def side_label(plan: Plan, reserves: bool) -> str:
    """Which side of the fix: with or without what reserves the decode logits for this model's indexer (vLLM #62860,
    or the kpool indexer's own reservation), and the vLLM versions on that side (engine.py's rule)."""
    indexer = plan.recipe.model.indexer
    first = next(change.release for change in VLLM_RULES[indexer.reservation_rule].changes if change.value)
    if first == MAIN:
        return f"{fix_name(plan, reserves)} ({'vLLM main, unreleased' if reserves else f'every release to {NEWEST_VLLM}'})"
    return f"{fix_name(plan, reserves)} (vLLM {first} and later)" if reserves else fix_name(plan, reserves)


def reserved_label(plan: Plan, side: Sizing) -> str:
    """Who reserves the decode logits on this side of the fix, in which releases, or what holds them instead."""
    kind = side.reservation.kind
    if kind is Reserved.HELD:
        return f"its profile run holds the decode logits (the same either side of {FIX})"
    if kind is Reserved.WORKSPACE:
        return f"ROCm's locked indexer workspace holds the decode logits (the same either side of {FIX})"
    return side_label(plan, side.reserves_decode_logits)


def sizing_json(plan: Plan, side: Sizing) -> dict:
    return {"reserves_decode_logits": side.reserves_decode_logits, "label": side_label(plan, side.reserves_decode_logits),
            "reservation": side.reservation.kind.name, "reserved_bytes": side.reserved_bytes,
            "peak_activation_bytes": side.peak_activation_bytes, "kv_cache_bytes": side.kv_cache_bytes,
            "kv_cache_blocks": side.kv_cache_blocks, "kv_cache_tokens": side.kv_cache_tokens,
            "max_concurrency": side.max_concurrency}


def refusal(plan: Plan, b: BackendPlan) -> str | None:
    """Why vLLM would refuse to start this deployment with backend b, or None: its scheduler's refusal (resolved in
    deployment.py), or a KV cache that holds no request of max-model-len (check_enough_kv_cache_memory, vllm==0.33.0
    vllm/v1/core/kv_cache_planning.py:50-84 and 151-180; no memory at all is its own error, :57)."""
    r, needed = plan.recipe, plan.memory.kv.request_bytes
    if plan.deployment.scheduler_refusal:
        return plan.deployment.scheduler_refusal
    if b.kv_cache_bytes <= 0:
        return "no memory is left for the KV cache"
    if b.kv_cache_bytes < needed:
        return (f"one request of max-model-len {r.max_model_len:,} needs {needed / GIB:.2f} GiB of KV cache; "
                f"{b.kv_cache_bytes / GIB:.2f} GiB is left")
    return None


def selected_refusal(plan: Plan) -> str | None:
    """Why vLLM would refuse the recipe as written (with its own top-k backend), or None."""
    selected = next((b for b in plan.backends if b.selected and b.available), None)
    return None if selected is None else refusal(plan, selected)


def backend_json(plan: Plan, b: BackendPlan) -> dict:
    head = {"backend": b.backend, "engine_label": plan.recipe.engine.label, "available": b.available,
            "reason": b.reason, "selected": b.selected}
    figures = backend_figures(plan, b)
    return head | (figures if b.available else nulled(figures))


def oom_json(b: BackendPlan) -> dict:
    o = b.oom
    return {"at_risk": o.at_risk, "room_bytes": o.room_bytes, "kv_init_buffers_bytes": o.kv_init_buffers.bytes,
            "unprofiled_bytes": o.unprofiled.bytes, "unprofiled_provenance": o.unprofiled.provenance,
            "margin_bytes": o.margin_bytes, "bytes_per_decode": o.bytes_per_decode, "worst_decodes": o.worst_decodes,
            "max_decodes": o.max_decodes, "safe_decodes": o.safe_decodes}


def backend_figures(plan: Plan, b: BackendPlan) -> dict:
    dl = b.decode_logits
    auto = next((p for p in plan.backends if p.backend == "auto"), b)
    return {
        "refused": refusal(plan, b),
        "decode_logits": {
            "rows": dl.rows, "columns": dl.columns, "padded_columns": dl.padded_columns,
            "logits_dtype": dl.logits_dtype, "logits_bytes_per_element": dl.logits_bytes_per_element,
            "rows_rule": dl.rows_rule.value, "width_multiple": dl.width_multiple,
            "copy_bytes_per_element": dl.copy_bytes_per_element, "bytes_per_element": dl.bytes_per_element,
            "bytes": dl.bytes, "copy_bytes": dl.copy_bytes, "alignment_bytes": dl.alignment_bytes},
        "prefill_budget_bytes": b.prefill_budget_bytes,
        "reservation": b.release.reservation.kind.name,
        "reserved_bytes": b.reserved_bytes,
        "cudagraph_logits_rows": b.cudagraph_logits_rows,
        "cudagraph_logits_bytes": b.cudagraph_logits_bytes,
        "cudagraph_bytes": b.cudagraph.bytes,
        "cudagraph_provenance": b.cudagraph.provenance,
        "cudagraph_subtracted_bytes": b.cudagraph_subtracted_bytes,
        "indexer_headroom_bytes": b.indexer_headroom_bytes,
        "peak_activation_bytes": b.peak_activation_bytes,
        "kv_cache_bytes": b.kv_cache_bytes,
        "kv_cache_blocks": b.release.kv_cache_blocks,
        "kv_cache_tokens": b.kv_cache_tokens,
        "max_concurrency": b.max_concurrency,
        "kv_cache_tokens_vs_auto": tokens_vs(b, auto),
        "other_side_of_fix": sizing_json(plan, b.other),
        "oom": oom_json(b),
    }


# The answer first (plan's first lines, and "summary" in its JSON) ------------------------------------------------

def answered_backend(plan: Plan) -> BackendPlan:
    """The backend the answer is for: the recipe's where it runs here, else auto (or the first that runs), else the
    recipe's all the same."""
    selected = next((b for b in plan.backends if b.selected), plan.backends[0])
    runs = [b for b in plan.backends if b.available]
    if selected.available or not runs:
        return selected
    return next((b for b in runs if b.backend == "auto"), runs[0])


def compared_backend(plan: Plan, b: BackendPlan) -> BackendPlan | None:
    """Is deep_select worth it: deep_select against auto, auto against deep_select, or else the available backend
    that holds the most KV tokens, where it holds more than the recipe's."""
    available = {p.backend: p for p in plan.backends if p.available and p.backend != b.backend}
    if b.backend != "deep_select" and "deep_select" in available:
        return available["deep_select"]
    if b.backend == "deep_select" and "auto" in available:
        return available["auto"]
    best = max(available.values(), key=lambda p: p.kv_cache_tokens, default=None)
    return best if best is not None and best.kv_cache_tokens > b.kv_cache_tokens else None


def fix_json(fix) -> dict:
    """A fixes.Fix: the key, its value, and the backend re-planned with it."""
    return {"name": fix.name, "key": fix.key, "value": fix.value, "kv_cache_tokens": fix.plan.kv_cache_tokens,
            "kv_cache_tokens_change": fix.tokens_change, "at_risk": fix.plan.oom.at_risk,
            "safe_decodes": fix.plan.oom.safe_decodes, "moves_risk": fix.moves_risk}


def risk_json(plan: Plan, b: BackendPlan, fixes: list) -> dict:
    return oom_json(b) | {"max_num_seqs": plan.recipe.max_num_seqs, "fixes": [fix_json(fix) for fix in fixes]}


def summary(plan: Plan, fixes: list = ()) -> dict:
    """The four answers for the recipe's backend: does this vLLM release start it, how many KV tokens a rank holds
    (and requests of max-model-len), the OOM risk on this release with its workaround, and the other top-k backend
    worth comparing (deep_select against auto)."""
    b = answered_backend(plan)
    other = compared_backend(plan, b)
    deep_select = next((p for p in plan.backends if p.backend == "deep_select"), None)
    return {
        "notes": list(plan.recipe.notes),  # what reading the recipe noted: a name planned as another checkpoint, ...
        "engine_label": plan.recipe.engine.label, "reserves_decode_logits": plan.recipe.reserves_decode_logits,
        "reservation": b.release.reservation.kind.name, "reserved": reserved_label(plan, b.release),
        "backend": b.backend,
        "instead_of": None if b.selected else plan.recipe.topk_backend,
        "refused": refusal(plan, b) if b.available else f"{b.backend} cannot run here: {b.reason}",
        "kv_cache_tokens": b.kv_cache_tokens, "kv_cache_tokens_error": error_json(plan, b),
        "max_concurrency": b.max_concurrency,
        "max_model_len": plan.recipe.max_model_len, "data_parallel_size": plan.recipe.data_parallel_size,
        "deployment_kv_cache_tokens": b.kv_cache_tokens * plan.recipe.data_parallel_size,
        "rules_of": NEWEST_VLLM if plan.recipe.engine.newer_than_modelled else None, "oom": risk_json(plan, b, fixes),
        "compared": None if other is None else {
            "backend": other.backend, "refused": refusal(plan, other), "kv_cache_tokens": other.kv_cache_tokens,
            "kv_cache_tokens_vs_answered": tokens_vs(other, b), "oom": risk_json(plan, other, [])},
        "deep_select_unavailable": deep_select.reason if deep_select is not None and not deep_select.available
        else None,
    }


def error_json(plan: Plan, b: BackendPlan) -> dict | None:
    """The KV tokens' error bar where a term is estimated or fitted (uncertainty.py): +- a share and in tokens."""
    bar = error_bar(plan, b)
    if bar is None:
        return None
    return {"relative": round(bar.relative, 4), "tokens": round(b.kv_cache_tokens * bar.relative),
            "basis": bar.basis}


def estimated_terms(plan: Plan) -> list[str]:
    terms = (("weights", plan.memory.weights), ("peak activation", plan.memory.base_peak),
             ("non-torch", plan.memory.non_torch))
    return [name for name, t in terms if t.provenance in ("estimated", "fitted")]


def room_terms(plan: Plan, b: BackendPlan) -> str:
    """The room as its terms, each with its provenance."""
    o = b.oom
    return (f"total {plan.recipe.gpu.total_memory_bytes / GIB:.2f} - held {o.held_bytes / GIB:.2f} (KV, weights, base peak, "
            f"non-torch, graph pool) - KV-init buffers {o.kv_init_buffers.bytes / GIB:.2f} ({o.kv_init_buffers.provenance})"
            f" - unprofiled {o.unprofiled.bytes / GIB:+.2f} ({o.unprofiled.provenance}) = {o.room_bytes / GIB:.2f} GiB")


def oom_warnings(plan: Plan) -> list[str]:
    """The live risk on this release: where it dies, the room that decides it, and the margin kept below the edge."""
    recipe = plan.recipe
    at_risk: dict[tuple, list[BackendPlan]] = {}
    for b in plan.backends:
        if b.available and b.oom.at_risk:
            at_risk.setdefault((b.oom, b.decode_logits.padded_columns, b.decode_logits.bytes_per_element), []).append(b)
    found = []
    for (oom, padded, element), backends in at_risk.items():
        b = backends[0]
        reserved = (f"its profile run reserves {b.reserved_bytes / GIB:.2f} GiB for them ({reserved_label(plan, b.release)})"
                    if b.release.reserves_decode_logits else f"{FIX} is in no release: its profile run reserves only "
                                                             f"the prefill budget")
        found.append(
            f"{recipe.engine.label}, with {', '.join(b.backend for b in backends)}: a step that allocates the decode "
            f"logits outside a FULL CUDA graph (eager, piecewise, a mixed batch, or any step of a data-parallel rank "
            f"whose peers prefill) has {room_terms(plan, b)} for them, and {reserved}. At "
            f"{1 + recipe.num_speculative_tokens} rows x {padded:,} columns x {element} B = "
            f"{oom.bytes_per_decode / MIB:.1f} MiB a decode it runs out of memory above {oom.max_decodes} concurrent "
            f"decodes (max-num-seqs {recipe.max_num_seqs}, at most {oom.worst_decodes} a step); safe up to "
            f"{oom.safe_decodes}, {oom.margin_bytes / MIB:,.0f} MiB below the edge (the allocator's 2 MiB segments, "
            f"and the unprofiled term's stated uncertainty)")
    return found


def default_warnings(plan: Plan) -> list[str]:
    """The defaults the recipe leaves out that move its KV tokens by more than 1 %."""
    by_field: dict[str, list[planning.DefaultImpact]] = {}
    for impact in planning.default_impacts(plan.recipe):
        by_field.setdefault(impact.field, []).append(impact)
    return [f"{KEYS[field].name} is not in the recipe and took {impacts[0].value}: at "
            + ", at ".join(f"{i.other} the KV tokens would move {i.tokens_change:+.1%}" for i in impacts)
            + f" (give {KEYS[field].name} to settle it)" for field, impacts in by_field.items()]


def warnings(plan: Plan) -> list[str]:
    recipe = plan.recipe
    found = []
    selected = next((b for b in plan.backends if b.selected), None)
    if selected is None:
        found.append(f"sparse-indexer-topk-backend {recipe.topk_backend} is not a backend of {recipe.engine.label}")
    elif not selected.available:
        found.append(f"sparse-indexer-topk-backend {selected.backend} cannot run here: {selected.reason}")
    if recipe.engine.newer_than_modelled:
        found.append(f"{recipe.engine.label} is newer than the newest release modelled ({NEWEST_VLLM}): plan applies "
                     f"{NEWEST_VLLM}'s rules, which may have moved since")
    found += oom_warnings(plan)
    refused: dict[str, list[str]] = {}
    for b in plan.backends:
        if b.available and refusal(plan, b):
            refused.setdefault(refusal(plan, b), []).append(b.backend)
    found += [f"{recipe.engine.label} would refuse to start with {', '.join(names)}: {reason}"
              for reason, names in refused.items()]
    found += default_warnings(plan)
    estimated = estimated_terms(plan)
    if estimated and recipe.kv_cache_memory_bytes is None:
        found.append(f"{', '.join(estimated)} memory {'is' if len(estimated) == 1 else 'are'} estimated: put measured "
                     f"values in the recipe's memory block (or run dsa-kvcalc calibrate on a vLLM startup log)")
    if recipe.ignored_keys:
        found.append(f"ignored (do not change memory): {', '.join(recipe.ignored_keys)}")
    return found


def kv_source(plan: Plan) -> str:
    recipe = plan.recipe
    return (f"{recipe.model.name}'s config ({recipe.model.config_source}) and {recipe.engine.label}'s KV-cache "
            f"grouping (kv_cache/)")


def assumptions(plan: Plan) -> list[str]:
    recipe = plan.recipe
    found = [f"out-of-memory room: {OOM_ROOM}",
             f"KV cache (derived): {kv_source(plan)}" + (f"; {recipe.model.note}" if recipe.model.note else "")]
    if not recipe.indexer_headroom_bytes:
        found.append("indexer headroom = the prefill budget: the reservation raises the profiled peak by all it adds "
                     "over the budget (give memory.indexer_headroom_gib, measured, to model less)")
    return found


def kv_json(plan: Plan) -> dict:
    kv, memory = plan.memory.kv, plan.memory
    return {"sparse_mla_backend": memory.sparse_mla_backend,
            "groups": [{"block_tokens": g.block, "window_tokens": g.window or None, "layers": len(g.pages),
                        "page_bytes": g.page_bytes} for g in kv.groups],
            "block_bytes": kv.block_bytes, "pages_per_request": kv.pages_per_request,
            "request_bytes": kv.request_bytes, "provenance": "derived", "source": kv_source(plan)}


def cudagraph_estimate_json(estimate: CudagraphEstimate) -> dict:
    return {"method": estimate.method.name, "description": estimate.method.value, "graphs": estimate.graphs,
            "sampled_graph_tokens": list(estimate.sampled_rows), "extrapolated_graphs": estimate.extrapolated_graphs,
            "per_graph_bytes": estimate.per_graph_bytes, "floor_bytes": estimate.floor_bytes}


def plan_json(plan: Plan, fixes: list = ()) -> dict:
    recipe, memory, engine = plan.recipe, plan.memory, plan.recipe.engine
    layout = recipe.layout
    rules = {name: {"value": plain(getattr(engine, name)), "source": source} for name, source in engine.sources.items()}
    return {
        "tool": TOOL,
        "summary": summary(plan, fixes),
        "recipe": recipe.resolved() | {"memory": recipe.memory_block()},
        "ignored_keys": list(recipe.ignored_keys),
        "engine": {"name": engine.name, "version": engine.version, "rules": rules},
        "gpu": {"name": recipe.gpu.name, "arch": recipe.gpu.arch, "total_memory_bytes": recipe.gpu.total_memory_bytes},
        "model": {"name": recipe.model.name, "config_source": recipe.model.config_source,
                  "index_topk": recipe.model.index_topk, "kv_bytes_per_token": memory.kv.bytes_per_logged_token},
        "kv_cache": kv_json(plan),
        "cudagraph_estimate": cudagraph_estimate_json(plan.cudagraph_estimate),
        "deepgemm_layout": {"versions": layout.versions, "logits_dtype": layout.logits_dtype,
                            "split_columns": layout.split_columns, "stride_aligned": layout.stride_aligned,
                            "source": layout.source},
        "memory": {"requested_bytes": memory.requested_bytes,
                   "weights_bytes": memory.weights.bytes, "peak_activation_bytes": memory.base_peak.bytes,
                   "non_torch_bytes": memory.non_torch.bytes,
                   "provenance": {"weights": provenance(memory.weights),
                                  "peak_activation": provenance(memory.base_peak),
                                  "non_torch": provenance(memory.non_torch)}},
        "backends": [backend_json(plan, b) for b in plan.backends],
        "warnings": warnings(plan),
        "assumptions": assumptions(plan),
        "published_gaps": [vars(gap) for gap in published.gaps(plan)],
    }
