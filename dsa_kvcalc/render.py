"""Rendering a Plan: the JSON contract, a rich table, markdown, CSV and --explain. No arithmetic of its own."""

import csv
import io
import json

from dsa_kvcalc.capacity import BackendPlan, Plan, decode_rows
from dsa_kvcalc.catalog import GIB, MIB

OOM_ASSUMPTION = ("free memory at run time is total x (1 - gpu-memory-utilization): an unfixed vLLM's KV cache takes "
                  "the rest, and eager, piecewise and mixed steps allocate the decode logits from it (the seed's rank "
                  "had 3.04 GiB free plus 1.54 GiB of live BF16 logits when it died at 131 decodes)")


def gib(value: int) -> str:
    return f"{value / GIB:.2f}"


def backend_json(plan: Plan, b: BackendPlan) -> dict:
    if not b.available:
        return {"backend": b.backend, "available": False, "reason": b.reason, "selected": b.selected,
                **{k: None for k in ("decode_logits", "prefill_budget_bytes", "reserved_bytes",
                                     "reserved_bytes_before_fix", "cudagraph_logits_bytes", "kv_cache_bytes",
                                     "kv_cache_tokens", "max_concurrency", "kv_cache_tokens_before_fix")}}
    dl = b.decode_logits
    auto = plan.backend("auto") if plan.recipe.engine == "vllm" else b
    return {
        "backend": b.backend, "available": True, "reason": b.reason, "selected": b.selected,
        "decode_logits": {
            "rows": dl.rows, "columns": dl.columns, "padded_columns": dl.padded_columns,
            "logits_dtype": dl.logits_dtype, "logits_bytes_per_element": dl.logits_bytes_per_element,
            "copy_bytes_per_element": dl.copy_bytes_per_element, "bytes_per_element": dl.bytes_per_element,
            "bytes": dl.bytes, "copy_bytes": dl.copy_bytes, "alignment_bytes": dl.alignment_bytes},
        "prefill_budget_bytes": b.prefill_budget_bytes,
        "reserved_bytes": b.reserved_bytes,
        "reserved_bytes_before_fix": b.reserved_bytes_before_fix,
        "cudagraph_logits_rows": b.cudagraph_logits_rows,
        "cudagraph_logits_bytes": b.cudagraph_logits_bytes,
        "cudagraph_bytes": b.cudagraph.bytes,
        "indexer_headroom_bytes": b.indexer_headroom_bytes,
        "peak_activation_bytes": b.peak_activation_bytes,
        "kv_cache_bytes": b.kv_cache_bytes,
        "kv_cache_tokens": b.kv_cache_tokens,
        "max_concurrency": b.max_concurrency,
        "kv_cache_tokens_vs_auto": (round(b.kv_cache_tokens / auto.kv_cache_tokens - 1, 4)
                                    if auto.kv_cache_tokens else None),
        "kv_cache_bytes_before_fix": b.kv_cache_bytes_before_fix,
        "kv_cache_tokens_before_fix": b.kv_cache_tokens_before_fix,
        "oom_before_fix": {"free_bytes": b.oom_before_fix.free_bytes,
                           "bytes_per_decode": b.oom_before_fix.bytes_per_decode,
                           "max_decodes": b.oom_before_fix.max_decodes, "at_risk": b.oom_before_fix.at_risk},
    }


