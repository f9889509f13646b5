"""GLM-5.3-Flash (Glm5Next: KDA linear attention + DSA) and GLM-5.3 against figures the code did not produce: vLLM's own
planner run per release (tests/fixtures/glm53_planner, SOURCES.md), and cases worked out by hand from the release
lines engine.py and kv_cache/glm5next.py cite. The real record (443,628 tokens) is in test_records.py."""

import json
import math
from pathlib import Path

import pytest
import yaml

from conftest import fails, run
from dsa_kvcalc import kv_cache, planning
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.memory_terms import prefill_workspace_bytes

PLANNER_ROWS = [json.loads(line) for line in
                (Path(__file__).parent / "fixtures" / "glm53_planner" / "rows.jsonl").read_text().splitlines()]
FLASH = {"model": "GLM-5.3-Flash", "gpu": "H200", "tensor-parallel-size": 4, "max-model-len": 131072}
MTP3 = {"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}
RECORD = FLASH | MTP3 | {"max-num-seqs": 3, "kv-cache-memory-bytes": 6 * GIB}


def write_recipe(folder: Path, raw: dict) -> Path:
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def flash(**keys):
    recipe = load(FLASH | keys)
    return recipe, planning.plan(recipe)


def mtp(k: int) -> dict:
    return {"speculative-config": {"method": "mtp", "num_speculative_tokens": k}} if k else {}


def planner_recipe(row: dict) -> dict:
    return FLASH | mtp(row["k"]) | {
        "tensor-parallel-size": row["TP"], "max-model-len": row["L"], "kv-cache-memory-bytes": row["avail"],
        "vllm-version": row["rel"].lstrip("v"), "kv-cache-dtype": "auto" if row["dtype"] == "bf16" else "fp8",
        "enable-prefix-caching": row["mode"] == "align"}


def row_id(row: dict) -> str:
    return f"{row['rel']}-{row['mode']}-tp{row['TP']}-k{row['k']}-{row['dtype']}-{row['L']}-{row['avail'] // GIB}g"


@pytest.mark.parametrize("row", PLANNER_ROWS, ids=row_id)
def test_plan_gives_what_each_releases_own_planner_gave(row):
    recipe = load(planner_recipe(row))
    kv = planning.plan(recipe).memory.kv
    if "refused" in row:  # vLLM's "X GiB KV cache is needed, ... larger than the available (Y GiB)"
        assert round(kv.request_bytes / GIB, 2) == row["refused"]["needed_gib"]
        assert round((row["avail"] - kv.block_bytes) / GIB, 2) == row["refused"]["available_gib"]
        assert kv.request_bytes > row["avail"] - kv.block_bytes
        return
    assert next(g.block for g in kv.groups if g.kind == "full") == row["B"]
    assert row["avail"] // kv.block_bytes == row["num_blocks"]
    assert [kv_cache.group_pages(kv_cache.CacheConfig.of(recipe), g, 0, 0) for g in kv.groups] == row["pages_per_group"]
    assert (kv.pages_per_request, kv.tokens(row["avail"])) == (row["pages_per_req"], row["tokens"])
    if row["bytes_per_block"] is not None:
        assert kv.block_bytes == row["bytes_per_block"]


@pytest.mark.parametrize("tp, k, state", [
    # conv (3 + k) x 24,576 / TP x 2 B + recurrent 64 / TP x 128 x 128 x 4 B (glm53.md section 3d)
    (1, 0, 4_341_760), (1, 3, 4_489_216), (2, 1, 2_195_456), (4, 0, 1_085_440), (4, 3, 1_122_304), (8, 1, 548_864)])
def test_kda_state_splits_over_the_tensor_parallel_ranks(tp, k, state):
    config = kv_cache.CacheConfig.of(load(FLASH | mtp(k) | {"tensor-parallel-size": tp}))
    assert kv_cache.kda_state_bytes(config) == state


@pytest.mark.parametrize("tp, k, dtype, block", [
    # 128 x cdiv(KDA state, 128 x 1,024 B bf16 / 512 B fp8): TP4 k=3 bf16 cdiv(1,122,304, 131,072) = 9 -> 1,152
    (1, 0, "auto", 4352), (1, 3, "fp8", 8832), (2, 0, "fp8", 4352), (2, 3, "auto", 2304), (4, 0, "auto", 1152),
    (4, 1, "fp8", 2176), (4, 3, "auto", 1152), (4, 3, "fp8", 2304), (8, 0, "auto", 640), (8, 3, "fp8", 1152)])
def test_attention_block_holds_a_kda_state(tp, k, dtype, block):
    recipe = load(FLASH | mtp(k) | {"tensor-parallel-size": tp, "kv-cache-dtype": dtype})
    assert kv_cache.attention_block(kv_cache.CacheConfig.of(recipe)) == block


@pytest.mark.parametrize("version", ["0.30.0", "0.32.0"])
@pytest.mark.parametrize("k, linear_groups", [(3, [12, 11, 11]), (0, [9, 9, 8, 8])])
def test_34_kda_layers_in_3_groups_with_mtp_and_4_without(version, k, linear_groups):
    # cdiv(34 KDA layers, 12 latents) = 3 with the MTP layer (0.30.0 _pp_balanced_mamba_group_count; 0.32.0's
    # packing: anchor // page = 12 a group); cdiv(34, 11) = 4 without
    _, plan = flash(**mtp(k), **{"vllm-version": version})
    assert [len(g.caches) for g in plan.memory.kv.groups if g.kind == "linear"] == linear_groups


def test_block_price_rounds_up_to_the_indexer_page_from_032():
    # 12 latents x 1,152 x 1,024 B + 12 indexers x 288 x 132 B = 14,611,968 (0.30.0, 0.31.0: the KDA states and the
    # tails alias these bytes); 0.32.0 rounds it up to lcm(1 row x 1,024 B, a 128-token indexer page of 4,224 B) =
    # 33,792: 14,631,936
    raw = 12 * 1152 * 1024 + 12 * 288 * 132
    assert raw == 14_611_968
    for version, price in (("0.30.0", raw), ("0.31.0", raw), ("0.32.0", 14_631_936), ("0.33.0", 14_631_936)):
        assert flash(**MTP3, **{"vllm-version": version})[1].memory.kv.block_bytes == price
    assert 14_631_936 == math.ceil(raw / math.lcm(1024, 32 * 132)) * math.lcm(1024, 32 * 132)


@pytest.mark.parametrize("version, prefix_caching, pages", [
    # cdiv(131,072, 1,152) = 114 + 1 tail + 3 KDA groups x (1 + k) 'none', (2 + k) 'align', (3 + k) 'align' with
    # FlashKDA's checkpoint block (0.32.0+)
    ("0.30.0", False, 114 + 1 + 3 * 4), ("0.30.0", True, 114 + 1 + 3 * 5), ("0.31.0", True, 114 + 1 + 3 * 5),
    ("0.32.0", False, 114 + 1 + 3 * 4), ("0.32.0", True, 114 + 1 + 3 * 6), ("0.33.0", True, 114 + 1 + 3 * 6)])
def test_pages_a_request_by_release_and_prefix_caching(version, prefix_caching, pages):
    _, plan = flash(**MTP3, **{"vllm-version": version, "enable-prefix-caching": prefix_caching})
    assert plan.memory.kv.pages_per_request == pages


def test_prefix_caching_is_on_by_default_and_vllms_negative_turns_it_off():
    assert load(FLASH).enable_prefix_caching
    off = load(FLASH | MTP3 | {"no-enable-prefix-caching": True, "vllm-version": "0.30.0"})
    assert not off.enable_prefix_caching and planning.plan(off).memory.kv.pages_per_request == 114 + 1 + 3 * 4
    assert load(FLASH | {"no-enable-prefix-caching": False}).enable_prefix_caching  # vLLM drops --no-no-...
    with pytest.raises(RecipeError, match="no-enable-prefix-caching: true contradicts enable-prefix-caching"):
        load(FLASH | {"enable-prefix-caching": True, "no-enable-prefix-caching": True})
    assert "enable-prefix-caching" not in load(FLASH | {"enable-prefix-caching": False}).ignored_keys


@pytest.mark.parametrize("version, slots", [("0.30.0", 4), ("0.31.0", 8), ("0.32.0", 8)])
def test_tail_ring_holds_the_drafts_from_031(version, slots):
    # 0.30.0: index_kpool slots; 0.31.0: 4 x next_pow2(cdiv(4 + 3, 4)) = 8. 0.30/0.31 pad each ring to the indexer page
    # (288 x 132 B); 0.32.0's CircularBufferSpec keeps its own page: 8 slots x 2 x 128 x 2 B
    tail = next(g for g in flash(**MTP3, **{"vllm-version": version})[1].memory.kv.groups if g.kind == "state")
    assert tail.block == slots
    assert tail.page_bytes == 12 * (288 * 132 if version < "0.32.0" else slots * 512)


def test_record_shape_reserves_the_budget_and_a_large_batch_its_decode_logits():
    # min(3 x 4, 8192) = 12 rows x 131,072 x 4 B = 6 MiB < 512 MiB (0.30.0); 1,024 sequences, 8,192 batched tokens,
    # k = 3: 4,096 rows x 131,072 x 4 B = 2 GiB (0.30.0: every token a column), x 32,768 = 512 MiB (0.31.0: pools)
    record = planning.plan(load(RECORD | {"vllm-version": "0.30.0"})).backend("auto")
    assert (record.decode_logits.rows, record.decode_logits.columns, record.reserved_bytes) == (12, 131072, 512 * MIB)
    large = {"max-num-seqs": 1024, "max-num-batched-tokens": 8192}
    for version, columns, reserved in (("0.30.0", 131072, 2 * GIB), ("0.31.0", 32768, 512 * MIB)):
        recipe, plan = flash(**MTP3, **large, **{"vllm-version": version})
        b = plan.backend("auto")
        assert recipe.reserves_decode_logits and b.release.reserves_decode_logits
        assert (b.decode_logits.rows, b.decode_logits.columns, b.reserved_bytes) == (4096, columns, reserved)
        assert not b.oom.at_risk  # FP32 at an unpadded width of 1,024-multiples: all that runs is reserved


def test_sm100_on_033_runs_6_bytes_where_4_are_reserved():
    # B200, vLLM 0.33.0: auto -> fp8; 1,024 sequences x 4 rows (under 16,384 batched tokens) = 4,096 rows over
    # 1,048,576 // 4 = 262,144 pools. Reserved: 4,096 x 262,144 x 4 B = 4 GiB. Run: DeepGEMM 2.8's BF16 logits padded
    # to lcm(384, 512) = 1,536 columns (262,656) + the FP32 copy as_fp32_logits makes, whatever top-k: 6 B.
    recipe, plan = flash(**MTP3, **{"gpu": "B200", "max-model-len": 1048576, "max-num-seqs": 1024})
    assert recipe.cache_dtype == "fp8"
    for name in ("auto", "deep_select"):
        b = plan.backend(name)
        assert (b.decode_logits.padded_columns, b.decode_logits.bytes_per_element) == (262_656, 6)
        assert b.reserved_bytes == 4 * GIB
        # 4,096 x 262,656 x 6 B = 6,455,033,856 B run where 4 GiB is reserved: the 2.01 GiB beyond it come from the
        # room the profile leaves (the reservation raised the peak by 4 GiB less the 512 MiB budget the base holds)
        assert b.decode_logits.bytes - b.reserved_bytes == 2_160_066_560
        assert not b.oom.at_risk and b.oom.safe_decodes >= b.oom.worst_decodes == 1024
    crowded = flash(**MTP3, **{"gpu": "B200", "max-model-len": 1048576, "max-num-seqs": 8192,
                               "max-num-batched-tokens": 32768})[1].backend("auto")
    assert crowded.oom.at_risk and crowded.oom.safe_decodes < 8192
    sm100_032 = flash(**MTP3, **{"gpu": "B200", "max-model-len": 1048576, "max-num-seqs": 1024,
                                 "vllm-version": "0.32.0"})[1].backend("auto")
    assert sm100_032.decode_logits.bytes == sm100_032.reserved_bytes  # FP32 at 262,144 columns: what is reserved


@pytest.mark.parametrize("gpu, version, dtype, backend", [
    # Glm5NextModelConfig: auto -> fp8 on SM10x from 0.33.0 only (vllm==0.33.0 model_executor/models/config.py:119-145)
    ("B200", "0.32.0", "auto", "FLASHINFER_MLA_SPARSE"), ("B200", "0.33.0", "fp8", "FLASHINFER_MLA_SPARSE"),
    ("B300", "0.33.0", "fp8", "FLASHINFER_MLA_SPARSE"), ("H200", "0.33.0", "auto", "FLASHINFER_MLA_SPARSE_SM90")])
def test_auto_cache_dtype_and_backend(gpu, version, dtype, backend):
    recipe, plan = flash(**{"gpu": gpu, "vllm-version": version})
    assert (recipe.cache_dtype, plan.memory.sparse_mla_backend) == (dtype, backend)
    # a block holds TP4's KDA state of 1,085,440 B: 128 x cdiv(1,085,440, 128 x 1,024 B) = 1,152 BF16 tokens of
    # 1,024 B, or 128 x cdiv(1,085,440, 128 x 512 B) = 2,176 fp8 tokens of 512 B
    latent = next(g for g in plan.memory.kv.groups if g.kind == "full").caches[0]
    assert latent.page_bytes == (2176 * 512 if dtype == "fp8" else 1152 * 1024)


@pytest.mark.parametrize("keys, key", [
    ({"gpu": "RTX PRO 6000"}, "gpu"), ({"gpu": "MI355X"}, "gpu"),
    ({"pipeline-parallel-size": 2}, "pipeline-parallel-size"), ({"decode-context-parallel-size": 2},
                                                                  "decode-context-parallel-size"),
    ({"tensor-parallel-size": 3}, "tensor-parallel-size"), ({"engine": "deepinfer"}, "engine"),
    ({"block-size": 512}, "block-size"),
    ({"vllm-version": "0.29.0"}, "vllm-version")])
def test_what_is_not_derived_is_refused_with_its_key(keys, key):
    with pytest.raises(RecipeError) as error:
        resolve(load(FLASH | keys))
    assert error.value.key == key


def test_a_cache_dtype_flashinfer_refuses_falls_to_flashmla_sparse_from_032():
    # vLLM's SM90 candidates for a 512-wide latent: FlashInfer's SM90 kernel, FlashAttention's, FlashMLA-sparse
    # (vllm==0.32.0 vllm/platforms/cuda.py:138-153); only FlashMLA-sparse takes fp8_ds_mla, from 0.32.0
    # (flashmla_sparse.py:219-248). vLLM's own planner (oracle/harness.py, vllm==0.32.0, H100, TP4 DP4 EP,
    # max-model-len 133,311): FLASHMLA_SPARSE, a block of 16,625,664 B (2,176 tokens of 656 B latents, block sized by
    # 512 B a token; the stride aligned to 64-token pages of 41,984 B).
    raw = FLASH | {"kv-cache-dtype": "fp8_ds_mla", "gpu": "H100", "data-parallel-size": 4,
                   "enable-expert-parallel": True, "max-model-len": 133311}
    plan = planning.plan(load(raw | {"vllm-version": "0.32.0"}))
    assert (plan.memory.sparse_mla_backend, plan.memory.kv.block_bytes) == ("FLASHMLA_SPARSE", 16_625_664)
    with pytest.raises(RecipeError, match="kv-cache-dtype: vLLM 0.31.0 refuses to start: no valid attention backend found for cuda .* fp8_ds_mla on H100"):
        planning.plan(load(raw | {"vllm-version": "0.31.0"}))


def test_kpool_width_and_gather_by_release():
    # 0.30.0 scores max_model_len columns, 0.31.0 max_model_len // 4; the K gather holds 8 x 5 x L entries of 132 B to
    # 0.31.0 and a quarter of them from 0.32.0 (factor 5 up to 262,144 tokens)
    widths = {v: flash(**{"vllm-version": v})[1].backend("auto").decode_logits.columns for v in ("0.30.0", "0.31.0")}
    assert widths == {"0.30.0": 131072, "0.31.0": 32768}
    gathers = {v: prefill_workspace_bytes(load(FLASH | {"vllm-version": v})) for v in ("0.31.0", "0.32.0")}
    assert gathers == {"0.31.0": 40 * 131072 * 132, "0.32.0": 10 * 131072 * 132}


def test_glm53_is_glm52s_shape_and_takes_fp8_on_sm10x_from_032():
    # 78 layers + MTP, indexers on layers 0, 1, 2, 6, ..., 74 (21) and the MTP layer; B200 0.32.0: auto -> fp8_e4m3,
    # FlashInfer's standard fp8: 64 x (79 x 576 + 22 x 132) = 3,098,112 B a block. GLM-5.3's layout is layer-outer,
    # so from 0.32.0 each layer's page is padded alone (vllm==0.32.0 vllm/v1/core/kv_cache_utils.py:1515-1531): a
    # 64 x 576 = 36,864 B page is already two of FlashInfer's 32-row pages (18,432 B) and the indexer's aligns to 1,
    # so the block stays 3,098,112 (rounding the sum to 18,432 would give 169 x 18,432 = 3,115,008)
    recipe = load({"model": "GLM-5.3", "gpu": "B200", "tensor-parallel-size": 8, "vllm-version": "0.32.0"} | MTP3)
    assert recipe.cache_dtype == "fp8_e4m3"
    assert planning.plan(recipe).memory.kv.block_bytes == 79 * 36_864 + 22 * 8_448
    assert load({"model": "zai-org/GLM-5.3", "gpu": "B200", "vllm-version": "0.31.0"}).cache_dtype == "auto"


def test_local_configs_flat_and_nested_give_the_catalogs_kv_cache(tmp_path):
    layers = [("linear_attention" if i % 4 != 3 else "deepseek_sparse_attention") for i in range(45)]
    text = {"architectures": ["Glm5NextForConditionalGeneration"], "num_hidden_layers": 45, "hidden_size": 4096,
            "num_nextn_predict_layers": 1, "max_position_embeddings": 1048576, "index_n_heads": 32,
            "index_head_dim": 128, "index_topk": 2048, "index_kpool": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 0,
            "layer_types": layers, "linear_attn_config": {"num_heads": 64, "head_dim": 128,
                                                          "short_conv_kernel_size": 4}}
    v41 = {"num_hidden_layers": 40, "hidden_size": 5120, "num_nextn_predict_layers": 3, "index_n_heads": 32,
           "index_head_dim": 128, "index_topk": 512, "max_position_embeddings": 1048576, "sliding_window": 128,
           "num_attention_heads": 64, "o_groups": 8, "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0] * 3,
           "kv_source_layer_ids": [2, 8, 14, 20], "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36]}
    configs = {"flat": text, "nested": {"architectures": text["architectures"], "text_config": text},
               "v41": {"architectures": ["DeepseekV41ForCausalLM"], "text_config": v41}}
    for name, config in configs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    shape = {"gpu": "B200", "tensor-parallel-size": 4, "kv-cache-memory-bytes": 6 * GIB}
    cases = [("GLM-5.3-Flash", "flat", MTP3), ("GLM-5.3-Flash", "nested", MTP3),
             ("DeepSeek-V4.1-Flash", "v41", {"speculative-config": {"method": "dspark", "num_speculative_tokens": 3},
                                             "tensor-parallel-size": 1, "data-parallel-size": 4,
                                             "enable-expert-parallel": True})]
    # The catalog's GLM-5.3-Flash at 0.30.0, as test_block_price_by_release derives it: 12 x 1,152 x 1,024 +
    # 12 x 288 x 132 = 14,611,968 B a block; cdiv(1,048,576, 1,152) = 911 pages + 1 tail + 3 KDA groups x 5 = 927
    kv = planning.plan(load(shape | MTP3 | {"model": "GLM-5.3-Flash", "vllm-version": "0.30.0"})).memory.kv
    assert (kv.block_bytes, kv.pages_per_request) == (14_611_968, 927)
    for catalog, local, keys in cases:
        for version in ("0.30.0", "0.33.0"):
            a = planning.plan(load(shape | keys | {"model": catalog, "vllm-version": version})).memory.kv
            b = planning.plan(load(shape | keys | {"model": str(tmp_path / local), "vllm-version": version})).memory.kv
            assert (a.block_bytes, a.pages_per_request, [g.page_bytes for g in a.groups]) == \
                (b.block_bytes, b.pages_per_request, [g.page_bytes for g in b.groups]), (local, version)


def test_plan_prints_the_glm53_flash_record_shape(tmp_path):
    recipe = write_recipe(tmp_path, RECORD | {"vllm-version": "0.31.0"})
    data = json.loads(run("plan", recipe, "--format", "json").output)
    assert data["backends"][0]["kv_cache_tokens"] == 443_628
    assert data["kv_cache"]["block_bytes"] == 14_611_968 and data["kv_cache"]["pages_per_request"] == 130
    fails(run("plan", write_recipe(tmp_path, FLASH | {"gpu": "GB10"})), "error: gpu:", "SM90 and SM10x")


def test_the_held_out_031_log_is_a_run_with_prefix_caching_off():
    # H100, TP8 with EP, 262,144 tokens, no speculation, 40 GB of KV memory. vLLM 0.31.0's own start-up on these
    # arguments (oracle/harness.py) turns prefix caching on (vllm==0.31.0 vllm/config/model.py:2216-2218), so the four
    # KDA groups hold 2 pages each in mamba_cache_mode 'align' (vllm==0.31.0 vllm/v1/kv_cache_interface.py:1089-1091):
    # cdiv(262,144, 640) = 410 latent pages + 1 kpool tail page + 4 x 2 = 419, 5,375 blocks, 3,362,825 tokens.
    # The log's 0.96 % more tokens is 4 pages fewer, 410 + 1 + 4 x 1 = 415: mamba_cache_mode 'none', prefix caching off.
    held_out = {"model": "GLM-5.3-Flash", "gpu": "H100", "tensor-parallel-size": 8, "enable-expert-parallel": True,
                "max-model-len": 262144, "vllm-version": "0.31.0", "kv-cache-memory-bytes": 40_000_000_000}
    default = planning.plan(load(held_out))
    assert default.recipe.enable_prefix_caching
    assert default.memory.kv.pages_per_request == 410 + 1 + 4 * 2
    assert default.memory.kv.block_bytes == 7_441_280 and 40_000_000_000 // 7_441_280 == 5375
    assert default.backend("auto").kv_cache_tokens == 5375 * 262144 // 419 == 3_362_825
    off = planning.plan(load(held_out | {"enable-prefix-caching": False}))
    assert off.memory.kv.pages_per_request == 410 + 1 + 4 * 1
    assert off.backend("auto").kv_cache_tokens == 5375 * 262144 // 415 == 3_395_238  # 0.96 % more
