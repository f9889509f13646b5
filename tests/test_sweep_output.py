"""What a sweep shows while and after it runs: a progress bar on a terminal's stderr and nothing in a pipe; a plot
with one colour per backend, the model, GPU and release in its title, categories as points, a one-point sweep
visible."""

import os
import pty
import subprocess
import sys

import pytest

from conftest import RECIPES, ROOT, SEED, read_terminal
from dsa_kvcalc import sweep
from dsa_kvcalc.cli import PROGRESS_MIN_POINTS

CHILD_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SWEEP = [sys.executable, "-m", "dsa_kvcalc", "sweep", str(RECIPES / "deepseek-v3.2-8xh200-tp8.yaml"), "--vary",
         f"max-num-seqs=1:{PROGRESS_MIN_POINTS}:1",
         "--backend", "auto", "--format", "csv"]


def on_a_terminal(command: list[str]) -> tuple[int, str]:
    """Run command with stderr on a terminal, reading what it shows there as it runs (a full terminal blocks it)."""
    terminal, other_end = pty.openpty()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=other_end, env=CHILD_ENV)
    os.close(other_end)
    shown = read_terminal(terminal, child)
    return child.wait(60), shown.decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_in_a_pipe():
    code, shown = on_a_terminal(SWEEP)
    assert code == 0 and f"{PROGRESS_MIN_POINTS:,} points" in shown and "\r" in shown
    piped = subprocess.run(SWEEP, capture_output=True, env=CHILD_ENV, timeout=60)
    assert piped.returncode == 0 and piped.stderr == b""


def series_of(varies: list[str]):
    plot = pytest.importorskip("dsa_kvcalc.plot")
    pytest.importorskip("matplotlib")
    parsed = sweep.parse_varies(varies)
    base = sweep.load_base(SEED)
    series = plot.Series([v.key for v in parsed], sweep.title(base, parsed))
    for _ in series.tap(sweep.rows(base, parsed, [], sweep.points(parsed), sweep.Failures())):
        pass
    return plot.figure(series)


def kv_lines(figure):
    """The KV axes' lines that carry points (not the OOM bands, drawn wide and pale)."""
    return [line for line in figure.axes[0].get_lines() if line.get_alpha() is None and len(line.get_xdata())]


def test_one_colour_per_backend_and_the_deployment_in_the_title():
    figure = series_of(["max-num-seqs=64:512:64", "speculative-config.num_speculative_tokens=1,5"])
    colours = {}
    for line in kv_lines(figure):
        colours.setdefault(line.get_label().split(",")[0], set()).add(line.get_color())
    # auto's line stands for the backends with its figures (flashinfer, torch...), deep_select has its own
    assert set(colours) == {"auto", "deep_select"} and all(len(c) == 1 for c in colours.values())
    assert colours["auto"] != colours["deep_select"]
    assert figure._suptitle.get_text().startswith("deepseek-ai/DeepSeek-V4.1-Flash on B200, vLLM 0.33.0\n")


def test_categories_are_points_and_one_point_shows():
    for line in kv_lines(series_of(["kv-cache-dtype=fp8,auto,bfloat16"])):
        assert line.get_linestyle() == "None" and line.get_marker() == "o"
    single = kv_lines(series_of(["max-num-seqs=256"]))
    assert single and all(line.get_marker() == "o" and len(line.get_xdata()) == 1 for line in single)
