"""What a person sees on an 80 x 24 terminal: the seed's first screen answers the four questions (will it start, how
many tokens a rank holds, is deep_select worth it, will it run out of memory) in its first lines, then the table, in
one piece, and what must not be missed; the screen left when plan ends shows the answer again; verdicts stand out on
a terminal and are plain in a pipe; no command breaks a number at the terminal's edge or parts it from its unit.
Each command runs as a child whose stdout is a pseudo-terminal of 80 columns."""

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from conftest import LOGS, RECIPES, ROOT, SEED, read_terminal

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


SCREEN_ROWS = 25  # 24, and the line the KV tokens' error bar adds to the first answer


def joined(lines: list[str]) -> str:
    """Lines as one text, a folded line's continuation joined back with one space."""
    return " ".join(" ".join(lines).split())

ANSWERS = ("vLLM 0.33.0 starts", "41,050,274 KV tokens", "39.15 requests of max-model-len 1,048,576",
           "the deployment, DP4, holds 4 x that", "OOM above 129 concurrent decodes", "--fix seqs: 1",
           "--fix budget: 7,493 MiB", "deep_select instead:")


def test_the_seeds_first_screen_answers_the_four_questions():
    screen = ANSI.sub("", on_terminal("plan", SEED)).splitlines()
    first = " ".join(screen[:6])
    # vLLM 0.33.0, without #62860, logs the seed's "main" KV cache: 41,050,274 tokens for auto (vLLM PR #62860's
    # table); 1M tokens a request. The seed's rank died at 131 decodes (tests/test_seed.py: 129 fit). The seed's
    # deployment is DP4: four engines, each with its own KV cache.
    for answer in ANSWERS:
        assert answer in first, (answer, screen[:6])
    table = [i for i, line in enumerate(screen) if "━" in line]
    assert len(table) == 1 and table[0] < 9, screen  # one table, straight after the answers
    rows = screen[table[0] + 1:]
    assert next(i for i, line in enumerate(rows) if "│" not in line) + table[0] + 1 <= SCREEN_ROWS  # all of it
    assert max(map(len, screen)) <= 80


def test_the_seeds_first_screen_says_where_plan_is_off_the_seed():
    # vLLM PR #62860's table: deep_select 48,253,887 KV tokens on main without the fix; plan's is 6.0 % lower
    screen = joined(ANSI.sub("", on_terminal("plan", SEED)).splitlines()[:SCREEN_ROWS])
    assert "note: deep_select here is -6.0% off the 48,253,887 KV tokens vLLM PR #62860 measured" in screen


def test_a_version_newer_than_modelled_says_so_first():
    screen = ANSI.sub("", on_terminal("plan", SEED, "--set", "vllm-version=0.34.0")).splitlines()
    assert joined(screen[:2]).startswith("vLLM 0.34.0 is newer than the newest release modelled, 0.33.0: answered by "
                                "0.33.0's rules")


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.yaml")), ids=lambda path: path.stem)
def test_the_screen_left_after_plan_shows_the_answer(recipe):
    """The screen after the command: its last 23 lines above the shell's prompt. They end with the answer, as the
    first lines give it."""
    lines = ANSI.sub("", on_terminal("plan", recipe)).splitlines()
    answer = lines[:lines.index(next(line for line in lines if "┃" in line))]
    left = lines[-(SCREEN_ROWS - 1):]
    assert left[-len(answer):] == answer and left[-len(answer) - 1] == "answer (as at the top):"
    assert any(verdict in answer[0] for verdict in (" starts.", " would not start"))


def test_the_answer_is_not_repeated_in_a_pipe():
    assert "answer (as at the top)" not in in_a_pipe("plan", SEED)


def test_every_reference_in_plan_can_be_followed():
    lines = in_a_pipe("plan", SEED, columns=1000).splitlines()
    text = "\n".join(lines)
    assert "(see the warning)" in text and any(line.startswith("warning: vLLM 0.33.0, with auto") for line in lines)
    assert "fitted to the seed's death" in text and any(line.startswith("assumption: out-of-memory room") for line in lines)
    note = next(i for i, line in enumerate(lines) if "(why: the published line below)" in line)
    assert any(line.startswith("published: vLLM PR #62860 measured deep_select at 48,253,887") for line in lines[note:])
    recipe_line = next(line for line in lines if line.startswith("deepseek-ai/DeepSeek-V4.1-Flash on B200"))
    assert "as the recipe's line says at its end" in text and recipe_line.endswith("without vLLM #62860 (every "
                                                                                    "release to 0.33.0)")


