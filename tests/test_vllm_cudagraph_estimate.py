"""The graphs vLLM's CUDA-graph estimate counts, against each release's own code: Model Runner V2's (0.29.0+) FULL and
PIECEWISE graphs and its extrapolation, run from the release's cudagraph_utils.py (oracle/cudagraph_estimate.py);
Model Runner V1's graphs per mode from the release's VllmConfig._set_cudagraph_sizes, the spec-decode rounding and
the dispatcher's decode bound (oracle/capture_sizes.py). Marked vllm_oracle; skipped unless oracle/setup.sh has set up
the releases (docs/validation.md).

    .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_cudagraph_estimate.py
"""

import itertools
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from dsa_kvcalc.deployment import on_model_runner_v2, resolve
from dsa_kvcalc.engine import parsed
from dsa_kvcalc.graphs import (PIECEWISE_MODES, GraphEstimate, capture_sizes, cudagraph_estimate, full_graphs,
                               runner_capture_sizes)
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402
import table  # noqa: E402
from test_vllm_capture_sizes import case_recipe  # noqa: E402

pytestmark = pytest.mark.vllm_oracle
SET_UP = table.available_releases()
V2_RELEASES = [r for r in cases.RELEASES if parsed(r) >= parsed("0.29.0")]  # V2 estimates from 0.29.0 (engine.py)
V1_RELEASES = [r for r in cases.RELEASES if parsed("0.20.0") <= parsed(r) < parsed("0.29.0")]  # V3.2 on V1, estimating
FIRST_SAMPLE_BYTES = 9_668_395_008  # any first sample: the extrapolation keeps it whole
GIVEN = [{}, {"max_cudagraph_capture_size": 1536}, {"cudagraph_capture_sizes": [1, 2, 4, 100, 300]}]
CASES = [{"gpu": gpu, "arch": arch, "max_num_seqs": seqs, "num_speculative_tokens": k, "max_num_batched_tokens": tokens,
          "performance_mode": "balanced", "cudagraph_mode": mode, "sample_bytes": [FIRST_SAMPLE_BYTES, 0], **given}
         for (gpu, arch), seqs, k, tokens, mode, given in itertools.product(
             (("H200", "sm90"), ("B200", "sm100")), (4, 33, 256, 1000), (0, 1, 5), (150, 8192),
             ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "FULL", "PIECEWISE"), GIVEN)]


def vllm_answers(script: str, release: str, oracle_cases: list[dict]) -> list[dict]:
    done = subprocess.run([str(table.PYTHON), str(ROOT / "oracle" / script), str(table.RELEASES_DIR / release)],
                          input=json.dumps(oracle_cases), capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["results"]


def differences(script: str, release: str, oracle_cases: list[dict], compare) -> None:
    """Each case the release answers and plan takes, compared as compare(recipe, case, answer) -> (ours, theirs)."""
    if release not in SET_UP:
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    different, compared = [], 0
    for case, answer in zip(oracle_cases, vllm_answers(script, release, oracle_cases)):
        try:
            recipe = load(case_recipe(release, case))
            resolve(recipe)  # vLLM's start-up refusals
        except RecipeError:
            continue
        if "refused" in answer:
            continue
        compared += 1
        ours, theirs = compare(recipe, case, answer)
        if ours != theirs:
            different.append((case, ours, theirs))
    assert compared > len(oracle_cases) // 2
    assert not different, f"{len(different)} of {compared} differ, the first: {different[0]}"


def v2_graphs(recipe, case: dict, answer: dict) -> tuple:
    v2, sizes = on_model_runner_v2(recipe), capture_sizes(recipe)
    estimate = cudagraph_estimate(recipe, sizes, v2)
    full = full_graphs(recipe, sizes, v2)
    piecewise = runner_capture_sizes(recipe, sizes, v2) if case["cudagraph_mode"] in PIECEWISE_MODES else []
    ours = (estimate.method, full.largest(len(full)), len(piecewise), list(estimate.sampled_rows),
            FIRST_SAMPLE_BYTES + estimate.floor_bytes if answer["full"] else 0)
    theirs = (GraphEstimate.EXTRAPOLATED, answer["full"], len(answer["piecewise"]), answer["sampled"],
              answer["extrapolated"])
    return ours, theirs


def v1_graphs(recipe, case: dict, answer: dict) -> tuple:
    estimate = cudagraph_estimate(recipe, capture_sizes(recipe), on_model_runner_v2(recipe))
    pieces, full = len(answer["sizes"]), len(answer["full_decode"])
    ours = (estimate.method, estimate.graphs.get("PIECEWISE", 0), estimate.graphs.get("FULL", 0),
            estimate.extrapolated_graphs)
    return ours, (GraphEstimate.SAMPLED, pieces, full, pieces - 1 + max(full - 1, 0))


@pytest.mark.parametrize("release", V2_RELEASES)
def test_model_runner_v2_counts_and_extrapolates_its_full_graphs_as_the_release_does(release):
    differences("cudagraph_estimate.py", release, CASES, v2_graphs)


@pytest.mark.parametrize("release", V1_RELEASES)
def test_model_runner_v1_counts_the_graphs_of_each_mode_as_the_release_does(release):
    differences("capture_sizes.py", release, [c for c in CASES if c["cudagraph_mode"] == "FULL_AND_PIECEWISE"],
                v1_graphs)
