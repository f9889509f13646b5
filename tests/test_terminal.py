"""What a person sees on an 80 x 24 terminal: the seed's first screen answers the four questions (will it start, how
many tokens a rank holds, is deep_select worth it, will it run out of memory) in its first six lines, then the
table, in one piece; verdicts stand out on a terminal and are plain in a pipe; no command breaks a number at the
terminal's edge. Each command runs as a child whose stdout is a pseudo-terminal of 80 columns."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from conftest import LOGS, ROOT, SEED, read_terminal

ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"PYTHONPATH": str(ROOT)}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def on_terminal(*args, columns: int = 80) -> str:
    """The command's stdout on a terminal of `columns` columns, as the person sees it (colours kept)."""
    terminal, other_end = pty.openpty()
    fcntl.ioctl(other_end, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    child = subprocess.Popen([sys.executable, "-m", "dsa_kvcalc", *map(str, args)], stdout=other_end,
                             stderr=subprocess.DEVNULL, env=ENV)
    os.close(other_end)
    shown = read_terminal(terminal, child)
    child.wait(60)
    return shown.decode().replace("\r\n", "\n")


def in_a_pipe(*args, columns: int = 250) -> str:
    return subprocess.run([sys.executable, "-m", "dsa_kvcalc", *map(str, args)], capture_output=True, text=True,
                          env=ENV | {"COLUMNS": str(columns)}, timeout=60).stdout


def test_the_seeds_first_screen_answers_the_four_questions():
    screen = ANSI.sub("", on_terminal("plan", SEED)).splitlines()
    first = " ".join(screen[:6])
    # vLLM 0.33.0, without #62860, logs the seed's "main" KV cache: 41,050,274 tokens for auto (vLLM PR #62860's
    # table); 1M tokens a request. The seed's rank died at 131 decodes (tests/test_seed.py: 129 fit).
    for answer in ("vLLM 0.33.0 starts", "41,050,274 KV tokens", "x 1,048,576", "OOM above 129 concurrent decodes",
                   "Fix (plan --fix NAME; KV tokens)", "max-num-seqs 129", "budget ("):
        assert answer in first, (answer, screen[:6])
    table = [i for i, line in enumerate(screen) if "━" in line]
    assert len(table) == 1 and table[0] < 8, screen  # one table, straight after the answers
    rows = screen[table[0] + 1:]
    assert next(i for i, line in enumerate(rows) if "│" not in line) + table[0] + 1 <= 24  # all of it on screen
    assert max(map(len, screen)) <= 80


def test_verdicts_stand_out_on_a_terminal_and_are_plain_in_a_pipe():
    shown = on_terminal("plan", SEED)
    assert re.search(r"\x1b\[[0-9;]*m(vLLM 0.33.0 starts)", shown) and re.search(r"\x1b\[[0-9;]*m(OOM)", shown)
    assert "\x1b[" not in in_a_pipe("plan", SEED)


RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"


@pytest.mark.parametrize("args", [
    ["plan", SEED], ["plan", SEED, "--explain"], ["calibrate", RTX, "--set", "gpu=RTX PRO 6000"], ["fit", SEED],
    ["recommend", SEED, "--target-concurrency", 256, "--min-kv-tokens", 8_000_000], ["models"], ["gpus"],
    ["sweep", SEED, "--vary", "max-num-seqs=128,256", "--vary", "kv-cache-dtype=fp8,auto"],
], ids=lambda args: " ".join(map(str, args[:2])).replace(str(SEED), "SEED").replace(str(RTX), "LOG"))
def test_no_command_breaks_a_number_at_the_terminals_edge(args):
    narrow = ANSI.sub("", on_terminal(*args))
    wide = in_a_pipe(*args)
    assert narrow.strip() and max(map(len, narrow.splitlines())) <= 80
    assert sorted(set(NUMBER.findall(narrow))) == sorted(set(NUMBER.findall(wide)))
