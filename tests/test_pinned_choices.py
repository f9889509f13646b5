"""deployment.py's rules that no other test pins (found by tools/mutate.py), each against a vLLM release."""

import json

from dsa_kvcalc import deployment
from dsa_kvcalc.recipe import load


def test_sm10x_bf16_picks_flashinfer_at_16_heads_a_rank_and_flashmla_above():
    # vllm==0.32.0 vllm/platforms/cuda.py:109-117: a BF16 cache on SM10x prefers FLASHINFER_MLA_SPARSE when the layer
    # has num_heads <= 16 (per rank), else FLASHMLA_SPARSE. DeepSeek-V3.2 has 128 heads: TP8 gives 16, TP4 gives 32.
    base = {"model": "DeepSeek-V3.2", "gpu": "B200", "vllm-version": "0.32.0"}
    assert deployment.sparse_mla_backend(load(base | {"tensor-parallel-size": 8})) == "FLASHINFER_MLA_SPARSE"
    assert deployment.sparse_mla_backend(load(base | {"tensor-parallel-size": 4})) == "FLASHMLA_SPARSE"


def test_sm10x_bf16_takes_flashmla_from_17_heads_a_rank(tmp_path):
    # vllm==0.32.0 vllm/platforms/cuda.py:109-117 (num_heads <= 16 prefers FlashInfer): a local config of 34 heads at
    # TP2 runs 17 a rank, FLASHMLA_SPARSE; 32 heads at TP2 run 16, FLASHINFER_MLA_SPARSE
    for heads, backend in ((34, "FLASHMLA_SPARSE"), (32, "FLASHINFER_MLA_SPARSE")):
        config = tmp_path / str(heads) / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64,
                                      "index_head_dim": 128, "index_topk": 2048, "num_attention_heads": heads}))
        recipe = load({"model": str(config), "gpu": "B200", "tensor-parallel-size": 2, "vllm-version": "0.32.0"})
        assert deployment.sparse_mla_backend(recipe) == backend