def warnings(plan: Plan) -> list[str]:
    recipe = plan.recipe
    found = []
    selected = next((b for b in plan.backends if b.selected), None)
    if selected and not selected.available:
        found.append(f"sparse-indexer-topk-backend {selected.backend} cannot run here: {selected.reason}")
    at_risk = {}
    for b in plan.backends:
        if b.available and b.oom_before_fix.at_risk:
            at_risk.setdefault((b.oom_before_fix, b.decode_logits.padded_columns, b.decode_logits.bytes_per_element),
                               []).append(b.backend)
    for (oom, padded, element), names in at_risk.items():
        found.append(
            f"without vLLM #62860 ({', '.join(names)}): a step that runs its decode logits outside a CUDA graph "
            f"(eager, piecewise, mixed) runs out of memory above {oom.max_decodes} concurrent decodes "
            f"(max-num-seqs {recipe.max_num_seqs}): {1 + recipe.num_speculative_tokens} rows x {padded:,} columns x "
            f"{element} B = {oom.bytes_per_decode / MIB:.1f} MiB per decode against {gib(oom.free_bytes)} GiB "
            f"free (assumed: see assumptions)")
    if any(b.available and b.kv_cache_bytes == 0 for b in plan.backends):
        found.append("no memory is left for the KV cache with some backends: vLLM would refuse to start")
    estimated = [name for name, t in (("weights", plan.memory.weights), ("peak activation", plan.memory.peak_activation),
                                      ("non-torch", plan.memory.non_torch)) if not t.measured]
    if estimated and recipe.kv_cache_memory_bytes is None:
        found.append(f"{', '.join(estimated)} memory {'is' if len(estimated) == 1 else 'are'} estimated: put measured "
                     f"values in the recipe's memory block (or run dsa-kvcalc calibrate on a vLLM startup log)")
    if recipe.ignored_keys:
        found.append(f"ignored (do not change memory): {', '.join(recipe.ignored_keys)}")
    return found


def assumptions(plan: Plan) -> list[str]:
    recipe = plan.recipe
    found = [f"out-of-memory bound without #62860: {OOM_ASSUMPTION}",
             f"KV bytes per token: {recipe.model.kv_note}"]
    if not recipe.memory.indexer_headroom_bytes:
        found.append("indexer headroom = the prefill budget: the reservation raises the profiled peak by all it adds "
                     "over the budget (give memory.indexer_headroom_gib, measured, to model less)")
    return found


def plan_json(plan: Plan) -> dict:
    recipe, memory = plan.recipe, plan.memory
    layout = recipe.layout
    return {
        "recipe": recipe.resolved(),
        "ignored_keys": list(recipe.ignored_keys),
        "gpu": {"name": recipe.gpu.name, "arch": recipe.gpu.arch, "total_memory_bytes": recipe.gpu.total_memory_bytes},
        "model": {"name": recipe.model.name, "kv_bytes_per_token": memory.kv_bytes_per_token,
                  "kv_bytes_per_request": memory.kv_bytes_per_request,
                  "kv_block_size": recipe.model.kv_block_size, "index_topk": recipe.model.index_topk},
        "deepgemm_layout": {"versions": layout.versions, "logits_dtype": layout.logits_dtype,
                            "split_columns": layout.split_columns, "stride_rule": layout.stride_rule,
                            "source": layout.source},
        "memory": {"requested_bytes": memory.requested_bytes,
                   "weights_bytes": memory.weights.bytes, "peak_activation_bytes": memory.peak_activation.bytes,
                   "non_torch_bytes": memory.non_torch.bytes,
                   "measured": {"weights": memory.weights.measured, "peak_activation": memory.peak_activation.measured,
                                "non_torch": memory.non_torch.measured}},
        "backends": [backend_json(plan, b) for b in plan.backends],
        "warnings": warnings(plan),
        "assumptions": assumptions(plan),
    }


def quantities(plan: Plan, b: BackendPlan) -> list[tuple[str, str]]:
    """(label, display value) for one available backend, in table order."""
    dl = b.decode_logits
    change = backend_json(plan, b)["kv_cache_tokens_vs_auto"]
    element = (f"{dl.logits_bytes_per_element}+{dl.copy_bytes_per_element}" if dl.copy_bytes_per_element
               else str(dl.logits_bytes_per_element))
    return [
        ("rows", f"{dl.rows:,}"),
        ("padded width", f"{dl.padded_columns:,}"),
        ("B/element", element),
        ("logits GiB", gib(dl.bytes)),
        ("reserved GiB", gib(b.reserved_bytes)),
        ("  before fix", gib(b.reserved_bytes_before_fix)),
        ("graph logits GiB", gib(b.cudagraph_logits_bytes)),
        ("CUDA graphs GiB", gib(b.cudagraph.bytes) + ("" if b.cudagraph.measured else "~")),
        ("KV GiB/rank", gib(b.kv_cache_bytes)),
        ("KV tokens/rank", f"{b.kv_cache_tokens:,}"),
        ("max concurrency", f"{b.max_concurrency:.2f}x"),
        ("tokens vs auto", "" if change is None or b.backend == "auto" else f"{change:+.1%}"),
        ("tokens before fix", f"{b.kv_cache_tokens_before_fix:,}"),
        ("OOM before fix", f">{b.oom_before_fix.max_decodes} decodes" if b.oom_before_fix.at_risk else "no"),
    ]


