"""Wall-clock timing of whole commands, shared by the benchmarks."""

import statistics
import subprocess
import time


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_seconds(command: list[str], runs: int) -> float:
    """The median of `runs` runs, after one that warms the file cache."""
    seconds(command)
    return statistics.median(seconds(command) for _ in range(runs))
