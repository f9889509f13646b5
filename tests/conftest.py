"""Helpers shared by the test files: paths, the CLI runners, the one-line-error checks, and a terminal's reader."""

import os
import select
import time
from pathlib import Path

from typer.testing import CliRunner

from dsa_kvcalc.cli import app

ROOT = Path(__file__).parent.parent
RECIPES = ROOT / "recipes"
SEED = RECIPES / "deepseek-v4.1-flash-4xb200-dep4.yaml"
LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
runner = CliRunner()
SECONDS = 5  # "within seconds": of CPU in process, so that a loaded machine does not fail a run that works


def run(*args):
    """The CLI in process, as a user would call it; never a traceback."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


def cli(*args, env=None):
    """run, stricter: an exception other than typer's exit fails (CliRunner hides its traceback), and so does a run of
    more than a few seconds. env: variables for the run (COLUMNS)."""
    started = time.process_time()
    result = run(*args) if env is None else runner.invoke(app, [str(a) for a in args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert time.process_time() - started < SECONDS, args
    return result


def one_line(text: str, start: str = "error: ") -> str:
    """The text is one line starting with start."""
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), text
    return lines[0]


def fails(result, *words):
    """Exit 2 with one line, `error: ...`, holding every word."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def read_terminal(terminal: int, child) -> bytes:
    """All a child process shows on the pty `terminal` until it exits (a full terminal would block it)."""
    shown = b""
    while True:
        if select.select([terminal], [], [], 0.1)[0]:
            try:
                shown += os.read(terminal, 65536)
                continue
            except OSError:  # the child closed its end
                pass
        if child.poll() is not None:
            break
    os.close(terminal)
    return shown
