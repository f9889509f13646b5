"""How long `dsa-kvcalc plan` takes from process start to exit, as a ratio to importing typer, rich and pyyaml alone,
both measured in this run (issue 9's target: below 2x).

Usage: python benchmarks/plan_startup.py [runs]   (with the package installed, e.g. .venv/bin/python)
"""

import subprocess
import sys
from pathlib import Path

from timing import load, median_seconds

RECIPE = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"
TARGET = 2.0
BASELINE = [sys.executable, "-c", "import typer, rich, yaml"]
COMMANDS = {
    "plan --format json": [sys.executable, "-m", "dsa_kvcalc", "plan", str(RECIPE), "--format", "json"],
    "plan (table)": [sys.executable, "-m", "dsa_kvcalc", "plan", str(RECIPE)],
}


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    baseline = median_seconds(BASELINE, runs)
    print(f"{'import typer, rich, yaml':24s} median {baseline:.3f} s   (the baseline, {runs} runs; {load()})")
    for label, command in COMMANDS.items():
        took = median_seconds(command, runs)
        ratio = took / baseline
        print(f"{label:24s} median {took:.3f} s   {ratio:.2f}x the baseline "
              f"({'within' if ratio <= TARGET else 'ABOVE'} the {TARGET:.0f}x target; {load()})")
    modules = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsa_kvcalc", "plan", str(RECIPE),
                              "--format", "json"], capture_output=True, text=True).stderr
    imported = {line.split("|")[-1].strip() for line in modules.splitlines()}
    print(f"torch imported by plan: {'yes' if 'torch' in imported else 'no'}; "
          f"deep_gemm: {'yes' if 'deep_gemm' in imported else 'no'}")


if __name__ == "__main__":
    main()
