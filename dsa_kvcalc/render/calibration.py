"""Rendering a Calibration: the JSON contract, the text table, and the calibrated recipe YAML. No arithmetic of its own
beyond differences and unit conversion for display."""


import yaml

from dsa_kvcalc.calibrate import Calibration, TermRow
from dsa_kvcalc.keys import shown
from dsa_kvcalc.render import json_text
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.report import TOOL

CARRIED = ("at this recipe the memory block is the log's; at another shape (--set, a sweep) plan keeps each measured "
           "term and carries it by its estimate of the change, and re-derives the decode logits, the graphs' logits "
           "(other top-k backends too), the #62860 reservation and its effect on the peak (through the indexer "
           "headroom), KV bytes and tokens")


def cell(row: TermRow, value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / GIB:.2f} GiB" if row.unit == "bytes" else f"{value:,}"


def difference(row: TermRow) -> str:
    gap = row.difference
    if gap is None:
        return ""
    text = f"{gap / GIB:+.2f} GiB" if row.unit == "bytes" else f"{gap:+,}"
    return text + (f" ({gap / row.log:+.1%})" if row.log else "")


def summary(c: Calibration) -> list[str]:
    m, r = c.measured, c.recipe
    log_tokens = m.kv_tokens
    read = (f"{m.ranks} process(es) printed memory lines; sizing rank {m.rank or '(unprefixed)'}" if c.rows else
            f"an out-of-memory message (rank {m.rank or 'unprefixed'}), no memory lines")
    lines = [
        f"log: vLLM {m.version or 'version not printed'}; {read}",
        f"recipe ({c.recipe_source}): {r.model.name} on {r.gpu.name}, TP{r.tensor_parallel_size} "
        f"DP{r.data_parallel_size}{' EP' if r.enable_expert_parallel else ''}, max-num-seqs {r.max_num_seqs}, "
        f"max-model-len {r.max_model_len:,}, {r.num_speculative_tokens} spec tokens, gpu-memory-utilization "
        f"{r.gpu_memory_utilization}, kv-cache-dtype {r.kv_cache_dtype}, top-k backend {r.topk_backend}",
    ]
    if log_tokens is not None:
        gap = c.kv_tokens_calibrated - log_tokens
        block = c.block_tokens
        verdict = "within one block" if abs(gap) < block else f"off by more than one {block}-token block"
        lines.append(f"calibrated plan ({r.engine.label}'s own tokens, {r.topk_backend}): {c.kv_tokens_calibrated:,} KV tokens vs "
                     f"the log's {log_tokens:,} ({gap:+,}: {verdict})")
    if c.headroom:
        h = c.headroom
        lines.append(
            f"indexer headroom ({h.backend}) = reserved {h.reserved_bytes / GIB:.2f} GiB - (KV before "
            f"{h.kv_bytes_before / GIB:.2f} - KV after {h.kv_bytes_after / GIB:.2f} GiB) = "
            f"{h.headroom_bytes / GIB:.2f} GiB (KV from {h.kv_source})")
        if h.after_tokens_log is not None:
            lines.append(f"calibrated plan after #62860: {h.after_tokens_plan:,} KV tokens vs the after log's "
                         f"{h.after_tokens_log:,} ({h.after_tokens_plan - h.after_tokens_log:+,})")
    if c.oom:
        lines += oom_lines(c)
    return lines


def oom_lines(c: Calibration) -> list[str]:
    o = c.oom
    live = f" + {o.live_bytes / GIB:.2f} GiB of logits live in the same call" if o.live_bytes else ""
    return [f"out of memory ({o.backend}): {o.allocation} of {o.decodes} decodes ({o.allocation_bytes / GIB:.2f} GiB) "
            f"failed with {o.free_bytes / GIB:.2f} GiB free (the message's, less its rounding){live}: the step had "
            f"{o.room_bytes / GIB:.3f} GiB for the decode logits",
            f"unprofiled = total - held - KV-init buffers - that room = {o.unprofiled_bytes / GIB:+.3f} GiB (memory."
            f"unprofiled_bytes); plan now says OOM above {o.max_decodes} decodes, safe at {o.safe_decodes} (margin "
            f"{o.margin_bytes / MIB:.0f} MiB)"]


def calibrated_from(row: TermRow) -> str:
    return f"{row.source}, line {row.line}" if row.line is not None and row.source == "log" else row.source


def render_text(c: Calibration, width: int | None = None) -> str:
    """The summary, the terms as a table (one line a term, "header: value" pairs, where the table is wider than
    width), then the notes."""
    header = ("term", "log", "plan (same recipe)", "plan - log", "calibrated from")
    rows = [(row.term, cell(row, row.log), cell(row, row.plan), difference(row), calibrated_from(row))
            for row in c.rows]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    if width is not None and sum(widths) + 2 * (len(widths) - 1) > width:
        table = [f"{line[0]}: " + "; ".join(f"{label} {value}" for label, value in zip(header[1:], line[1:])
                                            if value not in ("", "-")) for line in rows]
    else:
        table = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *rows]]
    notes = [f"note: {n}" for n in c.notes] + [f"warning: {w}" for w in c.warnings] + [f"note: {CARRIED}"]
    return "\n".join(summary(c) + ([""] + table if rows else []) + [""] + notes) + "\n"


def calibration_json(c: Calibration) -> dict:
    m = c.measured
    return {
        "tool": TOOL,
        "log": {"version": m.version, "sizing_rank": m.rank, "ranks": m.ranks,
                "weights_bytes": m.weights_bytes, "peak_activation_bytes": m.peak_activation_bytes,
                "non_torch_bytes": m.non_torch_bytes, "cudagraph_bytes": m.cudagraph_bytes,
                "available_kv_bytes": m.available_kv_bytes, "total_memory_bytes": m.total_memory_bytes,
                "kv_tokens": m.kv_tokens, "max_model_len": m.max_model_len, "max_concurrency": m.max_concurrency},
        "recipe": c.recipe.resolved(),
        "recipe_source": c.recipe_source,
        "terms": [{"term": row.term, "unit": row.unit, "log": row.log, "plan": row.plan,
                   "difference": row.difference,
                   "calibrated_from": row.source, "log_line": row.line} for row in c.rows],
        "memory_bytes": c.memory,
        "kv_bytes_per_token_implied": c.kv_bytes_per_token_implied,
        "kv_tokens_calibrated": c.kv_tokens_calibrated,
        "headroom": None if c.headroom is None else vars(c.headroom),
        "oom": None if c.oom is None else vars(c.oom),
        "notes": c.notes,
        "warnings": c.warnings,
    }


def render_json(c: Calibration) -> str:
    return json_text(calibration_json(c))


def recipe_yaml(c: Calibration, log_name: str) -> str:
    # Everything from the log is shown as a name or a repr: a line break in it would end the comment.
    header = [f"# Calibrated by dsa-kvcalc calibrate from {log_name!r} (vLLM {shown(c.measured.version or '?')}, rank "
              f"{shown(c.measured.rank or 'unprefixed')}); memory terms in bytes, per rank:"]
    header += [f"#   {row.term}: {row.source}" for row in c.rows[:4]]
    if c.headroom:
        header.append(f"#   indexer headroom ({c.headroom.backend}): reserved - (KV before - KV after #62860)")
    if c.oom:
        header.append(f"#   unprofiled: the out-of-memory message, {c.oom.allocation} of {c.oom.decodes} decodes")
    return "\n".join(header) + "\n" + yaml.safe_dump(c.raw_recipe, sort_keys=False)
