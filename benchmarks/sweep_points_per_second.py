"""What a sweep costs against one cold `plan`, both measured in this run (issue 28's target: 10,000 points in at
most 6x one cold plan; issue 9's was 3x), where a point's time goes, and that the sweep's memory stays flat as it
grows. Each figure is printed with the load average (1 minute) beside it: on a busy machine the timings swing by
more than the target's margin.

A cold plan is `python -m dsa_kvcalc plan SEED --format json` in a new process. The sweep is
`python -m dsa_kvcalc sweep SEED --vary max-num-seqs=... --vary speculative-config.num_speculative_tokens=...
--backend auto --backend deep_select --format csv` in a new process, its output thrown away: start-up, validation,
planning and CSV rendering of every point included. The split of one point is measured in-process over 2,000
points: resolving the point (sweep.recipe_at), planning it (planning.plan), its rows (report.backend_json, flattened)
and their CSV. Peak memory is measured in-process with tracemalloc over sweeps of 1,000 to 100,000 points
(tracemalloc slows Python down, so this part takes a minute or two).

    python benchmarks/sweep_points_per_second.py   (with the package installed, e.g. .venv/bin/python)
"""

import sys
import time
import tracemalloc
from pathlib import Path

from dsa_kvcalc import planning, sweep
from dsa_kvcalc.deployment import Known
from dsa_kvcalc.keys import flatten_keys
from dsa_kvcalc.recipe import read_recipe
from dsa_kvcalc.render.sweep import csv_lines
from dsa_kvcalc.report import backend_json
from timing import load, median_seconds

RECIPE = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
TARGET = 6.0
BACKENDS = ["auto", "deep_select"]
SPLIT_POINTS = 2_000
MIB = 1 << 20


def varies(points: int) -> list[str]:
    return [f"max-num-seqs=1:{points // 10}:1", "speculative-config.num_speculative_tokens=0:9:1"]


def base_and_varies(points: int) -> tuple[sweep.Base, list[sweep.Vary]]:
    return sweep.base_of(read_recipe(RECIPE), RECIPE.parent), sweep.parse_varies(varies(points))


def sweep_in_process(points: int) -> int:
    """Rows of a sweep of `points` points, rendered as CSV into a sink."""
    base, parsed = base_and_varies(points)
    failures = sweep.Failures()
    rows = sweep.rows(base, parsed, BACKENDS, sweep.points(parsed), failures)
    lines = sum(chunk.count("\n") for chunk in csv_lines(rows))
    assert failures.count == 0, failures.first
    return lines - 1


def split_us() -> dict[str, float]:
    """Microseconds a point in each step of sweep.rows and the CSV writer, each step over all points at once."""
    base, parsed = base_and_varies(SPLIT_POINTS)
    keys = [vary.key for vary in parsed]
    points = [dict(zip(keys, point)) for point in sweep.points(parsed)]
    known = Known()
    start = time.perf_counter()
    recipes = [sweep.recipe_at(base, point) for point in points]
    resolved = time.perf_counter()
    plans = [planning.plan(recipe, set(BACKENDS), known) for recipe in recipes]
    planned = time.perf_counter()
    rows = [point | flatten_keys(backend_json(plan, b)) for point, plan in zip(points, plans) for b in plan.backends]
    shaped = time.perf_counter()
    sum(1 for _ in csv_lines(iter(rows)))
    written = time.perf_counter()
    steps = {"resolve the point (recipe_at)": resolved - start, "plan it (planning.plan)": planned - resolved,
             "its rows (backend_json, flattened)": shaped - planned, "their CSV": written - shaped}
    return {step: seconds / len(points) * 1e6 for step, seconds in steps.items()}


def main():
    module = [sys.executable, "-m", "dsa_kvcalc"]
    plan_seconds = median_seconds([*module, "plan", str(RECIPE), "--format", "json"], 7)
    print(f"one cold plan: {plan_seconds:.3f} s (median of 7; {load()})")
    arguments = [f"--vary={v}" for v in varies(10_000)]
    backends = [part for name in BACKENDS for part in ("--backend", name)]
    sweep_seconds = median_seconds([*module, "sweep", str(RECIPE), *arguments, *backends, "--format", "csv"], 3)
    ratio = sweep_seconds / plan_seconds
    print(f"10,000-point sweep (2 backends, CSV): {sweep_seconds:.3f} s (median of 3; {load()}) = {ratio:.2f}x one "
          f"cold plan ({'within' if ratio <= TARGET else 'ABOVE'} the {TARGET:.0f}x target)")
    per_point_us = (sweep_seconds - plan_seconds) / 10_000 * 1e6
    allowed_us = (TARGET - 1) * plan_seconds / 10_000 * 1e6
    print(f"one point past start-up: {per_point_us:.0f} us ({load()}); the {TARGET:.0f}x target allows "
          f"{allowed_us:.0f} us")
    for step, us in split_us().items():
        print(f"  {step:36s} {us:6.0f} us a point ({load()})")
    for points in (1_000, 10_000, 100_000):
        tracemalloc.start()
        rows = sweep_in_process(points)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{points:>8,} points, {rows:>8,} rows: peak {peak / MIB:.2f} MiB")


if __name__ == "__main__":
    main()