def table(plan: Plan) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows (one per quantity, one column per available backend) and the unavailable backends."""
    available = [b for b in plan.backends if b.available]
    header = ["", *(b.backend + (" *" if b.selected else "") for b in available)]
    columns = [quantities(plan, b) for b in available]
    rows = [[label, *(column[i][1] for column in columns)] for i, (label, _) in enumerate(columns[0])] if columns else []
    unavailable = [f"{b.backend}: {b.reason}" for b in plan.backends if not b.available]
    return header, rows, unavailable


def heading(plan: Plan) -> str:
    r = plan.recipe
    parallel = f"TP{r.tensor_parallel_size} DP{r.data_parallel_size}" + (" EP" if r.enable_expert_parallel else "")
    if r.decode_context_parallel_size > 1:
        parallel += f" DCP{r.decode_context_parallel_size}"
    return (f"{r.model.name} on {r.gpu.name} ({r.gpu.arch}, {gib(r.gpu.total_memory_bytes)} GiB), {parallel}, "
            f"engine {r.engine}, DeepGEMM {r.layout.versions} ({r.layout.logits_dtype} logits); "
            f"max-num-seqs {r.max_num_seqs}, max-model-len {r.max_model_len:,}, "
            f"{r.num_speculative_tokens} spec tokens, gpu-memory-utilization {r.gpu_memory_utilization}")


def memory_line(plan: Plan) -> str:
    m = plan.memory

    def show(label, t):
        return f"{label} {gib(t.bytes)} GiB ({'measured' if t.measured else 'estimated'})"
    return (f"per rank: requested {gib(m.requested_bytes)} GiB; {show('weights', m.weights)}; "
            f"{show('peak activation', m.peak_activation)}; {show('non-torch', m.non_torch)}; "
            f"KV {m.kv_bytes_per_token:,} B/token"
            + (f" + {m.kv_bytes_per_request / GIB:.2f} GiB per request" if m.kv_bytes_per_request else ""))


CAPTION = ("* the recipe's sparse-indexer-topk-backend; B/element: logits output + FP32 copy; graph logits: the "
           "largest FULL decode graph's rows; ~ estimated; reserved: the profile run's reservation after vLLM #62860")


def render_table(plan: Plan, console) -> None:
    from rich.table import Table

    header, rows, unavailable = table(plan)
    grid = Table(title=heading(plan), title_justify="left", caption=CAPTION,
                 caption_justify="left")
    for i, label in enumerate(header):
        grid.add_column(label, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        grid.add_row(*row)
    console.print(grid)
    for line in unavailable:
        console.print(f"unavailable: {line}", highlight=False)
    console.print(memory_line(plan), highlight=False)
    for line in warnings(plan):
        console.print(f"[yellow]warning:[/yellow] {line}", highlight=False)


def render_markdown(plan: Plan) -> str:
    header, rows, unavailable = table(plan)
    lines = [f"**{heading(plan)}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", CAPTION, "", *(f"- unavailable: {u}" for u in unavailable), f"- {memory_line(plan)}",
              *(f"- warning: {w}" for w in warnings(plan))]
    return "\n".join(lines) + "\n"


def flatten(prefix: str, value: dict, into: dict) -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}"""
    for key, inner in value.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(inner, dict):
            flatten(name, inner, into)
        else:
            into[name] = inner
    return into


def render_csv(plan: Plan) -> str:
    out = io.StringIO()
    rows = [flatten("", backend_json(plan, b), {}) for b in plan.backends]
    fields = list(dict.fromkeys(k for row in rows for k in row))
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def render_json(plan: Plan) -> str:
    return json.dumps(plan_json(plan), indent=2) + "\n"


