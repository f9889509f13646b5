"""Wall-clock timing of whole commands, shared by the benchmarks.

Every command runs as an installed package does: from compiled bytecode. The bytecode goes to a temporary
PYTHONPYCACHEPREFIX, written by the warm-up run, so that the checkout is left alone and a PYTHONDONTWRITEBYTECODE
in the environment does not make every run compile the package from source.
"""

import atexit
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="dsa-kvcalc-bench-pycache-")
atexit.register(shutil.rmtree, ENV["PYTHONPYCACHEPREFIX"], ignore_errors=True)


def load() -> str:
    """The 1-minute load average, printed beside every timing: a busy machine's timings are not a quiet one's."""
    return f"load {os.getloadavg()[0]:.2f}"


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start


def median_seconds(command: list[str], runs: int) -> float:
    """The median of `runs` runs, after one that warms the file cache and writes the bytecode."""
    seconds(command)
    return statistics.median(seconds(command) for _ in range(runs))
