"""The decode rows of the largest FULL CUDA graph, and vLLM's refusals of capture sizes, against the capture sizes each
release's own VllmConfig._set_cudagraph_sizes and adjust_cudagraph_sizes_for_spec_decode compute (oracle/
capture_sizes.py). Marked vllm_oracle; skipped unless oracle/setup.sh has set up the releases (docs/validation.md).

    .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_capture_sizes.py
"""

import itertools
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.graphs import capture_sizes, decode_graphs
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402
import table  # noqa: E402

pytestmark = pytest.mark.vllm_oracle
SET_UP = table.available_releases()
GIVEN = [{}, {"max_cudagraph_capture_size": 1536}, {"max_cudagraph_capture_size": 100},
         {"cudagraph_capture_sizes": [1, 2, 4, 100, 300]},
         {"max_cudagraph_capture_size": 300, "cudagraph_capture_sizes": [1, 2, 4, 100, 300]}]
# Both arch ceilings, sequences on and off the grid, draft tokens whose requests the grid's multiples of 8 do (1, 3)
# and do not (2, 5, 19) divide, batched tokens below and above the grid, both performance modes.
CASES = [{"gpu": gpu, "max_num_seqs": seqs, "num_speculative_tokens": k, "max_num_batched_tokens": tokens,
          "performance_mode": mode, **given}
         for gpu, seqs, k, tokens, mode, given in itertools.product(
             ("H200", "B200"), (1, 4, 14, 33, 99, 256, 1000), (0, 1, 2, 3, 5, 19), (150, 8192),
             ("balanced", "interactivity"), GIVEN)]


def vllm_answers(release: str) -> list[dict]:
    done = subprocess.run([str(table.PYTHON), str(ROOT / "oracle" / "capture_sizes.py"), str(table.RELEASES_DIR / release)],
                          input=json.dumps(CASES), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["results"]


@pytest.fixture(scope="module")
def answers() -> dict:
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(SET_UP, pool.map(vllm_answers, SET_UP)))


def case_recipe(release: str, case: dict) -> dict:
    """An oracle case as a recipe: DeepSeek-V3.2, TP8, on the case's GPU (cudagraph_mode FULL_AND_PIECEWISE unless
    the case names one)."""
    k = case["num_speculative_tokens"]
    compilation = {"cudagraph_mode": case.get("cudagraph_mode", "FULL_AND_PIECEWISE")} | {
        key: case[key] for key in ("max_cudagraph_capture_size", "cudagraph_capture_sizes") if key in case}
    raw = {"model": "DeepSeek-V3.2", "gpu": case["gpu"],
           "tensor-parallel-size": 8, "vllm-version": release, "max-num-seqs": case["max_num_seqs"],
           "max-num-batched-tokens": case["max_num_batched_tokens"], "performance-mode": case["performance_mode"],
           "compilation-config": compilation}
    if k:
        raw["speculative-config"] = {"method": "mtp", "num_speculative_tokens": k}
    return raw


def plan_rows(release: str, case: dict) -> int | str:
    try:
        recipe = load(case_recipe(release, case))
        resolve(recipe)  # vLLM's start-up refusals, the capture sizes' among them
        return decode_graphs(recipe, capture_sizes(recipe)).top
    except RecipeError:
        return "refused"


@pytest.mark.parametrize("release", cases.RELEASES)
def test_the_largest_full_decode_graph_is_vllms(answers, release):
    if release not in SET_UP:
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    different = []
    for case, answer in zip(CASES, answers[release]):
        vllm = "refused" if "refused" in answer else max(answer["full_decode"], default=0)
        planned = plan_rows(release, case)
        if planned != vllm:
            different.append((case, planned, answer))
    assert not different, f"{len(different)} of {len(CASES)} differ, the first: {different[0]}"
