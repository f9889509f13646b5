"""Rendering verify --gpu's report (the dict gpu.run_verify returns): JSON, or rich tables. No arithmetic."""


from dsa_kvcalc.units import GIB
from dsa_kvcalc.render import json_text, print_table, print_prose
from dsa_kvcalc.report import TOOL


def render_json(report: dict) -> str:
    return json_text({"tool": TOOL} | report)


def show(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def check_groups(shape: dict) -> list[tuple[list[str], dict]]:
    """Backends with identical checks share one table (on SM90 every backend reads the same FP32 logits)."""
    groups: list[tuple[list[str], dict]] = []
    for result in shape["backends"]:
        same = next((names for names, first in groups if first["checks"] == result["checks"]
                     and first["verdict"] == result["verdict"] and first["cannot_show"] == result["cannot_show"]), None)
        if same is None:
            groups.append(([result["backend"]], result))
        else:
            same.append(result["backend"])
    return groups


def heading(report: dict) -> str:
    gpu, dg = report["gpu"], report["deepgemm"]
    return (f"{gpu['name']} (SM {gpu['compute_capability']}, {gpu['total_memory_bytes'] / GIB:.2f} GiB, planned as "
            f"{gpu['catalog_gpu']}), torch {report['torch_version']}, DeepGEMM {dg['version']}: {dg['layout']}; "
            f"{report['date']}")


def render_table(report: dict, console) -> None:
    from rich.text import Text

    print_prose(console, heading(report))
    for note in report["notes"][1:]:
        print_prose(console, f"note: {note}")
    for shape in report["shapes"]:
        console.print()
        print_prose(console, Text(shape["name"], style="bold"))
        for note in shape["notes"]:
            print_prose(console, f"  note: {note}")
        for names, result in check_groups(shape):
            if result["checks"]:
                rows = [[check["quantity"], show(check["predicted"]), show(check["measured"]),
                         Text.from_markup("[green]ok[/green]" if check["agree"] else "[red]DIFFERS[/red]")]
                        for check in result["checks"]]
                print_table(console, ["quantity", "predicted (plan)", "measured", ""], rows, title=", ".join(names))
            colour = {True: "green", False: "red", None: "yellow"}[result["agree"]]
            print_prose(console, Text(f"  {', '.join(names)}: {result['verdict']}", style=colour))
            for line in result["cannot_show"]:
                print_prose(console, f"  cannot show here: {line}")
        for measured in shape["measured"]:
            reference, topk = measured["reference"], measured["topk"]
            print_prose(console, f"  kernel vs torch reference on rows {reference['rows']}: diff "
                                 f"{reference['diff']:.2e}, max |error| {reference['max_abs_error']:.3g} of "
                                 f"{reference['max_abs_reference']:.3g}; top-k {topk['k']} by {topk['kernel']}: "
                                 f"{topk['extra_peak_bytes']:,} B more at peak")
        if "profile" in shape:
            p = shape["profile"]
            print_prose(console,
                f"  profile ({p['backend']}): free at start {p['free_at_start_bytes'] / GIB:.2f} GiB, CUDA context "
                f"{p['cuda_context_bytes'] / GIB:.2f} GiB, non-torch {p['non_torch_bytes'] / GIB:.2f} GiB measured "
                f"(plan {p['non_torch_bytes_planned'] / GIB:.2f}), indexer reservation "
                f"{p['indexer_reservation_bytes'] / GIB:.2f} GiB, weights {p['weights_bytes'] / GIB:.2f} GiB "
                f"({'measured' if p['weights_measured'] else 'estimated'}, not loaded): KV cache "
                f"{p['kv_cache_bytes'] / GIB:.2f} GiB = {p['kv_cache_tokens']:,} tokens "
                f"(plan {p['kv_cache_tokens_planned']:,})")
        if "reproduce_oom" in shape:
            oom = shape["reproduce_oom"]
            colour = "green" if oom["agree"] else "red"
            print_prose(console, Text(f"  reproduce-oom ({oom['backend']}): {oom['verdict']}", style=colour))
    verdict = "all agree" if report["exit_code"] == 0 else "differences found"
    console.print()
    print_prose(console, f"verify: {verdict} (exit {report['exit_code']})")
