"""A command prints the same bytes whatever the string hash seed: no set's iteration order (which PYTHONHASHSEED
changes from run to run) reaches the output. Each command runs in two child processes, seeded 1 and 2 (two seeds
under which the recipe's nested keys and vLLM's ignored arguments, sets before, iterated in different orders)."""

import os
import subprocess
import sys

import pytest

from conftest import RECIPES

SEEDS = ("1", "2")


def printed(seed: str, *args) -> str:
    env = os.environ | {"PYTHONHASHSEED": seed, "COLUMNS": "120"}
    done = subprocess.run([sys.executable, "-m", "dsa_kvcalc", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("args", [("schema",)], ids=" ".join)
def test_a_command_prints_the_same_under_any_hash_seed(args):
    first, second = (printed(seed, *args) for seed in SEEDS)
    assert first and first == second