def explain(plan: Plan) -> str:
    """Each quantity with its formula and the numbers substituted."""
    r, m = plan.recipe, plan.memory
    k = r.num_speculative_tokens
    lines = [heading(plan), ""]
    if r.engine == "deepinfer":
        lines.append(f"rows = max_num_seqs x (1 + nextn) = {r.max_num_seqs} x {1 + k} = {decode_rows(r):,}")
    else:
        lines.append(f"rows = min(max_num_seqs, max_num_batched_tokens) x (1 + num_speculative_tokens) = "
                     f"min({r.max_num_seqs}, {r.max_num_batched_tokens}) x {1 + k} = {decode_rows(r):,}")
    layout = r.layout
    stride = 1024 // (2 if layout.logits_dtype == "bf16" else 4)
    rule = (f"align(L, lcm({layout.split_columns}, 1024 B / {1024 // stride} B = {stride}))" if layout.stride_rule == "lcm"
            else f"align(align(L, {layout.split_columns}), 1024 B / {1024 // stride} B = {stride})")
    for b in plan.backends:
        if not b.available:
            lines.append(f"\n[{b.backend}] unavailable: {b.reason}")
            continue
        dl = b.decode_logits
        lines += [
            f"\n[{b.backend}]{' (selected)' if b.selected else ''}",
            f"  padded width = {rule} with L = {dl.columns:,} -> {dl.padded_columns:,} columns "
            f"(DeepGEMM {layout.versions}, {r.gpu.arch})",
            f"  bytes per element = {dl.logits_dtype} output {dl.logits_bytes_per_element} + FP32 copy "
            f"{dl.copy_bytes_per_element} = {dl.bytes_per_element}",
            f"  decode logits = {dl.rows:,} x {dl.padded_columns:,} x {dl.bytes_per_element} = {dl.bytes:,} B "
            f"({gib(dl.bytes)} GiB; alignment adds {dl.alignment_bytes / MIB:.1f} MiB)",
            f"  reserved = max(prefill budget {b.prefill_budget_bytes:,}, decode logits {dl.bytes:,}) = "
            f"{b.reserved_bytes:,} B (before #62860: {b.reserved_bytes_before_fix:,} B)",
            f"  peak activation = base {gib(m.peak_activation.bytes)} GiB + max(0, reserved {gib(b.reserved_bytes)} - "
            f"indexer headroom {gib(b.indexer_headroom_bytes)}) = {gib(b.peak_activation_bytes)} GiB",
            f"  graph logits = {b.cudagraph_logits_rows:,} captured decode rows x {dl.padded_columns:,} x "
            f"{dl.bytes_per_element} = {gib(b.cudagraph_logits_bytes)} GiB of CUDA graphs "
            f"{gib(b.cudagraph.bytes)} GiB ({'measured' if b.cudagraph.measured else 'estimated'})",
        ]
        if r.kv_cache_memory_bytes is not None:
            lines.append(f"  KV cache = kv-cache-memory-bytes = {b.kv_cache_bytes:,} B")
        else:
            lines.append(
                f"  KV cache = requested {gib(m.requested_bytes)} - weights {gib(m.weights.bytes)} - peak "
                f"{gib(b.peak_activation_bytes)} - non-torch {gib(m.non_torch.bytes)} - graphs {gib(b.cudagraph.bytes)}"
                f" = {gib(b.kv_cache_bytes)} GiB")
        block = r.model.kv_block_size
        dcp = f" x DCP {r.decode_context_parallel_size}" if r.decode_context_parallel_size > 1 else ""
        if m.kv_bytes_per_request:
            tokens = (f"{b.kv_cache_bytes:,}{dcp} x {r.max_model_len:,} / ({m.kv_bytes_per_token:,} B x "
                      f"{r.max_model_len:,} + {m.kv_bytes_per_request:,} B per request)")
        else:
            tokens = f"floor({b.kv_cache_bytes:,}{dcp} / ({block} x {m.kv_bytes_per_token:,} B)) x {block}"
        lines += [
            f"  KV tokens = {tokens} = {b.kv_cache_tokens:,} (before #62860: {b.kv_cache_tokens_before_fix:,})",
            f"  max concurrency = {b.kv_cache_tokens:,} / {r.max_model_len:,} = {b.max_concurrency:.2f}x",
            f"  before #62860: {b.oom_before_fix.free_bytes:,} B free / {b.oom_before_fix.bytes_per_decode:,} B per "
            f"decode = {b.oom_before_fix.max_decodes} decodes fit{' (at risk)' if b.oom_before_fix.at_risk else ''}",
        ]
    lines += ["", memory_line(plan)] + [f"assumption: {a}" for a in assumptions(plan)]
    return "\n".join(lines) + "\n"
