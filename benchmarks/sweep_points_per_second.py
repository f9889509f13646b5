"""What a sweep costs against one cold `plan`, both measured in this run (issue 9's target: 10,000 points in at
most 3x one cold plan), and that its memory stays flat as the sweep grows.

A cold plan is `python -m dsa_kvcalc plan SEED --format json` in a new process. The sweep is
`python -m dsa_kvcalc sweep SEED --vary max-num-seqs=... --vary speculative-config.num_speculative_tokens=...
--backend auto --backend deep_select --format csv` in a new process, its output thrown away: start-up, validation,
planning and CSV rendering of every point included. Peak memory is measured in-process with tracemalloc over sweeps
of 1,000 to 100,000 points (tracemalloc slows Python down, so this part takes a minute or two).

    python benchmarks/sweep_points_per_second.py   (with the package installed, e.g. .venv/bin/python)
"""

import sys
import tracemalloc
from pathlib import Path

from dsa_kvcalc import sweep
from dsa_kvcalc.recipe import read_recipe
from dsa_kvcalc.render.sweep import csv_lines
from timing import median_seconds

RECIPE = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
TARGET = 3.0
MIB = 1 << 20


def varies(points: int) -> list[str]:
    return [f"max-num-seqs=1:{points // 10}:1", "speculative-config.num_speculative_tokens=0:9:1"]


def sweep_in_process(points: int) -> int:
    """Rows of a sweep of `points` points, rendered as CSV into a sink."""
    parsed = sweep.parse_varies(varies(points))
    base = sweep.base_of(read_recipe(RECIPE), RECIPE.parent)
    failures = sweep.Failures()
    rows = sweep.rows(base, parsed, ["auto", "deep_select"], sweep.points(parsed), failures)
    lines = sum(chunk.count("\n") for chunk in csv_lines(rows))
    assert failures.count == 0, failures.first
    return lines - 1


def main():
    module = [sys.executable, "-m", "dsa_kvcalc"]
    plan_seconds = median_seconds([*module, "plan", str(RECIPE), "--format", "json"], 7)
    print(f"one cold plan:               {plan_seconds:.3f} s (median of 7)")
    arguments = [f"--vary={v}" for v in varies(10_000)]
    sweep_seconds = median_seconds([*module, "sweep", str(RECIPE), *arguments, "--backend", "auto", "--backend", "deep_select",
                          "--format", "csv"], 3)
    ratio = sweep_seconds / plan_seconds
    print(f"10,000-point sweep (2 backends, CSV): {sweep_seconds:.3f} s (median of 3) = {ratio:.2f}x one cold plan "
          f"({'within' if ratio <= TARGET else 'ABOVE'} the {TARGET:.0f}x target); "
          f"{10_000 / (sweep_seconds - plan_seconds):,.0f} points/s past start-up")
    per_point_us = (sweep_seconds - plan_seconds) / 10_000 * 1e6
    allowed_us = (TARGET - 1) * plan_seconds / 10_000 * 1e6
    print(f"one point past start-up: {per_point_us:.0f} us (validation, plan, JSON row, CSV); the {TARGET:.0f}x target "
          f"allows {allowed_us:.0f} us")
    for points in (1_000, 10_000, 100_000):
        tracemalloc.start()
        rows = sweep_in_process(points)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{points:>8,} points, {rows:>8,} rows: peak {peak / MIB:.2f} MiB")


if __name__ == "__main__":
    main()
