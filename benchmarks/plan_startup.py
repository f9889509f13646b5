"""How long `dsa-kvcalc plan` takes from process start to exit, against the cost of importing typer, rich and pyyaml.

Target (issue 2): under 0.3 s on a 2-core machine. Prints the median and best of N runs of each command.
Usage: python benchmarks/plan_startup.py [runs]
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

RECIPE = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import typer, rich, yaml": [sys.executable, "-c", "import typer, rich, yaml"],
    "plan --format json": [sys.executable, "-m", "dsa_kvcalc", "plan", str(RECIPE), "--format", "json"],
    "plan (rich table)": [sys.executable, "-m", "dsa_kvcalc", "plan", str(RECIPE)],
}


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    for label, command in COMMANDS.items():
        seconds(command)  # warm the file cache
        times = [seconds(command) for _ in range(runs)]
        print(f"{label:28s} median {statistics.median(times):.3f} s   best {min(times):.3f} s   ({runs} runs)")
    modules = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsa_kvcalc", "plan", str(RECIPE),
                              "--format", "json"], capture_output=True, text=True).stderr
    imported = {line.split("|")[-1].strip() for line in modules.splitlines()}
    print(f"torch imported by plan: {'yes' if 'torch' in imported else 'no'}; "
          f"deep_gemm: {'yes' if 'deep_gemm' in imported else 'no'}")


if __name__ == "__main__":
    main()
