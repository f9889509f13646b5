"""Rendering a Plan for people and files: a rich table, markdown, CSV, JSON and --explain. No arithmetic of its own:
the numbers come from the Plan and report.py's JSON contract."""

import csv
import io

from dsa_kvcalc.capacity import BackendPlan, Plan, Reservation, Reserved
from dsa_kvcalc.catalog import Rows
from dsa_kvcalc.graphs import GraphEstimate
from dsa_kvcalc.keys import flatten_keys
from dsa_kvcalc.units import MIB
from dsa_kvcalc import published
from dsa_kvcalc.render import csv_fields, gib, json_text, least_widths, print_table, print_prose, table_width
from dsa_kvcalc.report import (assumptions, backend_json, plan_json, fix_name, reserved_label, summary,
                               warnings)

MARKS = {"measured": "", "derived": "", "fitted": "^", "estimated": "~"}
VERSUS_AUTO = "tokens vs auto"  # the one row in which backends with the same figures differ


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
        ("graph logits GiB", gib(b.cudagraph_logits_bytes)),
        ("CUDA graphs GiB", gib(b.cudagraph.bytes) + MARKS[b.cudagraph.provenance]),
        ("KV GiB/rank", gib(b.kv_cache_bytes)),
        ("KV tokens/rank", f"{b.kv_cache_tokens:,}"),
        ("max concurrency", f"{b.max_concurrency:.2f}x"),
        (VERSUS_AUTO, "" if change is None or b.backend == "auto" else f"{change:+.1%}"),
        (f"tokens {'with' if b.other.reserves_decode_logits else 'without'} fix", f"{b.other.kv_cache_tokens:,}"),
        ("OOM above", f"{b.oom.max_decodes:,} (safe {b.oom.safe_decodes:,})" if b.oom.at_risk else "no risk"),
    ]


