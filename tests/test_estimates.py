"""The estimated figures (dsa_kvcalc/estimates.py) against what they rest on: configs counted by hand, real logs."""

import json
import re

from conftest import LOGS, ROOT
from dsa_kvcalc import estimates
from dsa_kvcalc.units import GIB

CONFIGS = ROOT / "oracle" / "configs"


def test_glm_5_3_checkpoint_is_its_configs_parameters_at_fp8_with_bf16_embeddings():
    # GLM-5.3's config.json (oracle/configs), every layer MLA with the DSA indexer, 3 dense layers then MoE, one MTP
    # layer. Per layer, attention: q_a 6144 x 2048 + q_b 2048 x 64 x 256 + kv_a 6144 x (512 + 64)
    # + kv_b 512 x 64 x (192 + 256) + o 64 x 256 x 6144 = 165,019,648; the indexer's wq_b 2048 x 32 x 128
    # + wk 6144 x 128 + weights_proj 6144 x 32 = 9,371,648. MoE: (256 routed + 1 shared) x 3 x 6144 x 2048
    # = 9,701,425,152 and a 256 x 6144 router; dense MLP 3 x 6144 x 12288; the MTP layer's eh_proj 2 x 6144 x 6144;
    # embeddings and lm_head 154,880 x 6144 each. Linear weights in FP8 at 1 B with a 4 B scale per 128 x 128 block;
    # embeddings, lm_head, routers and norms in BF16: 756.07 GB (753.86B parameters, GLM-5's 753.9B as the figure
    # says).
    c = json.loads((CONFIGS / "zai-org--GLM-5.3.json").read_text())
    h, heads = c["hidden_size"], c["num_attention_heads"]
    layers = c["num_hidden_layers"] + c["num_nextn_predict_layers"]
    attention = (h * c["q_lora_rank"] + c["q_lora_rank"] * heads * c["qk_head_dim"]
                 + h * (c["kv_lora_rank"] + c["qk_rope_head_dim"])
                 + c["kv_lora_rank"] * heads * (c["qk_nope_head_dim"] + c["v_head_dim"]) + heads * c["v_head_dim"] * h)
    indexer = (c["q_lora_rank"] * c["index_n_heads"] * c["index_head_dim"] + h * c["index_head_dim"]
               + h * c["index_n_heads"])
    moe_layers = layers - c["first_k_dense_replace"]
    moe = (c["n_routed_experts"] + c["n_shared_experts"]) * 3 * h * c["moe_intermediate_size"]
    linear = layers * (attention + indexer) + moe_layers * moe + c["first_k_dense_replace"] * 3 * h * c[
        "intermediate_size"] + 2 * h * h
    bf16 = 2 * c["vocab_size"] * h + moe_layers * c["n_routed_experts"] * h \
        + layers * (2 * h + c["q_lora_rank"] + c["kv_lora_rank"] + 2 * c["index_head_dim"]) + 3 * h
    by_hand_bytes = linear + linear * 4 // (128 * 128) + 2 * bf16
    assert round((linear + bf16) / 1e9, 1) == 753.9
    assert abs(estimates.GLM53_CHECKPOINT.value - by_hand_bytes) < 0.5e9  # "about 756 GB", to half a GB


def test_glm_nvfp4_checkpoint_is_within_a_percent_of_the_size_vllm_logs():
    # vLLM sums the checkpoint's safetensors files and logs the total (vllm==0.26.0
    # vllm/model_executor/model_loader/weight_utils.py:863-871): 432.90 GiB for nvidia/GLM-5.2-NVFP4 on 4 x GB200
    # (tests/fixtures/vllm_logs/glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log)
    log = (LOGS / "glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log").read_text()
    logged_bytes = float(re.search(r"Checkpoint size: ([\d.]+) GiB", log)[1]) * GIB
    assert abs(estimates.GLM5_NVFP4_CHECKPOINT.value / logged_bytes - 1) < 0.01
