"""Helpers shared by the test files: paths, the CLI runner, the one-line-error check, and a terminal's reader."""

import os
import select
from pathlib import Path

from typer.testing import CliRunner

from dsa_kvcalc.cli import app

ROOT = Path(__file__).parent.parent
RECIPES = ROOT / "recipes"
SEED = RECIPES / "deepseek-v4.1-flash-4xb200-dep4.yaml"
LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
runner = CliRunner()


def run(*args):
    """The CLI in process, as a user would call it; never a traceback."""
    result = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in result.output, result.output
    return result


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
