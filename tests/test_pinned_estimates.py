"""estimates.py's figures, each against what its basis cites (found by tools/mutate.py): a figure no test pins can
drift from its source unseen."""

import pytest

from dsa_kvcalc.deployment import resolve
from dsa_kvcalc import memory_terms
from dsa_kvcalc.recipe import load

GIB = 1 << 30


def test_a_model_not_built_holds_an_eighth_of_the_checkpoint_its_basis_cites_on_tp8():
    # GLM-5.3-Flash, whose weights are not derived (oracle/configs/SOURCES.md): "about 306 GiB for the default native
    # FP8 checkpoint" (vllm-project/recipes); TP8 without expert parallelism: dense / 8 + experts / 8
    recipe = load({"model": "GLM-5.3-Flash", "gpu": "B300", "tensor-parallel-size": 8})
    weights = memory_terms.rank_memory(resolve(recipe)).weights
    assert abs(weights.bytes - 306 * GIB // 8) <= 1 and weights.provenance == "estimated"
