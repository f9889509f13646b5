"""KV-cache groups against figures vLLM printed or that follow by hand from its source, never from this code."""

from dsa_kvcalc import capacity, engine
from dsa_kvcalc.recipe import load


def groups(recipe: dict) -> list[int]:
    kv = capacity.rank_memory(load(recipe)).kv
    return [g.page_bytes for g in kv.groups]


V4_FLASH = {"model": "deepseek-ai/DeepSeek-V4-Flash", "gpu": "B200", "tensor-parallel-size": 4,
            "kv-cache-dtype": "fp8", "max-model-len": 1048576}


def test_v4_flash_groups_as_a_vllm_0281_user_printed_them():
    # vllm-project/vllm#54703 (a v0.28.1-based build, no MTP) printed the group page sizes 1,002,240 / 823,680 /
    # 786,240 / 870,912 / 656,640 B: the compressed + indexer group, two sliding-window groups, and the ratio-4 and
    # ratio-128 compressor states.
    assert sorted(groups(V4_FLASH | {"vllm-version": "0.28.1"})) == sorted(
        [1_002_240, 823_680, 786_240, 870_912, 656_640])


def test_v4_flash_pages_by_hand():
    # Per 256 tokens a ratio-4 layer holds 64 compressed entries of 584 B (37,376 B, padded to 65 x 576 = 37,440)
    # and 64 indexer entries of 132 B (8,448 B -> 15 x 576 = 8,640); a ratio-128 layer 2 entries (1,168 -> 1,728).
    # V4-Flash has 21 ratio-4 and 20 ratio-128 layers: 21 x (37,440 + 8,640) + 20 x 1,728 = 1,002,240 B a block
    # since vLLM PR #48993 (the largest group).
    kv = capacity.rank_memory(load(V4_FLASH | {"vllm-version": "0.28.0"})).kv
    assert kv.block_bytes == 21 * (37_440 + 8_640) + 20 * 1_728
    # Pages a 1M-token request holds: cdiv(1,048,576, 256) = 4,096 compressed pages; each window group
    # cdiv(127 + 2 x 16,384, 64) + 1 = 515 (64-token pages, window 128, two batches of 16,384 tokens in flight on a
    # B200 since v0.28), the ratio-4 states cdiv(7 + 32,768, 4) + 1 = 8,195, the ratio-128 states
    # cdiv(127 + 32,768, 8) + 1 = 4,113.
    assert kv.pages_per_request == 4_096 + 2 * 515 + 8_195 + 4_113


def test_gh200_refusal_needs_22_layer_tuples_of_47808_bytes():
    # vLLM's _max_memory_usage_bytes_from_groups for DeepSeek-V4: 22 layer tuples x (37,440 + 8,640 + 1,728) B x the
    # pages one request holds; at 30,000 tokens and 16,384 in flight (vLLM 0.22): 118 + 2 x 259 + 4,099 + 2,065 =
    # 6,800 pages -> 7,152,076,800 B, the 6.66 GiB of vllm-project/vllm#44376.
    kv = capacity.rank_memory(load(dict(model="deepseek-ai/DeepSeek-V4-Flash", gpu="GH200", **{
        "tensor-parallel-size": 2, "enable-expert-parallel": True, "kv-cache-dtype": "fp8", "max-model-len": 30000,
        "max-num-batched-tokens": 16384, "vllm-version": "0.22.0"}))).kv
    assert kv.request_bytes == 22 * 47_808 * 6_800 == 7_152_076_800


def test_mla_models_are_one_group_of_mla_and_indexer_pages():
    # 64-token pages: V3.2 on an H200 with fp8 (FLASHMLA_SPARSE, fp8_ds_mla 656 B) keeps 61 x (656 + 132) B a token;
    # on a B200 FlashInfer's sparse MLA keeps standard fp8 (576 B): 61 x (576 + 132).
    v32 = {"model": "DeepSeek-V3.2", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8"}
    assert groups(v32 | {"gpu": "H200"}) == [64 * 61 * (656 + 132)]
    assert groups(v32 | {"gpu": "B200"}) == [64 * 61 * (576 + 132)]
    assert groups(v32 | {"gpu": "B200", "attention-backend": "FLASHMLA_SPARSE"}) == [64 * 61 * (656 + 132)]
    # SM12x keeps fp8_ds_mla even for an auto (bf16) cache (FLASHINFER_MLA_SPARSE_SM120)
    assert groups(v32 | {"gpu": "RTX PRO 6000", "kv-cache-dtype": "auto", "tensor-parallel-size": 8,
                         "enable-expert-parallel": True}) == [64 * 61 * (656 + 132)]


def test_glm52_keeps_21_indexers_since_vllm_024():
    # index_topk_freq 4, offset 3: layers 0, 1, 2, 6, 10, ..., 74 own an indexer (21 of 78; the config's
    # indexer_types agree). Before vLLM PR #45895 (v0.24.0) every layer kept one.
    glm = {"model": "GLM-5.2", "gpu": "B200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
           "max-model-len": 202752}
    assert groups(glm | {"vllm-version": "0.24.0"}) == [64 * (78 * 576 + 21 * 132)]
    assert groups(glm | {"vllm-version": "0.23.0"}) == [64 * 78 * (576 + 132)]
    # MTP adds a layer that always builds its indexer
    mtp = {"speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}
    assert groups(glm | mtp) == [64 * (79 * 576 + 22 * 132)]


def test_version_rules_are_those_vllm_shipped():
    # Each pair is (release, value) read off vLLM's history (engine.py cites the PRs); checked here for their edges.
    assert [engine.vllm(v).default_gpu_memory_utilization for v in ("0.19.1", "0.20.0")] == [0.90, 0.92]
    assert [engine.vllm(v).capture_ceiling_sm100 for v in ("0.27.1", "0.28.0")] == [512, 1024]
    assert [engine.vllm(v).in_flight_batches for v in ("0.25.0", "0.26.0")] == [1, 2]
    assert [engine.vllm(v).kv_block_rule for v in ("0.22.1", "0.23.0", "0.27.0")] == ["tuple", "bucket", "overlay"]
    assert engine.vllm("0.27.0").batch_defaults[0] == (70, 1024, 8192)
    assert engine.vllm("0.28.0").batch_defaults[0] == (160, 1024, 16384)
