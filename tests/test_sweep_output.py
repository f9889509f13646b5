"""What a sweep shows while and after it runs: a progress bar on a terminal's stderr and nothing in a pipe; a plot
with one colour per backend and one legend in those colours, the model, GPU and release in its title, the OOM bound
on the axis where it lies there (else each point at risk marked), no panel of a flat reservation, one panel per value
of the second varied key, categories as points, a one-point sweep visible."""

import json
import os
import pty
import subprocess
import sys

import pytest

from conftest import RECIPES, ROOT, SEED, read_terminal, run
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
    """The lines that carry points (not the rings around points at risk, drawn black)."""
    return [line for axes in figure.axes if axes.get_visible() for line in axes.get_lines()
            if len(line.get_xdata()) and line.get_color() != "black"]


def legend_colours(figure) -> dict:
    return {text.get_text(): handle.get_color()
            for text, handle in zip(figure.legends[0].get_texts(), figure.legends[0].legend_handles)}


def test_one_colour_per_backend_one_legend_in_those_colours_and_the_deployment_in_the_title():
    figure = series_of(["max-num-seqs=64:512:64", "speculative-config.num_speculative_tokens=1,5"])
    legend = legend_colours(figure)
    # auto's line stands for the backends with its figures (flashinfer, torch...), deep_select has its own
    groups = [label for label in legend if label.startswith(("auto", "deep_select"))]
    assert len(figure.legends) == 1 and len(groups) == 2 and legend[groups[0]] != legend[groups[1]]
    assert {line.get_color() for line in kv_lines(figure)} == {legend[group] for group in groups}
    assert figure._suptitle.get_text().startswith("deepseek-ai/DeepSeek-V4.1-Flash on B200, vLLM 0.33.0\n")


def panels(figure) -> list:
    return [axes for axes in figure.axes if axes.get_visible()]


def test_the_oom_bound_is_marked_on_the_axis_in_its_backends_colour():
    figure = series_of(["max-num-seqs=64:512:64"])
    # each backend's bound: the decodes plan calls safe at its first point at risk (auto 192, deep_select 384)
    bounds = {}
    for backend, first_risky in (("auto", 192), ("deep_select", 384)):
        plan = json.loads(run("plan", SEED, "--set", f"max-num-seqs={first_risky}", "--format", "json").stdout)
        below = json.loads(run("plan", SEED, "--set", f"max-num-seqs={first_risky - 64}", "--format", "json").stdout)
        b, safe = (next(b for b in p["backends"] if b["backend"] == backend) for p in (plan, below))
        assert b["oom"]["at_risk"] and not safe["oom"]["at_risk"]
        bounds[backend] = b["oom"]["safe_decodes"]
    legend = legend_colours(figure)
    colour = {backend: next(c for label, c in legend.items() if label.split(",")[0] == backend) for backend in bounds}
    (axes,) = panels(figure)
    vertical = {(line.get_xdata()[0], line.get_color()) for line in axes.get_lines()
                if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2}
    assert vertical == {(bounds[b], colour[b]) for b in bounds}
    assert {text.get_text() for text in axes.texts} == {f"{bound:,}" for bound in bounds.values()}


def test_a_flat_reservation_has_no_panel_and_a_moving_one_has():
    flat = series_of(["max-num-seqs=64:512:64"])
    assert len(panels(flat)) == 1 and "reservation is 0.50 GiB at every point" in flat._suptitle.get_text()
    moving = series_of(["max-num-seqs=64:512:64", "vllm-version=0.33.0,main"])  # main reserves the decode logits
    assert len(panels(moving)) == 4 and [a.get_ylabel() for a in panels(moving)][2] == "reserved (GiB)"
    assert not [line for line in moving.axes[1].get_lines() if len(set(line.get_xdata())) == 1
                and len(line.get_xdata()) == 2]  # main reserves them: no bound


def synthetic(values: int, points: int):
    """A series of 2 backends x `values` of the second key x `points` of max-num-seqs, without planning."""
    plot = pytest.importorskip("dsa_kvcalc.plot")
    pytest.importorskip("matplotlib")
    series = plot.Series(["max-num-seqs", "speculative-config.num_speculative_tokens"], "a title")
    for k in range(values):
        for backend, tokens in (("auto", 40e6), ("deep_select", 45e6)):
            series.lines[(backend, k)] = [(n, tokens - n * k, 512 << 20, n > 150, 150) for n in range(1, points + 1)]
    return plot.figure(series)


def test_ten_thousand_points_are_one_panel_a_value_of_the_second_key():
    figure = synthetic(10, 500)  # 2 x 10 x 500 = 10,000 points
    assert [a.get_title() for a in panels(figure)] == [f"num_speculative_tokens={k}" for k in range(10)]
    assert all(line.get_marker() in (None, "None") for line in kv_lines(figure))  # lines, not 1,000 markers


def test_up_to_16_panels_and_line_styles_beyond():
    assert len(panels(synthetic(16, 3))) == 16
    beyond = synthetic(17, 3)
    assert len(panels(beyond)) == 1 and len({line.get_linestyle() for line in kv_lines(beyond)}) > 1


def test_categories_are_points_and_one_point_shows():
    figure = series_of(["kv-cache-dtype=fp8,auto,bfloat16"])
    for line in kv_lines(figure):
        assert line.get_linestyle() == "None" and line.get_marker() == "o"
    rings = [line for line in figure.axes[0].get_lines() if line.get_color() == "black"]
    assert rings and all(line.get_fillstyle() == "none" for line in rings)  # auto at risk at every dtype
    single = kv_lines(series_of(["max-num-seqs=256"]))
    assert single and all(line.get_marker() == "o" and len(line.get_xdata()) == 1 for line in single)
