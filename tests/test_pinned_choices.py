"""choices.py's rules that no other test pins (found by tools/mutate.py), each against a vLLM release."""

from dsa_kvcalc import choices
from dsa_kvcalc.recipe import load


def test_sm10x_bf16_picks_flashinfer_at_16_heads_a_rank_and_flashmla_above():
    # vllm==0.32.0 vllm/platforms/cuda.py:109-117: a BF16 cache on SM10x prefers FLASHINFER_MLA_SPARSE when the layer
    # has num_heads <= 16 (per rank), else FLASHMLA_SPARSE. DeepSeek-V3.2 has 128 heads: TP8 gives 16, TP4 gives 32.
    base = {"model": "DeepSeek-V3.2", "gpu": "B200", "vllm-version": "0.32.0"}
    assert choices.sparse_mla_backend(load(base | {"tensor-parallel-size": 8})) == "FLASHINFER_MLA_SPARSE"
    assert choices.sparse_mla_backend(load(base | {"tensor-parallel-size": 4})) == "FLASHMLA_SPARSE"