def table(plan: Plan) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows (one per quantity, one column per group of available backends with the same figures) and the
    unavailable backends."""
    alike: dict[tuple, list[BackendPlan]] = {}
    for b in (b for b in plan.backends if b.available):
        alike.setdefault(tuple(q for q in quantities(plan, b) if q[0] != VERSUS_AUTO), []).append(b)
    columns = [quantities(plan, group[0]) for group in alike.values()]  # as for the group's first (auto, if in it)
    header = ["", *(", ".join(b.backend + (" *" if b.selected else "") for b in group) for group in alike.values())]
    rows = [[label, *(column[i][1] for column in columns)] for i, (label, _) in enumerate(columns[0])] if columns else []
    rows = [row for row in rows if any(row[1:])]  # a row no backend fills says nothing
    unavailable = [f"{b.backend}: {b.reason}" for b in plan.backends if not b.available]
    return header, rows, unavailable


def summary_lines(s: dict) -> list:
    """The answer first, one rich Text an answer (plain in a pipe): whether this release starts the recipe and how
    many KV tokens a rank holds, the OOM risk and its workaround, and the top-k backend worth comparing."""
    from rich.text import Text

    label, oom = s["engine_label"], s["oom"]
    lines = [Text.assemble(("note", "yellow"), f": {note}") for note in s["notes"]]
    if s["rules_of"] is not None:
        lines.append(Text(f"{label} is newer than the newest release modelled, {s['rules_of']}: answered by "
                          f"{s['rules_of']}'s rules, which may have moved since."))
    if s["instead_of"] is not None:
        lines.append(Text(f"{s['instead_of']} cannot run here: answered for {s['backend']}"))
    if s["refused"]:
        lines.append(Text.assemble((f"{label} would not start", "bold red"), f": {s['refused']}."))
    else:
        dp = s["data_parallel_size"]
        deployment = (f"; the deployment, DP{dp}, holds {dp} x that, {s['deployment_kv_cache_tokens']:,}." if dp > 1
                      else ".")
        error = s["kv_cache_tokens_error"]
        bar = f" (estimated +-{error['relative']:.1%}: {error['basis']})" if error else ""
        lines.append(Text.assemble((f"{label} starts", "bold green"), f". Per rank {s['backend']} holds "
                                   f"{s['kv_cache_tokens']:,} KV tokens{bar}: {s['max_concurrency']:.2f} requests of "
                                   f"max-model-len {s['max_model_len']:,}{deployment}"))
    if s["refused"]:
        pass  # no step runs
    elif oom["at_risk"]:
        compared = s["compared"] or {}
        shown = [fix for fix in oom["fixes"]  # deep_select against auto has a line of its own
                 if not (fix["name"] == "deep_select" and compared.get("backend") == "deep_select")]
        fixes = f" {', '.join(fix_text(fix, i == 0) for i, fix in enumerate(shown))}." if shown else ""
        lines.append(Text.assemble(("OOM", "bold red"), f" above {oom['max_decodes']:,} concurrent decodes, safe up to "
                                   f"{oom['safe_decodes']:,}.{fixes}"))
    elif s["reservation"] == Reserved.BUDGET.name:
        lines.append(Text.assemble(("no OOM risk", "green"), f": the decode logits of {oom['max_num_seqs']:,} "
                                   f"sequences fit"))
    else:
        lines.append(Text.assemble(("no OOM risk", "green"), f": {s['reserved']}"))
    compared = s["compared"]
    if compared is not None and compared["refused"]:
        lines.append(Text(f"{compared['backend']} would not start either: {compared['refused']}."))
    elif compared is not None:
        change, other = compared["kv_cache_tokens_vs_answered"], compared["oom"]
        risk = f"OOM above {other['max_decodes']:,} decodes" if other["at_risk"] else "no OOM risk"
        versus = () if change is None else (" (", (f"{change:+.1%}", "bold green" if change > 0 else "yellow"), ")")
        lines.append(Text.assemble(f"{compared['backend']} instead: {compared['kv_cache_tokens']:,} KV tokens", *versus,
                                   f", {risk}."))
    elif s["deep_select_unavailable"]:
        lines.append(Text(f"deep_select cannot run here: {s['deep_select_unavailable']}."))
    return lines


FIX_VALUES = {"max-num-seqs": "{value}", "kv-cache-memory-bytes": "{gib} GiB", "env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB":
              "{value:,} MiB"}


def fix_text(fix: dict, first: bool) -> str:
    """One fix of the summary's OOM verdict: its name, what it sets, and its KV tokens in millions (the first says
    they are tokens)."""
    value = FIX_VALUES[fix["key"]].format(value=fix["value"], gib=gib(fix["value"]) if fix["key"] ==
                                          "kv-cache-memory-bytes" else "") if fix["key"] in FIX_VALUES else ""
    moves = f", but {fix['moves_risk']}" if fix["moves_risk"] else ""
    unit = " tokens" if first else ""
    return f"--fix {fix['name']}{f': {value}' if value else ''} ({fix['kv_cache_tokens_change'] / 1e6:+.2f} M{unit}{moves})"


def gap_notes(plan: Plan) -> tuple[list[str], list[str]]:
    """Where plan is off a published figure for this deployment, per backend: a short note for the first screen, and
    the figures (this release's side of the fix first) with what is known of why."""
    by_backend: dict[str, list[published.Gap]] = {}
    for gap in published.gaps(plan):
        by_backend.setdefault(gap.backend, []).append(gap)
    first, details = [], []
    for backend, gaps in by_backend.items():
        g = gaps[0]
        first.append(f"{backend} here is {g.change:+.1%} off the {g.published_tokens:,} KV tokens {g.source} measured "
                     f"for this deployment (why: the published line below)")
        figures = " and ".join(f"{gap.published_tokens:,} {'with' if gap.reserves_decode_logits else 'without'} the "
                               f"fix (plan: {gap.planned_tokens:,}, {gap.change:+.1%})" for gap in gaps)
        details.append(f"{g.source} measured {backend} at {figures} KV tokens a rank" + (f": {g.why}" if g.why else ""))
    return first, details


def heading(plan: Plan) -> str:
    r = plan.recipe
    parallel = f"TP{r.tensor_parallel_size} DP{r.data_parallel_size}" + (" EP" if r.enable_expert_parallel else "")
    if r.decode_context_parallel_size > 1:
        parallel += f" DCP{r.decode_context_parallel_size}"
    return (f"{r.model.name} on {r.gpu.name} ({r.gpu.arch}, {gib(r.gpu.total_memory_bytes)} GiB), {parallel}, "
            f"{r.engine.label}, DeepGEMM {r.layout.versions} ({r.layout.logits_dtype} logits); "
            f"max-num-seqs {r.max_num_seqs}, max-model-len {r.max_model_len:,}, "
            f"{r.num_speculative_tokens} spec tokens, gpu-memory-utilization {r.gpu_memory_utilization}; "
            f"{r.engine.label}: {reserved_label(plan, plan.backends[0].release)}")


def memory_line(plan: Plan) -> str:
    m = plan.memory

    def show(label, t):
        return f"{label} {gib(t.bytes)} GiB ({t.provenance})"
    return (f"per rank: requested {gib(m.requested_bytes)} GiB; {show('weights', m.weights)}; "
            f"{show('peak activation', m.base_peak)}; {show('non-torch', m.non_torch)}; "
            f"{kv_line(plan)}")


def kv_line(plan: Plan) -> str:
    kv, m = plan.memory.kv, plan.memory
    groups = ", ".join(f"{len(g.pages)} x {g.block}" + (f"/{g.window}w" if g.window else "") for g in kv.groups)
    return (f"KV cache (derived, {m.sparse_mla_backend}): groups of layers x page tokens "
            f"[{groups}], {kv.block_bytes:,} B a block, {kv.pages_per_request:,} pages a request of "
            f"{plan.recipe.max_model_len:,} tokens ({gib(kv.request_bytes)} GiB needed for one), "
            f"{kv.bytes_per_logged_token:,} B per logged token")


CAPTION = ("* the recipe's sparse-indexer-topk-backend; B/element: logits output + FP32 copy; graph logits: the "
           "largest FULL decode graph's rows; ~ estimated, ^ fitted; reserved: this release's profile-run reservation; "
           "tokens with/without fix: the other side of what reserves the decode logits (vLLM #62860, or the model's own "
           "indexer, as the recipe's line says at its end); OOM above: the decodes at the edge of the room a step has for "
           "the decode logits at run time, and those safe a margin below it (see the warning)")


def column_groups(header: list[str], rows: list[list[str]], width: int) -> list[list[int]]:
    """Backend columns in groups that fit the console's width beside the label column, so that no figure is cut."""
    widths = least_widths(header, rows)
    groups: list[list[int]] = [[]]
    for i in range(1, len(header)):
        if groups[-1] and table_width([widths[0], *(widths[j] for j in groups[-1]), widths[i]]) > width:
            groups.append([])
        groups[-1].append(i)
    return groups


def render_table(plan: Plan, console, fixes: list = ()) -> None:
    """The answer and the table first (the first screen), then what they rest on; on a terminal, the answer again
    last, so that it is on screen when the command ends."""
    from rich.text import Text

    header, rows, unavailable = table(plan)
    answer = summary_lines(summary(plan, fixes))
    first, details = gap_notes(plan)
    for line in answer:
        print_prose(console, line, 0)
    for group in column_groups(header, rows, console.width):
        columns = [0, *group]
        print_table(console, [header[i] for i in columns], [[row[i] for i in columns] for row in rows])
    for line in first:
        print_prose(console, Text.assemble(("note:", "yellow"), f" {line}"))
    print_prose(console, heading(plan))
    print_prose(console, CAPTION)
    for line in unavailable:
        print_prose(console, f"unavailable: {line}")
    print_prose(console, memory_line(plan))
    for line in warnings(plan):
        print_prose(console, Text.assemble(("warning:", "yellow"), f" {line}"))
    for line in assumptions(plan):
        print_prose(console, f"assumption: {line}")
    for line in details:
        print_prose(console, f"published: {line}")
    if console.is_terminal:
        print_prose(console, Text("answer (as at the top):", "dim"))
        for line in answer:
            print_prose(console, line, 0)


def render_markdown(plan: Plan, fixes: list = ()) -> str:
    header, rows, unavailable = table(plan)
    first, details = gap_notes(plan)
    lines = [*(f"- {line.plain}" for line in summary_lines(summary(plan, fixes))), *(f"- note: {n}" for n in first), "",
             f"**{heading(plan)}**", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "\\" + CAPTION, "", *(f"- unavailable: {u}" for u in unavailable), f"- {memory_line(plan)}",
              *(f"- warning: {w}" for w in warnings(plan)), *(f"- assumption: {a}" for a in assumptions(plan)),
              *(f"- published: {d}" for d in details)]
    return "\n".join(lines) + "\n"


def render_csv(plan: Plan) -> str:
    out = io.StringIO()
    rows = [flatten_keys(backend_json(plan, b)) for b in plan.backends]
    writer = csv.DictWriter(out, fieldnames=csv_fields(rows), lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def render_json(plan: Plan, fixes: list = ()) -> str:
    return json_text(plan_json(plan, fixes))


def width_rule(plan: Plan, b: BackendPlan) -> str:
    """The padded width's multiple, as the layout makes it."""
    dl, layout = b.decode_logits, plan.recipe.layout
    split = f"whole {layout.split_columns}-column splits"
    if not layout.stride_aligned:
        return f"align(L, {dl.width_multiple}) ({split})"
    return (f"align(L, lcm({layout.split_columns}, 1024 B / {dl.logits_bytes_per_element} B = {dl.stride_columns}) = "
            f"{dl.width_multiple}) ({split}, 1024-byte row strides)")


RESERVED_FORMULAS = {
    Reserved.BUDGET: "the prefill budget {budget:,} B, no decode term",
    Reserved.DECODE_LOGITS: "max(prefill budget {budget:,}, decode logits {term:,}) = {total:,} B",
    Reserved.UNPADDED_FP32: "max(prefill budget {budget:,}, FP32 logits over the unpadded width {term:,}) = {total:,} B",
    Reserved.HELD: "decode logits {term:,} B, which the profile run holds",
    Reserved.WORKSPACE: "prefill budget {budget:,} + ROCm's locked indexer workspace {term:,} = {total:,} B",
}


def reserved_formula(r: Reservation) -> str:
    return RESERVED_FORMULAS[r.kind].format(budget=r.budget_bytes, term=r.term_bytes, total=r.bytes)


def reserved_line(plan: Plan, b: BackendPlan) -> str:
    release, other = b.release.reservation, b.other.reservation
    if release == other:
        return f"  reserved = {reserved_formula(release)}, on either side of the fix"
    return (f"  reserved = {reserved_formula(release)} ({fix_name(plan, b.other.reserves_decode_logits)}: "
            f"{reserved_formula(other)})")


def kv_lines(plan: Plan, b: BackendPlan) -> list[str]:
    r, m, kv = plan.recipe, plan.memory, plan.memory.kv
    if r.kv_cache_memory_bytes is not None:
        kv_line = f"  KV cache = kv-cache-memory-bytes = {b.kv_cache_bytes:,} B"
    else:
        graphs = (f"graphs {b.cudagraph_subtracted_bytes:,}" if b.cudagraph_subtracted_bytes or not b.cudagraph.bytes
                  else f"graphs 0 ({r.engine.label} does not subtract its CUDA-graph estimate)")
        left = (f"requested {m.requested_bytes:,} - weights {m.weights.bytes:,} - peak {b.peak_activation_bytes:,} - "
                f"non-torch {m.non_torch.bytes:,} - {graphs}")
        kv_line = (f"  KV cache = {left} = {b.kv_cache_bytes:,} B ({gib(b.kv_cache_bytes)} GiB)" if b.kv_cache_bytes
                   else f"  KV cache = max(0, {left}) = 0 B")
    blocks = f"floor({b.kv_cache_bytes:,} / {kv.block_bytes:,} B a block)"
    full_blocks = "/".join(f"{block:,}" for block in sorted({g.block for g in kv.groups if g.kind == "full"}))
    # vLLM's "GPU KV cache size": from 0.20.1 int(concurrency x max-model-len), DCP inside a full group's pages
    # (vllm==0.20.1 vllm/v1/core/kv_cache_utils.py:1699-1706); before, blocks // groups x the smallest block x DCP
    # (vllm==0.20.0 vllm/v1/core/kv_cache_utils.py:1689-1711)
    tokens = (f"int({blocks} / {kv.pages_per_request:,} pages a request x {r.max_model_len:,})"
              if kv.tokens_from_concurrency else
              f"{blocks} // {len(kv.groups)} groups x {min(g.block for g in kv.groups)} tokens a block x DCP {kv.dcp}")
    pages = (f"  pages a request = {kv.pages_per_request:,}: a full-attention group's cdiv(max-model-len "
             f"{r.max_model_len:,}, {full_blocks} tokens a block x DCP {kv.dcp}), with window and state groups' "
             f"{kv.window_state_pages:,}")
    return [
        kv_line,
        f"  KV tokens = {tokens} = {b.kv_cache_tokens:,} ({fix_name(plan, b.other.reserves_decode_logits)}: "
        f"{b.other.kv_cache_tokens:,})",
        *([pages] if kv.tokens_from_concurrency else []),
        f"  max concurrency = {b.kv_cache_tokens:,} / {r.max_model_len:,} = {b.max_concurrency:.2f}x",
    ]


def backend_lines(plan: Plan, b: BackendPlan) -> list[str]:
    """One backend's steps, each with its formula and the numbers substituted (bytes, so that each line adds up)."""
    r, m = plan.recipe, plan.memory
    if not b.available:
        return [f"\n[{b.backend}] unavailable: {b.reason}"]
    dl = b.decode_logits
    width = (f"L = max-model-len {r.max_model_len:,} // {r.indexer_width_ratio} = {dl.columns:,}"
             if r.indexer_width_ratio > 1 else f"L = max-model-len {dl.columns:,}")
    return [
        f"\n[{b.backend}]{' (selected)' if b.selected else ''}",
        f"  padded width = {width_rule(plan, b)} with {width} -> {dl.padded_columns:,} columns "
        f"(DeepGEMM {r.layout.versions}, {r.gpu.arch})",
        f"  bytes per element = {dl.logits_dtype} output {dl.logits_bytes_per_element} + FP32 copy "
        f"{dl.copy_bytes_per_element} = {dl.bytes_per_element}",
        f"  decode logits = {dl.rows:,} x {dl.padded_columns:,} x {dl.bytes_per_element} = {dl.bytes:,} B "
        f"({gib(dl.bytes)} GiB; alignment adds {dl.alignment_bytes / MIB:.1f} MiB)",
        reserved_line(plan, b),
        f"  peak activation = base {m.base_peak.bytes:,} + max(0, reserved {b.reserved_bytes:,} - indexer "
        f"headroom {b.indexer_headroom_bytes:,}) = {b.peak_activation_bytes:,} B ({gib(b.peak_activation_bytes)} GiB)",
        f"  graph logits = {b.cudagraph_logits_rows:,} captured decode rows x {dl.padded_columns:,} x "
        f"{dl.bytes_per_element} = {b.cudagraph_logits_bytes:,} B of CUDA graphs {b.cudagraph.bytes:,} B "
        f"({gib(b.cudagraph.bytes)} GiB, {b.cudagraph.provenance})",
        *kv_lines(plan, b),
        *oom_lines(plan, b),
    ]


def oom_lines(plan: Plan, b: BackendPlan) -> list[str]:
    """The room a step has for the decode logits outside FULL CUDA graphs, term by term (capacity.OomRisk)."""
    o, m = b.oom, plan.memory
    return [
        f"  held = KV {b.kv_cache_bytes:,} + weights {m.weights.bytes:,} + base peak {m.base_peak.bytes:,} + non-torch "
        f"{m.non_torch.bytes:,} + graph pool {b.cudagraph.bytes:,} = {o.held_bytes:,} B",
        f"  room outside FULL graphs = total {plan.recipe.gpu.total_memory_bytes:,} - held {o.held_bytes:,} - KV-init "
        f"buffers {o.kv_init_buffers.bytes:,} ({o.kv_init_buffers.provenance}: {o.kv_init_buffers.source}) - unprofiled "
        f"{o.unprofiled.bytes:,} ({o.unprofiled.provenance}: {o.unprofiled.source}) = {o.room_bytes:,} B",
        f"  OOM above room // {o.bytes_per_decode:,} B a decode = {o.max_decodes} decodes; safe = (room - margin "
        f"{o.margin_bytes:,}) // {o.bytes_per_decode:,} = {o.safe_decodes}; the worst step holds {o.worst_decodes}"
        f"{': at risk' if o.at_risk else ''}",
    ]


def estimate_line(plan: Plan) -> str:
    """What vLLM's CUDA-graph estimate holds besides the first captures (graphs.cudagraph_estimate)."""
    e, r = plan.cudagraph_estimate, plan.recipe
    graphs = ", ".join(f"{mode} {count:,}" for mode, count in e.graphs.items()) or "none"
    if e.method is GraphEstimate.NONE:
        return f"CUDA-graph estimate: none subtracted by {r.engine.label} (graphs captured: {graphs})"
    sampled = " and ".join(f"{rows:,}" for rows in e.sampled_rows) or "none"
    return (f"CUDA-graph estimate ({e.method.value}): graphs {graphs}; FULL sampled at {sampled} tokens, the first "
            f"holding the largest decode graph's logits, the second none (they fit in the blocks the first freed); "
            f"{e.extrapolated_graphs:,} graphs x {e.per_graph_bytes:,} B floor = {e.floor_bytes:,} B past the first "
            f"captures, inside the CUDA graphs figure")


ROWS_NUMBERS = {Rows.SEQS_CAPPED: "min({seqs}, {tokens}) x {per_seq}", Rows.TOKENS_CAPPED: "min({seqs} x {per_seq}, {tokens})",
                Rows.UNCAPPED: "{seqs} x {per_seq}"}


def explain(plan: Plan) -> str:
    """Each quantity with its formula and the numbers substituted."""
    r, dl = plan.recipe, plan.backends[0].decode_logits
    numbers = ROWS_NUMBERS[dl.rows_rule].format(seqs=r.max_num_seqs, tokens=r.max_num_batched_tokens,
                                                per_seq=1 + r.num_speculative_tokens)
    lines = [heading(plan), "", f"rows = {dl.rows_rule.value} = {numbers} = {dl.rows:,}", estimate_line(plan)]
    for b in plan.backends:
        lines += backend_lines(plan, b)
    lines += ["", memory_line(plan)] + [f"assumption: {a}" for a in assumptions(plan)]
    return "\n".join(lines) + "\n"


# Several servers of one script (a prefill/decode pair), side by side ------------------------------------------------

def side_by_side_rows(plans: list[Plan]) -> list[list[str]]:
    """One row a quantity, one column a server: its deployment, then the answered backend's figures."""
    answered = [next(b for b in p.backends if b.backend == summary(p)["backend"]) for p in plans]
    figures = [dict(quantities(p, b)) if b.available else {} for p, b in zip(plans, answered)]
    recipes = [p.recipe for p in plans]
    rows = [
        ["model", *(r.model.name.split("/")[-1] for r in recipes)],
        ["GPU, release", *(f"{r.gpu.name}, {r.engine.label}" for r in recipes)],
        ["parallel", *(f"TP{r.tensor_parallel_size} DP{r.data_parallel_size}" + (" EP" if r.enable_expert_parallel
                                                                                 else "") for r in recipes)],
        ["max-num-seqs", *(f"{r.max_num_seqs:,}" for r in recipes)],
        ["max-model-len", *(f"{r.max_model_len:,}" for r in recipes)],
        ["max-num-batched-tokens", *(f"{r.max_num_batched_tokens:,}" for r in recipes)],
        ["top-k backend", *(b.backend for b in answered)],
        ["starts", *("no: " + (summary(p)["refused"] or "") if summary(p)["refused"] else "yes" for p in plans)],
    ]
    labels = ("KV tokens/rank", "max concurrency", "KV GiB/rank", "OOM above")
    return rows + [[label, *(f.get(label, "") for f in figures)] for label in labels]


def render_side_by_side(labelled: list[tuple[str, Plan]], console) -> None:
    """Each server's answer under its label, then one table of them side by side, then each one's warnings."""
    from rich.markup import escape

    for label, p in labelled:
        console.print(f"[bold]{escape(label)}[/bold]: {escape(heading(p))}", highlight=False)
        for line in summary_lines(summary(p)):
            console.print(line, highlight=False)
    print_table(console, ["", *(label for label, _ in labelled)], side_by_side_rows([p for _, p in labelled]),
                prose=range(1, len(labelled) + 1))
    for label, p in labelled:
        for line in warnings(p):
            console.print(f"[yellow]warning ({escape(label)}):[/yellow] {escape(line)}", highlight=False)


def side_by_side_json(labelled: list[tuple[str, Plan]]) -> str:
    return json_text({"servers": [{"label": label, **plan_json(p)} for label, p in labelled]})
