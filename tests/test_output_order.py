"""A command prints the same bytes whatever the string hash seed: no set's iteration order (which PYTHONHASHSEED
changes from run to run) reaches the output. Each command runs in two child processes, seeded 1 and 2 (two seeds
under which the recipe's nested keys, vLLM's ignored arguments and a rule's set of architectures, sets before, iterated in
different orders)."""

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


@pytest.mark.parametrize("args", [
    ("schema",),
    # the KV-init buffers' source names the release's rules: masked_mha_architectures is a set of three
    ("plan", RECIPES / "deepseek-v3.2-8xh200-tp8.yaml", "--explain"),
    ("plan", RECIPES / "glm-5-8xb200-tp8.yaml", "--set", "vllm-version=0.30.0", "--explain"),
], ids=lambda args: " ".join(str(a).rpartition("/")[2] for a in args))
def test_a_command_prints_the_same_under_any_hash_seed(args):
    first, second = (printed(seed, *args) for seed in SEEDS)
    assert first and first == second
