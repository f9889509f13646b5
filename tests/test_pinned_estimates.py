"""estimates.py's figures, each against what its basis cites (found by tools/mutate.py): a figure no test pins can
drift from its source unseen."""

import pytest

from dsa_kvcalc import memory_terms
from dsa_kvcalc.recipe import load

GIB = 1 << 30


@pytest.mark.parametrize("model, checkpoint", [
    ("DeepSeek-V3.2", 689 * 10**9),  # "about 689 GB: DeepSeek-V3's FP8 checkpoint (671.9B + the 11.6B MTP layer)"
    ("GLM-5", 756 * 10**9),  # "about 756 GB: 753.9B parameters ... at about 1 B each in FP8"
    ("GLM-5.3", 756 * 10**9),  # GLM-5's: vllm-project/recipes models/zai-org/GLM-5.3.yaml, "identical to GLM-5.2"
    # 724.8B routed-expert weights at 0.5 B + a 1-B scale per 16 (9/16 B each) and 29.1B BF16 weights (2 B each)
    ("GLM-5.1-NVFP4", 724_775_731_200 * 9 // 16 + 29_100_000_000 * 2),
    ("GLM-5.3-Flash", 306 * GIB),  # "about 306 GiB for the default native FP8 checkpoint" (vllm-project/recipes)
    ("DeepSeek-V4-Flash", round(2 * 74.08 * GIB)),  # "Model loading took 74.08 GiB" on each rank of a TP2 start
    ("DeepSeek-V4-Pro", 865 * 10**9),  # "about 865 GB: 1.6T parameters with MXFP4 routed experts"
])
def test_a_tensor_parallel_rank_holds_an_eighth_of_the_checkpoint_its_basis_cites(model, checkpoint):
    # TP8 without expert parallelism: dense / 8 + experts / 8 = the checkpoint / 8 (each share floored; these
    # checkpoints split evenly or within a byte)
    weights = memory_terms.rank_memory(load({"model": model, "gpu": "B300", "tensor-parallel-size": 8})).weights
    assert abs(weights.bytes - checkpoint // 8) <= 1
