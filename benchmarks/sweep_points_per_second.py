"""How fast `dsa-kvcalc sweep` plans points, and that its memory stays flat as the sweep grows.

Sweeps the bundled seed recipe over max-num-seqs x speculative tokens (1k, 10k and 100k points), rendering CSV
lines as the CLI does (into a sink, not a file): with the issue's two backends and with all available ones.
Speed is timed without tracemalloc; the peak memory of the two-backend sweeps is then measured with it (tracemalloc
slows Python down several times, so this takes a few minutes).

    .venv/bin/python benchmarks/sweep_points_per_second.py
"""

import time
import tracemalloc
from pathlib import Path

from dsa_kvcalc import sweep, sweep_render
from dsa_kvcalc.recipe import read_yaml

RECIPE = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
MIB = 1 << 20


def run_sweep(raw: dict, points: int, backends: list[str]) -> tuple[int, int]:
    """Rows and CSV bytes of a sweep of `points` points."""
    varies = sweep.parse_varies(["max-num-seqs=8:8000:8",
                                 f"speculative-config.num_speculative_tokens=0:{points // 1000 - 1}:1"])
    failures = sweep.Failures()
    rows = sweep.rows(raw, RECIPE.parent, varies, backends, sweep.points(varies), failures)
    lines = size = 0
    for chunk in sweep_render.csv_lines(rows):
        lines += chunk.count("\n")
        size += len(chunk)
    assert failures.count == 0, failures.first
    return lines - 1, size  # less the header


def main():
    raw = read_yaml(RECIPE)
    print(f"{'points':>8} {'backends':>22} {'seconds':>8} {'points/s':>9} {'rows':>8} {'CSV MiB':>8} "
          f"{'peak MiB':>9}")
    for backends in (["auto", "deep_select"], []):
        for points in (1_000, 10_000, 100_000):
            start = time.perf_counter()
            rows, size = run_sweep(raw, points, backends)
            seconds = time.perf_counter() - start
            peak = ""
            if backends:
                tracemalloc.start()
                run_sweep(raw, points, backends)
                peak = f"{tracemalloc.get_traced_memory()[1] / MIB:.2f}"
                tracemalloc.stop()
            print(f"{points:>8,} {', '.join(backends) or 'all available':>22} {seconds:>8.2f} "
                  f"{points / seconds:>9,.0f} {rows:>8,} {size / MIB:>8.1f} {peak:>9}", flush=True)


if __name__ == "__main__":
    main()
