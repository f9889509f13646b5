"""Leave one out: every startup record planned from its serving arguments alone, the activation peak and non-torch
memory refitted without its deployment (dsa_kvcalc/fits.py), against the KV tokens its log printed; and the weights
plan derives against every "Model loading took" line.

    python benchmarks/leave_one_out.py      # prints both tables (markdown)

The bound is the issue's: 2 % of the tokens (3 % for DeepSeek-V4) on the GPUs people deploy on (BOUNDED_GPUS); on the
others the table shows the error and the error bar plan prints (dsa_kvcalc/uncertainty.py).
"""

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dsa_kvcalc import fits, fitting  # noqa: E402
from dsa_kvcalc.uncertainty import error_bar  # noqa: E402
from dsa_kvcalc.records import RECORDS, Record  # noqa: E402
from dsa_kvcalc.units import GIB  # noqa: E402

BOUNDED_GPUS = ("H100", "H200", "H200 NVL", "B200", "B300", "GB200")
BOUND = 0.02
V4_BOUND = 0.03


def bound(record: Record, gpu: str) -> float | None:
    """The issue's bound on a vLLM release's start whose source states its arguments, on the GPUs people deploy on."""
    if gpu not in BOUNDED_GPUS or record.fork or not record.stated:
        return None
    return V4_BOUND if "V4" in record.name else BOUND


@dataclass(frozen=True)
class Row:
    record: Record
    gpu: str
    planned: fitting.Planned
    fitted_on: int  # records the fit was made on
    bound: float | None
    error_bar: float | None  # what plan prints beside the tokens, +- a share

    @property
    def within_error_bar(self) -> bool:
        """The logged tokens lie in the interval plan prints: planned +- the bar's share of the planned tokens."""
        if self.record.tokens is None:
            miss, planned = abs(self.planned.kv_bytes - self.record.available_bytes), self.planned.kv_bytes
        else:
            miss, planned = abs(self.planned.tokens - self.record.tokens), self.planned.tokens
        return self.error_bar is not None and miss <= self.error_bar * planned

    @property
    def within(self) -> bool | None:
        return None if self.bound is None else abs(self.planned.error) <= self.bound


def rows() -> list[Row]:
    points = [fitting.point(r) for r in fits.fitted_records(RECORDS)]
    found = []
    for record in RECORDS:
        fit = fits.leave_out(points, record.deployment)
        planned = fitting.plan_with(record, fit)
        plan = fitting.planned(record)
        bar = error_bar(plan, plan.backend(plan.recipe.topk_backend))
        gpu = plan.recipe.gpu.name
        found.append(Row(record, gpu, planned, len(fit.points), bound(record, gpu), bar and bar.relative))
    return found


def weights_rows() -> list[tuple[Record, int]]:
    """Every record whose log prints "Model loading took", with the weights plan derives for it."""
    return [(r, fitting.planned(r).memory.weights.bytes) for r in RECORDS if r.weights_gib is not None]


def table() -> list[str]:
    lines = ["| record | GPU | logged tokens | planned tokens (left out) | error | bound | error bar plan prints | "
             "fit on |", "|---|---|---|---|---|---|---|---|"]
    for row in rows():
        verdict = f"{row.bound:.0%} {'ok' if row.within else 'MISSED'}" if row.bound is not None else (
            "fork" if row.record.fork else "arguments inferred" if not row.record.stated else "small GPU")
        bar = "none (KV memory pinned)" if row.error_bar is None else (
            f"+-{row.error_bar:.1%} {'covers it' if row.within_error_bar else 'MISSES it'}")
        logged = f"{row.record.tokens:,}" if row.record.tokens else f"{row.record.available_gib} GiB of KV"
        planned = f"{row.planned.tokens:,}" if row.record.tokens else f"{row.planned.kv_bytes / GIB:.2f} GiB of KV"
        lines.append(f"| {row.record.name} | {row.gpu} | {logged} | {planned} | "
                     f"{row.planned.error:+.2%} | {verdict} | {bar} | {row.fitted_on} records |")
    lines += ["", "| record | Model loading took (GiB) | derived (GiB) | error |", "|---|---|---|---|"]
    for record, derived in weights_rows():
        lines.append(f"| {record.name} | {record.weights_gib:.2f} | {derived / GIB:.2f} | "
                     f"{derived / (record.weights_gib * GIB) - 1:+.2%} |")
    return lines


if __name__ == "__main__":
    print("\n".join(table()))