def test_verdicts_stand_out_on_a_terminal_and_are_plain_in_a_pipe():
    shown = on_terminal("plan", SEED)
    assert re.search(r"\x1b\[[0-9;]*m(vLLM 0.33.0 starts)", shown) and re.search(r"\x1b\[[0-9;]*m(OOM)", shown)
    assert "\x1b[" not in in_a_pipe("plan", SEED)


RTX = LOGS / "deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log"


@pytest.mark.parametrize("args", [
    ["plan", SEED], ["plan", SEED, "--explain"], ["calibrate", RTX, "--set", "gpu=RTX PRO 6000"], ["fit", SEED],
    ["recommend", SEED, "--target-concurrency", 256, "--min-kv-tokens", 8_000_000], ["models"], ["gpus"],
    ["sweep", SEED, "--vary", "max-num-seqs=128,256", "--vary", "kv-cache-dtype=fp8,auto"],
    ["compare", SEED, "--across", "vllm-version=0.31.0,0.33.0"],
], ids=lambda args: " ".join(map(str, args[:2])).replace(str(SEED), "SEED").replace(str(RTX), "LOG"))
def test_no_command_breaks_a_number_at_the_terminals_edge(args):
    narrow = ANSI.sub("", on_terminal(*args))
    wide = in_a_pipe(*args)
    assert narrow.strip() and max(map(len, narrow.splitlines())) <= 80
    assert sorted(set(NUMBER.findall(narrow))) == sorted(set(NUMBER.findall(wide)))
    lines = narrow.splitlines()
    for line, below in zip(lines, lines[1:]):  # a line folded there ends with its unit, not a bare number
        if below.startswith("    ") and below.strip() and not {"│", "┃"} & set(line + below):
            assert not re.fullmatch(r"[(\[~+\-<>=]*\d(?:[\d,.]*\d)?%?", line.split()[-1]), (line, below)


def test_help_never_breaks_a_key_at_its_hyphens():
    shown = on_terminal("plan", "-h")
    lines = shown.splitlines()
    assert "max-num-seqs=384" in shown and "speculative-config.num_speculative_tokens=3" in shown
    assert not [line for line in lines if re.search(r"[a-z]-$", line)], lines


def test_markdown_gives_each_answer_one_bullet_and_no_stray_list_item():
    text = in_a_pipe("plan", SEED, "--format", "markdown")
    bullets = [line for line in text.splitlines() if line.startswith("- ")]
    oom = [line for line in bullets if "OOM above 129" in line]
    assert len(oom) == 1 and "--fix seqs: " in oom[0] and "--fix budget: 7,493 MiB" in oom[0]
    assert not [line for line in text.splitlines() if line.startswith(("* ", "+ "))]  # the caption is no list item


@pytest.mark.parametrize("args", [["plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml"],
                                  ["plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", "--format", "markdown"]],
                         ids=["table", "markdown"])
def test_a_row_no_backend_fills_is_left_out(args):
    # On H200 every backend reads the same FP32 logits (one column), none is at risk (no workaround) and none is
    # compared with auto: those rows would be empty.
    text = ANSI.sub("", on_terminal(*args))
    assert "KV tokens/rank" in text and "tokens vs auto" not in text and "workaround MiB" not in text


def test_compare_fits_80_columns_as_a_table():
    shown = ANSI.sub("", on_terminal("compare", SEED, "--across", "vllm-version=0.31.0,0.33.0")).splitlines()
    assert max(map(len, shown)) <= 80 and any("━" in line for line in shown)  # a table, not records


def test_calibrate_goes_one_line_a_term_where_its_table_is_wider_than_the_terminal():
    shown = ANSI.sub("", on_terminal("calibrate", RTX, "--set", "gpu=RTX PRO 6000")).splitlines()
    terms = ("weights", "peak activation", "non-torch", "CUDA graphs", "KV memory", "KV bytes per logged token",
             "KV tokens")
    assert [line.split(":")[0] for line in shown if line.startswith(terms)] == list(terms)
    assert not [line for line in shown if re.search(r"\S {2,}\S", line)]  # no table's padded columns
    assert "weights: log 75.64 GiB; plan (same recipe) 75.58 GiB" in joined(shown)  # the log's figure, as printed
    wide = in_a_pipe("calibrate", RTX, "--set", "gpu=RTX PRO 6000")
    assert re.search(r"^weights {2,}75\.64 GiB", wide, re.MULTILINE)  # a pipe keeps the table
