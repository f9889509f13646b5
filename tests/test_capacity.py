"""capacity.py's rules and the memory terms it adds up, one behaviour a test: each case against a vLLM release line,
the seed's figures, or arithmetic written out beside it, never the code's own output."""

import json

import pytest

from conftest import SEED
from dsa_kvcalc import capacity, deployment, estimates, memory_terms, planning, report, weights
from dsa_kvcalc.catalog import LAYOUTS
from dsa_kvcalc.deployment import logits_shape, resolve, rows_rule
from dsa_kvcalc.fixes import fixes
from dsa_kvcalc.recipe import RecipeError, load, load_recipe
from dsa_kvcalc.sweep import load_base
from dsa_kvcalc.units import GIB

V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}
MTP = {"method": "mtp", "num_speculative_tokens": 1}


def rows(**keys) -> int:
    return resolve(load(V32_H200 | keys)).cudagraph_logits_rows


# 1. Decode logits ---------------------------------------------------------------------------------------------------

def test_sm12x_rows_hold_whole_128_column_splits_and_no_more():
    # DeepGEMM nv_dev csrc/apis/attention.hpp:410-414: aligned_max_context_len = align(L, 128) on SM12x: 4224 = 33 x
    # 128 stays 4224, where a 1024-byte FP32 stride (256 columns) would make it 4352
    assert capacity.padded_columns(4224, LAYOUTS[("nv_dev", "sm120")]) == 4224


def test_vllm_caps_the_decode_rows_at_the_batched_tokens():
    # vLLM #62860 (the seed): rows = min(max_num_seqs, max_num_batched_tokens) x (1 + k) = min(512, 256) x 2 = 512
    recipe = load(V32_H200 | {"max-num-seqs": 512, "max-num-batched-tokens": 256, "speculative-config": MTP})
    assert capacity.decode_rows(logits_shape(recipe), rows_rule(recipe)) == 512


def test_the_kpool_indexer_caps_its_rows_after_the_draft_tokens():
    # vllm==0.30.0 vllm/model_executor/layers/sparse_attn_indexer_kpool.py:318-321: worst_decode_tokens =
    # min(max_num_seqs x (num_spec + 1), max_num_batched_tokens) = min(1024 x 4, 2048) = 2048 for GLM-5.3-Flash with
    # MTP k = 3 (#62860's rule for the other indexers would give min(1024, 2048) x 4 = 4096)
    recipe = load({"model": "GLM-5.3-Flash", "gpu": "B200", "tensor-parallel-size": 4, "vllm-version": "0.30.0",
                   "max-num-seqs": 1024, "max-num-batched-tokens": 2048,
                   "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}})
    assert capacity.decode_rows(logits_shape(recipe), rows_rule(recipe)) == 2048


# 2. Top-k backends --------------------------------------------------------------------------------------------------

def test_before_030_only_the_built_in_chain_runs():
    # --sparse-indexer-topk-backend arrives in vllm==0.30.0 vllm/engine/arg_utils.py:1683-1684
    old = planning.plan(load(V32_H200 | {"vllm-version": "0.29.0"}))
    assert not old.backend("persistent").available and "no --sparse-indexer-topk-backend" in old.backend("persistent").reason
    assert old.backend("auto").available
    assert planning.plan(load(V32_H200 | {"vllm-version": "0.30.0"})).backend("persistent").available


@pytest.mark.parametrize("topk, backend, reason", [
    # vllm==0.33.0 vllm/model_executor/layers/indexer_topk.py:188-190: persistent takes topk 512, 1024 or 2048;
    # :44-47 DeepSelect topk <= 4096
    (256, "persistent", "index_topk 256 not supported (512/1024/2048)"),
    (256, "cooperative", "index_topk 256 not supported (512/1024/2048)"),  # :241-262, the same constraint
    (4097, "deep_select", "index_topk 4097 not supported (<= 4096)"),
])
def test_a_top_k_the_kernel_does_not_take_leaves_the_backend_out(tmp_path, topk, backend, reason):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64,
                                  "index_head_dim": 128, "index_topk": topk}))
    plan = planning.plan(load({"model": str(config), "gpu": "B200", "tensor-parallel-size": 8}))
    assert (plan.backend(backend).available, plan.backend(backend).reason) == (False, reason)


@pytest.mark.parametrize("topk", [1, 4096])
def test_deep_select_takes_any_top_k_up_to_4096(tmp_path, topk):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "index_n_heads": 64,
                                  "index_head_dim": 128, "index_topk": topk}))
    plan = planning.plan(load({"model": str(config), "gpu": "B200", "tensor-parallel-size": 8}))
    assert plan.backend("deep_select").available


# 3. Memory terms ----------------------------------------------------------------------------------------------------

def test_a_measured_term_is_carried_to_another_shape_by_the_estimates_change(tmp_path):
    # Measured at 8192 batched tokens, planned at 4096: the fitted hidden temporaries fall by the copies x 4096 tokens x
    # 6144 (GLM-5's hidden size) x 2 B; the prefill workspace and budget do not move. The weights carry the construction
    # buffers' change: the top-k index buffer, 4096 x 2048 x 4 B = 33,554,432 B (the index groups hold min(tokens,
    # 1024 sequences) rows either way; FlashInfer's sparse MLA reserves no workspace).
    path = tmp_path / "glm.yaml"
    path.write_text("model: GLM-5\ngpu: B200\ntensor-parallel-size: 8\nmax-num-batched-tokens: 8192\n"
                    "memory:\n  peak_activation_bytes: 10000000000\n  weights_bytes: 90000000000\n")
    assert planning.plan(load_recipe(path)).memory.base_peak.provenance == "measured"
    memory = planning.plan(load_recipe(path, ["max-num-batched-tokens=4096"])).memory
    copies = estimates.ACTIVATION_HIDDEN_COPIES.value
    fall = round(copies * 8192 * 6144 * 2) - round(copies * 4096 * 6144 * 2)
    assert (memory.base_peak.bytes, memory.base_peak.provenance) == (10_000_000_000 - fall, "derived")
    assert (memory.weights.bytes, memory.weights.provenance) == (90_000_000_000 - 33_554_432, "derived")


def test_engram_tables_on_the_gpus_split_over_the_data_parallel_ranks():
    # vllm==0.33.0 vllm/config/engram.py:37-38 offloads them by default; on the GPUs the tables split over TP x DP 4.
    # vLLM's build holds 189.1 GiB of them, the guide's 183.1 GiB of tables and 5.72 GiB of scales (202,743,931,208 B)
    # within 0.2 %.
    engram = sum(weights.data()["models"]["deepseek-ai/DeepSeek-V4.1-Flash"]["engram_layer_bytes"])
    assert abs(engram / 202_743_931_208 - 1) < 0.002
    offloaded = planning.plan(load_recipe(SEED)).memory.weights
    on_gpu = planning.plan(load_recipe(SEED, ["engram-config.cpu_offload=false"])).memory.weights
    assert on_gpu.bytes - offloaded.bytes == engram // 4
    assert f"{engram // 4:,} B of Engram tables in host memory" in offloaded.source
    assert "in host memory" not in on_gpu.source and "in host memory" not in planning.plan(
        load(V32_H200)).memory.weights.source


@pytest.mark.parametrize("length, version, gather", [
    # vllm==0.32.0 vllm/config/vllm.py:1790-1798: factor 5 up to 256 x 1024 tokens, else 2; FlashMLA-sparse's
    # fp8_ds_mla gather is factor x max_model_len rows of 576 x 2 B (flashmla_sparse.py:337-344), reserved when the
    # model is built (the weights), larger than the indexer's max_model_len x 8 x factor x 132 B (indexer.py:919-929),
    # which therefore grows the profile's workspace by nothing
    (262_144, "0.33.0", 5 * 262_144 * 1152),  # 1,509,949,440
    (262_145, "0.33.0", 2 * 262_145 * 1152),  # 603,982,080
    (262_145, "0.31.0", 5 * 262_145 * 1152),  # factor 5 at any length before 0.32.0
])
def test_the_sparse_mla_prefill_workspace_factor_drops_above_256k_tokens(length, version, gather):
    recipe = load({"model": "GLM-5.2", "gpu": "H200", "tensor-parallel-size": 8, "kv-cache-dtype": "fp8",
                   "max-model-len": length, "vllm-version": version})
    assert weights.prefill_gather_rows(recipe) * 1152 == gather
    assert memory_terms.prefill_workspace_bytes(recipe) == 0


@pytest.mark.parametrize("tp, dp, collectives", [(1, 1, 0), (2, 1, 1), (2, 2, 1)])
def test_one_process_has_no_collectives_allowance(tp, dp, collectives):
    # fits.py: one process's context and workspaces; TP x DP > 1 adds the collectives' buffers
    recipe = load({"model": "DeepSeek-V4-Flash", "gpu": "B300", "tensor-parallel-size": tp, "data-parallel-size": dp,
                   "enable-expert-parallel": True})
    expected = estimates.NON_TORCH_SINGLE.value + collectives * estimates.NON_TORCH_COLLECTIVES.value
    assert planning.plan(recipe).memory.non_torch.bytes == expected


def test_a_drafter_other_than_mtp_adds_no_kv_layer():
    # ngram drafts from the prompt: V3.2 keeps its 61 layers of (1152 + 132) B (78,324 B a token); MTP adds its layer
    # (62 x 1284 = 79,608)
    for method, token_bytes in (("ngram", 61 * 1284), ("mtp", 62 * 1284)):
        plan = planning.plan(load(V32_H200 | {"speculative-config": {"method": method, "num_speculative_tokens": 2}}))
        assert plan.memory.kv.groups[0].page_bytes == 64 * token_bytes


def test_fp8_e4m3_is_deepseek_v4s_own_fp8_layout_not_an_mla_refusal():
    # vllm==0.33.0 vllm/models/deepseek_v4/attention.py:94-123: any fp8 cache becomes fp8_ds_mla in V4's own
    # attention; FLASHMLA_SPARSE's MLA list (flashmla_sparse.py:149-155) has no fp8_e4m3, but V4 never consults it. So
    # fp8_e4m3 plans, and its KV cache is the one fp8 and fp8_ds_mla give, page for page
    v4 = {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 4}
    e4m3, fp8, ds_mla = (planning.plan(load(v4 | {"kv-cache-dtype": dtype})).memory.kv
                         for dtype in ("fp8_e4m3", "fp8", "fp8_ds_mla"))
    assert e4m3 == fp8 == ds_mla and e4m3.block_bytes > 0


@pytest.mark.parametrize("keys, batches", [
    # vllm==0.26.0 vllm/config/vllm.py:511-521 max_concurrent_batches: async scheduling on Model Runner V2 PP + 1,
    # on V1 2 when PP <= 1, else PP
    ({"model": "DeepSeek-V3.2", "vllm-version": "0.28.0", "pipeline-parallel-size": 2}, 2),  # V1 (V3.2 in 0.28.0)
    ({"model": "DeepSeek-V3.2", "vllm-version": "0.28.0", "pipeline-parallel-size": 3}, 3),
    ({"model": "DeepSeek-V4-Flash", "vllm-version": "0.29.0", "pipeline-parallel-size": 2}, 3),  # V2 for all
])
def test_the_batches_in_flight_as_vllm_counts_them(keys, batches):
    assert deployment.concurrent_batches(load({"gpu": "H200", "tensor-parallel-size": 8} | keys)) == batches


@pytest.mark.parametrize("model, k, retained", [
    # vllm==0.28.0 vllm/config/speculative.py:1501-1507 and kv_cache_utils.py:2137-2147: each sliding window keeps
    # k - 1 more tokens when min(num_nextn_predict_layers, k) > 1
    ("two-mtp-layers", 3, 2), ("two-mtp-layers", 2, 1), ("two-mtp-layers", 1, 0),
    ("DeepSeek-V4-Flash", 3, 0),  # one MTP layer: min(1, 3) = 1
])
def test_multi_layer_mtp_keeps_k_minus_1_more_tokens_in_every_window(tmp_path, monkeypatch, model, k, retained):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "num_hidden_layers": 43, "hidden_size": 4096, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
        "num_nextn_predict_layers": 2, "compress_ratios": [0, 0] + [4, 128] * 20 + [4], "sliding_window": 128,
        "architectures": ["DeepseekV4ForCausalLM"]}))
    recipe = load({"model": str(config) if model == "two-mtp-layers" else model, "gpu": "H200",
                   "tensor-parallel-size": 4, "vllm-version": "0.28.0",
                   "speculative-config": {"method": "mtp", "num_speculative_tokens": k}})
    handed = []
    monkeypatch.setattr(deployment.kv_cache, "spec", lambda *args: handed.append(args[3:]))
    deployment.kv_spec(recipe, "FLASHMLA_SPARSE")
    assert handed == [(2 * 8192, retained)]  # two batches of 8192 tokens in flight (H200's default), and the extra


# 4. KV-cache sizing -------------------------------------------------------------------------------------------------

def test_rocm_before_023_reserves_nothing_for_the_indexer():
    # vllm==0.22.1 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:647-648: the profiling branch returns at once, not
    # even the prefill budget; vllm==0.23.0 :662-683 locks 8192 x 202,752 FP32 (6,643,777,536 B) + the 512 MiB budget
    glm = {"model": "GLM-5", "gpu": "MI300X", "tensor-parallel-size": 8}
    assert planning.plan(load(glm | {"vllm-version": "0.22.1"})).backend("auto").reserved_bytes == 0
    assert planning.plan(load(glm | {"vllm-version": "0.23.0"})).backend("auto").reserved_bytes == \
        6_643_777_536 + 512 * 2**20


def test_the_seeds_headroom_serves_every_backend_with_the_same_working_set():
    # persistent reads the FP32 copy as auto does (6 B an element): auto's measured headroom, 3,091,880,448 B
    plan = planning.plan(load_recipe(SEED))
    assert plan.backend("persistent").indexer_headroom_bytes == 3_091_880_448


def test_the_seeds_graph_pools_are_its_own_and_carry_to_the_other_backends():
    # the seed's table: 18.40 GiB of CUDA graphs with auto, 12.39 GiB with deep_select (round(x * 2^30) B)
    plan = planning.plan(load_recipe(SEED))
    assert (plan.backend("auto").cudagraph.bytes, plan.backend("auto").cudagraph.provenance) == (19_756_849_562,
                                                                                                 "measured")
    assert plan.backend("deep_select").cudagraph.bytes == 13_303_661_199
    persistent = plan.backend("persistent").cudagraph  # the same FP32 copy as auto: auto's pool, derived
    assert (persistent.bytes, persistent.provenance) == (19_756_849_562, "derived")
    assert "the pool measured for auto" in persistent.source


def test_a_graph_pool_measured_at_another_shape_keeps_all_but_its_logits_and_floors():
    # --set max-num-seqs=128 halves the largest FULL decode graph: 768 rows (128 x 6, on the grid) for 1536, so the
    # auto pool loses 768 x 1,049,088 x 6 B = 4,834,197,504 B of logits. Model Runner V2's estimate counts each FULL
    # graph after the first at 1 MiB at least (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:918, 1038): the
    # grid up to 1536 (1, 2, 4; 8..248 by 8; 256..1536 by 16) rounded up to whole requests of 6 gives 1 + 31 + 81 =
    # 113 decode graphs within 256 x 6, but 1 + 31 + 33 = 65 within 128 x 6: 48 MiB fewer.
    # 19,756,849,562 - 4,834,197,504 - 48 x 1,048,576 = 14,872,320,410
    pool = planning.plan(load_recipe(SEED, ["max-num-seqs=128"])).backend("auto").cudagraph
    assert (pool.bytes, pool.provenance) == (14_872_320_410, "derived")


def test_a_graph_pool_smaller_than_its_logits_is_not_a_measurement():
    # auto's 1536-row FULL decode graph alone holds 1536 x 1,049,088 x 6 B = 9.0 GiB of logits
    with pytest.raises(RecipeError, match="memory.cudagraph_gib.auto: 1.00 GiB is less than the 9.00 GiB"):
        planning.plan(load_recipe(SEED, ["memory.cudagraph_gib.auto=1"]))


def test_releases_that_estimate_no_graphs_leave_them_in_the_kv_cache():
    # vllm==0.19.1 vllm/envs.py:1654-1655: no graph estimate is subtracted; vllm==0.20.0 subtracts it
    def kv_bytes(version, graphs_gib):
        recipe = load(V32_H200 | {"vllm-version": version, "memory": {"cudagraph_gib": graphs_gib}})
        return planning.plan(recipe).backend("auto").kv_cache_bytes
    assert kv_bytes("0.19.1", 10) == kv_bytes("0.19.1", 20)
    assert kv_bytes("0.20.0", 10) - kv_bytes("0.20.0", 20) == 10 * GIB


def test_memory_the_other_terms_overrun_leaves_no_kv_cache_not_a_negative_one():
    plan = planning.plan(load(V32_H200 | {"memory": {"peak_activation_gib": 200}}))
    assert (plan.backend("auto").kv_cache_bytes, plan.backend("auto").kv_cache_tokens) == (0, 0)


def test_rocm_0280_keeps_deepseek_v4_on_v1_which_subtracts_its_graphs():
    # vllm==0.28.0 vllm/config/vllm.py:84-93: on ROCm the V2 list loses DeepseekV4ForCausalLM, so V1, whose estimate
    # ROCm runs from 0.26.0 (gpu_worker.py:500-506); on CUDA 0.28.0 runs V4 on V2, whose estimate is 0
    v4 = {"model": "DeepSeek-V4-Flash", "tensor-parallel-size": 4, "vllm-version": "0.28.0"}
    assert resolve(load(v4 | {"gpu": "MI300X"})).cudagraph_estimate.subtracted
    h200 = v4 | {"gpu": "H200", "kv-cache-dtype": "fp8"}  # auto: vLLM 0.28.0 refuses V4 on the H200
    assert not resolve(load(h200)).cudagraph_estimate.subtracted


# CUDA-graph capture sizes (vllm==0.33.0 vllm/config/vllm.py:2398-2640 _set_cudagraph_sizes) -------------------------

def test_interactivity_captures_every_size_up_to_32():
    # 0.30.0, 20 sequences: the limit is min(20 x 2, 512) = 40; balanced captures 1, 2, 4, 8, 16, ..., so the largest
    # within 20 decode rows is 16; interactivity range(1, 33): 20 itself (0.30.0 does not yet add max_num_seqs)
    assert rows(**{"max-num-seqs": 20, "vllm-version": "0.30.0"}) == 16
    assert rows(**{"max-num-seqs": 20, "vllm-version": "0.30.0", "performance-mode": "interactivity"}) == 20


@pytest.mark.parametrize("seqs, largest", [
    # off SM10x the default ceiling is 512: min(513 x 2, 512) = 512, so 513 itself (0.31.0+ adds max_num_seqs only
    # within it) is not captured; 1024 sequences stop at 512 too (1024 only on the SM10x family)
    (513, 512), (1024, 512)])
def test_the_capture_ceiling_off_sm10x_is_512(seqs, largest):
    assert rows(**{"max-num-seqs": seqs}) == largest


def test_given_capture_sizes_replace_the_grid():
    # cudagraph_capture_sizes [1, 2, 4, 100, 300]: the largest within 256 decode rows is 100 (the grid would give 256)
    assert rows(**{"max-num-seqs": 256, "compilation-config": {"cudagraph_capture_sizes": [1, 2, 4, 100, 300]}}) == 100


def test_capture_sizes_are_rounded_up_to_whole_requests():
    # 0.28.0, k = 2 (3 tokens a request), 4 sequences: worst case 12 rows; the grid up to min(4 x 3 x 2, 512) = 24 is
    # 1, 2, 4, 8, 16, 24, none but 24 a multiple of 3, and 0.28.0 adds no n x (1 + k) sizes. vLLM rounds each size up
    # to a multiple of 3 within its largest, 24 (vllm==0.28.0 vllm/config/compilation.py
    # adjust_cudagraph_sizes_for_spec_decode): 3, 6, 9, 18, 24; the largest uniform decode batch within 12 rows is 9
    assert rows(**{"max-num-seqs": 4, "vllm-version": "0.28.0",
                   "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}}) == 9
    # given sizes too: [1, 2, 4, 100, 300] with k = 2 round to 3, 6, 102, 300, all within the largest (300); 256
    # sequences x 3 = 768 rows take 300; with 90 sequences (270 rows) 102 is the largest
    sizes = {"compilation-config": {"cudagraph_capture_sizes": [1, 2, 4, 100, 300]},
             "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}}
    assert (rows(**{"max-num-seqs": 256} | sizes), rows(**{"max-num-seqs": 90} | sizes)) == (300, 102)


def test_piecewise_graphs_hold_no_indexer_logits():
    # PIECEWISE graphs leave attention (the indexer) outside the graph: no logits rows, the pool is the estimate
    # besides the logits (estimates.CUDAGRAPH_BESIDES_LOGITS, 1.5 GiB)
    plan = planning.plan(load(V32_H200 | {"compilation-config": {"cudagraph_mode": "PIECEWISE"}}))
    assert (plan.backend("auto").cudagraph_logits_rows, plan.backend("auto").cudagraph.bytes) == (0, GIB + GIB // 2)


def test_graph_rows_are_whole_numbers():
    # 0.29.0 on B200, 100 sequences, k = 2: whole requests n x 3 up to min(min(100 x 3 x 2, 1024), 300) // 3 = 100
    # (vllm/config/vllm.py:2030-2037): 300 rows, an integer (JSON prints 300, not 300.0)
    recipe = load(V32_H200 | {"gpu": "B200", "max-num-seqs": 100, "vllm-version": "0.29.0",
                              "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}})
    graph_rows = resolve(recipe).cudagraph_logits_rows
    assert graph_rows == 300 and type(graph_rows) is int


def test_a_grid_size_rounded_up_to_whole_requests_is_the_largest_graph():
    # k = 19 (20 tokens a request), 64 sequences on H200, performance-mode interactivity: the limit is
    # min(64 x 20 x 2, 512) = 512, so at most 25 requests; the largest request count on vLLM's grid is 24 (480 rows,
    # vllm==0.29.0 vllm/config/vllm.py:2030-2037), but the token grid's 496 rounds up to 25 x 20 = 500 <= 512
    # (adjust_cudagraph_sizes_for_spec_decode): 500 rows. vLLM's own code gives the same (oracle/capture_sizes.py).
    assert rows(**{"max-num-seqs": 64, "performance-mode": "interactivity",
                   "speculative-config": {"method": "mtp", "num_speculative_tokens": 19}}) == 500


@pytest.mark.parametrize("seqs, largest", [
    # 0.30.0, no speculation (the grid only: 0.31.0 adds max_num_seqs): 1, 2, 4, then multiples of 8 below 256
    (1, 1), (3, 2), (4, 4), (90, 88)])
def test_the_capture_grid_below_256(seqs, largest):
    assert rows(**{"max-num-seqs": seqs, "vllm-version": "0.30.0"}) == largest


def test_interactivity_stops_at_32():
    # range(1, min(limit, 32) + 1): 33 sequences give 32 rows (33 is no multiple of 8)
    assert rows(**{"max-num-seqs": 33, "vllm-version": "0.30.0", "performance-mode": "interactivity"}) == 32


@pytest.mark.parametrize("sizes, largest", [([64, 256], 256), ([300], 0)])
def test_given_sizes_up_to_the_decode_worst_case_itself(sizes, largest):
    # 256 sequences, no speculation: 256 rows at most; a given 256 is taken, 300 alone leaves no FULL decode graph
    assert rows(**{"max-num-seqs": 256, "compilation-config": {"cudagraph_capture_sizes": sizes}}) == largest


def test_max_num_batched_tokens_is_captured_only_within_the_decode_worst_case():
    # 0.30.0, 100 sequences, 150 batched tokens: the limit is min(200, 512, 150) = 150, which vLLM captures
    # (vllm==0.20.1 vllm/config/vllm.py:1527-1532), but a decode batch has at most 100 rows: the grid's 96
    assert rows(**{"max-num-seqs": 100, "max-num-batched-tokens": 150, "vllm-version": "0.30.0"}) == 96


def test_whole_requests_cover_the_decode_worst_case_with_one_draft_token():
    # 0.29.0, k = 1, 99 sequences: the grid's largest even size within 198 rows is 192; request_counts(99) ends in 99
    # itself (vllm/config/vllm.py:2030-2037): 99 x 2 = 198
    assert rows(**{"max-num-seqs": 99, "vllm-version": "0.29.0", "speculative-config": MTP}) == 198


def test_whole_requests_below_the_ceiling_are_counted_on_the_request_grid():
    # 0.29.0, k = 2, 300 sequences on H200: the limit min(1800, 512) = 512 takes 512 // 3 = 170 requests, the grid's
    # largest count within them 168: 504 rows (the token grid's largest multiple of 3 is 480), a whole number
    graph_rows = rows(**{"max-num-seqs": 300, "vllm-version": "0.29.0",
                         "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}})
    assert graph_rows == 504 and type(graph_rows) is int


def test_a_batch_smaller_than_one_request_has_no_full_decode_graph():
    # 2 batched tokens, k = 3: not one 4-token request fits in a captured batch
    assert rows(**{"max-num-batched-tokens": 2, "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}) == 0


def test_rocm_from_030_locks_only_the_decode_rows():
    # vllm==0.30.0 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:949-972: min(max_num_batched_tokens, max_num_seqs x
    # (1 + k)) rows: GLM-5 on MI300X (191.98 GiB: 1024 sequences, 16,384 tokens), k = 1: min(16,384, 2048) x 202,752
    # x 4 B = 1,660,944,384, + the 512 MiB budget
    recipe = load({"model": "GLM-5", "gpu": "MI300X", "tensor-parallel-size": 8, "vllm-version": "0.30.0",
                   "speculative-config": MTP})
    assert planning.plan(recipe).backend("auto").reserved_bytes == 1_660_944_384 + 512 * 2**20


def test_a_headroom_measured_for_one_working_set_stays_with_it():
    # Measured for auto (6 B an element) only: deep_select (2 B) has its own working set, so only the 512 MiB budget;
    # with two FP32-copy backends measured, the others take the first given
    plan = planning.plan(load_recipe(SEED, ["memory.indexer_headroom_bytes={auto: 3091880448}"]))
    assert (plan.backend("deep_select").indexer_headroom_bytes, plan.backend("torch").indexer_headroom_bytes) == (
        512 * 2**20, 3_091_880_448)
    plan = planning.plan(load_recipe(SEED, ["memory.indexer_headroom_bytes={auto: 3091880448, persistent: 3000000000}"]))
    assert plan.backend("torch").indexer_headroom_bytes == 3_091_880_448


def test_releases_that_estimate_no_graphs_size_the_kv_cache_without_them():
    # 0.19.1: 0.9 x 150,109,880,320 B = 135,098,892,288 requested - 80 - 10 - 2 GiB (98,784,247,808) =
    # 36,314,644,480 B of KV; the 10 GiB of graphs are not subtracted (vllm==0.19.1 vllm/envs.py:1654-1655)
    recipe = load(V32_H200 | {"vllm-version": "0.19.1", "memory": {"weights_gib": 80, "peak_activation_gib": 10,
                                                                   "non_torch_gib": 2, "cudagraph_gib": 10}})
    assert planning.plan(recipe).backend("auto").kv_cache_bytes == 36_314_644_480


def test_the_seeds_concurrency_and_its_budget_fix():
    # 41,050,274 tokens / 1,048,576 = 39.149 -> 39.15 (vLLM prints two decimals). 0.33.0 is at risk; the budget that
    # clears it, by hand: the seed's step had 3.04 GiB (less 0.005 GiB of rounding: 3,258,806,436 B) + 786 x 1,049,088
    # x 2 B of live BF16 logits (1,649,166,336 B) = 4,907,972,772 B; 256 decodes need 256 x 37,767,168 B + the 4 MiB
    # margin = 9,672,589,312 B; the budget raises the room by what it reserves beyond the seed's 3,091,880,448 B of
    # headroom, so it takes 9,672,589,312 - 4,907,972,772 + 3,091,880,448 = 7,856,496,988 B: 7,493 MiB (7,492.5 up)
    base = load_base(SEED)
    plan = planning.plan(load_recipe(SEED))
    auto = plan.backend("auto")
    assert auto.max_concurrency == 39.15 and auto.selected
    budget = next(f for f in fixes(base, plan, auto) if f.name == "budget")
    assert (budget.key, budget.value) == ("env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB", 7493) and not budget.plan.oom.at_risk
    assert not any(b.selected for b in planning.plan(load_recipe(SEED)).backends if b.backend != "auto")


def test_on_main_the_fix_is_the_release_itself():
    main = planning.plan(load_recipe(SEED, ["vllm-version=main"])).backend("auto")
    assert main.with_fix is main.release and main.with_fix.reserved_bytes == 9_668_395_008  # the seed: 9.0 GiB


def test_weights_that_fill_the_gpu_refuse_the_plan_unless_the_kv_is_pinned_to_an_estimate():
    # vLLM refuses to start with no memory left for the cache: weights + non-torch = requested leaves none
    plan = planning.plan(load(V32_H200))
    left = plan.memory.requested_bytes - plan.memory.non_torch.bytes
    full = {"memory": {"weights_bytes": left}}
    with pytest.raises(RecipeError, match="memory.weights_gib"):
        planning.plan(load(V32_H200 | full))
    planning.plan(load(V32_H200 | {"memory": {"weights_bytes": left - 1}}))
    with pytest.raises(RecipeError, match="memory.weights_gib"):  # measured: vLLM's own figure, pinned or not
        planning.plan(load(V32_H200 | full | {"kv-cache-memory-bytes": GIB}))
    # TP 1's 630.3 GiB of derived weights are plan's figure, not vLLM's: a pinned KV cache plans, an unpinned one not
    with pytest.raises(RecipeError, match="needs 630.3 GiB"):
        planning.plan(load({"model": "DeepSeek-V3.2", "gpu": "H200"}))
    planning.plan(load({"model": "DeepSeek-V3.2", "gpu": "H200", "kv-cache-memory-bytes": GIB}))


def test_a_pool_given_as_one_number_is_the_recipes_backends():
    # memory.cudagraph_gib: 1 is auto's pool, which holds 9.0 GiB of logits; a 5 GiB deep_select pool holds its
    # 1536 x 1,049,088 x 2 B = 3.0 GiB
    with pytest.raises(RecipeError, match=r"^memory.cudagraph_gib: 1.00 GiB is less than the 9.00 GiB"):
        planning.plan(load_recipe(SEED, ["memory.cudagraph_gib=1"]))
    planning.plan(load_recipe(SEED, ["memory.cudagraph_gib.deep_select=5"]))


def test_a_plan_of_some_backends_shows_auto_beside_them():
    assert [b.backend for b in planning.plan(load_recipe(SEED), {"deep_select"}).backends] == ["auto", "deep_select"]


def test_defaults_that_move_the_tokens():
    # V3.2 on H200 with 10 GiB of KV: bf16 blocks of 64 x 78,324 B: 2,142 of them, 137,088 tokens; fp8_ds_mla blocks
    # of 64 x 48,068 B: 3,490, 223,360 tokens: +62.93 %. The batch defaults do not move a pinned MLA cache.
    impacts = planning.default_impacts(load(V32_H200 | {"kv-cache-memory-bytes": 10 * GIB}))
    assert [(i.field, i.value, i.other, i.tokens_change) for i in impacts] == [("kv_cache_dtype", "auto", "fp8", 0.6293)]
    # B200 (>= 160 GiB) defaults to 16,384 batched tokens (vllm==0.28.0 vllm/engine/arg_utils.py:2582-2601), which
    # DeepSeek-V4's windows feel: 2048 and 8192 are named
    v4 = planning.default_impacts(load({"model": "DeepSeek-V4-Flash", "gpu": "B200", "tensor-parallel-size": 4}))
    assert {(i.value, i.other) for i in v4 if i.field == "max_num_batched_tokens"} == {(16384, 2048), (16384, 8192)}
    # no KV tokens at all: nothing to compare, not a division by zero
    assert planning.default_impacts(load(V32_H200 | {"memory": {"peak_activation_gib": 200}})) == []


def test_rocms_locked_workspace_leaves_no_decode_logits_to_allocate_at_run_time():
    # vllm==0.30.0 vllm/v1/attention/ops/rocm_aiter_mla_sparse.py:949-972: AITER's paged-MQA logits come from a
    # workspace of min(max_num_batched_tokens, max_num_seqs x (1 + k)) = min(1024, 1024 x 4) = 1024 rows x 163,840
    # columns x 4 B = 671,088,640 B, "locked after profiling": nothing is allocated beside it at run time, so no
    # shortfall, although #62860's decode term, 4096 x 163,840 x 4 = 2,684,354,560 B, is more than the budget +
    # workspace (536,870,912 + 671,088,640 = 1,207,959,552 B)
    plan = planning.plan(load({"model": "DeepSeek-V3.2", "gpu": "MI355X", "tensor-parallel-size": 8,
                               "vllm-version": "0.30.0", "max-num-seqs": 1024, "max-num-batched-tokens": 1024,
                               "speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}))
    auto = plan.backend("auto")
    assert auto.release.reservation.bytes == 1_207_959_552
    assert not auto.oom.at_risk


def test_a_graph_pool_measured_for_a_backend_this_engine_does_not_run_is_not_checked():
    # DeepInfer's top-k never runs on vLLM: a pool measured for it (0 GiB here) holds none of this recipe's logits, so
    # it is no measurement plan checks against them
    plan = planning.plan(load(V32_H200 | {"memory": {"cudagraph_gib": {"deepinfer": 0}}}))
    assert plan.backend("auto").available


def test_one_request_of_three_tokens_is_a_full_decode_graph_when_the_batch_takes_no_two():
    # vllm==0.33.0 vllm/config/vllm.py:2487-2494, 2540-2552, 2601-2603: with k = 2 a uniform decode is 3 tokens a
    # request; request_counts(max_num_seqs = 2) = [1, 2] gives sizes 3 and 6 (both <= min(2 x 3 x 2, 512) = 12), and
    # only 3 is <= max_num_batched_tokens = 4. The token grid up to min(12, 4) = 4 is 1, 2, 4, none a whole request.
    # So the largest FULL decode graph holds 3 rows (of the 2 x 3 = 6 of the decode worst case).
    recipe = load(V32_H200 | {"vllm-version": "0.33.0", "max-num-seqs": 2, "max-num-batched-tokens": 4,
                              "speculative-config": {"method": "mtp", "num_speculative_tokens": 2}})
    assert resolve(recipe).cudagraph_logits_rows == 3


# Memory terms measured at another shape -------------------------------------------------------------------------------

def test_a_term_estimated_or_measured_at_this_shape_carries_nothing():
    # carried_bytes is what plan's estimate of a shape change adds to a figure measured at another shape: an estimate,
    # or a figure measured at this very shape, carries 0 B, and the plan's JSON says so
    estimated = memory_terms.rank_memory(resolve(load(V32_H200)))
    measured = memory_terms.rank_memory(resolve(load(V32_H200 | {"memory": {"weights_gib": 80}})))
    assert (measured.weights.provenance, measured.weights.bytes) == ("measured", 80 * 2**30)
    for term in (estimated.weights, estimated.base_peak, estimated.non_torch, measured.weights):
        assert report.provenance(term)["carried_bytes"] == 0


def test_v41_plain_rows_take_plain_dtypes_and_refuse_only_the_packed_names_from_031():
    # vllm==0.31.0 vllm/models/deepseek_v41/attention.py:160-164: on a plain-row backend (FlashInfer's V4.1 one) a
    # dtype ending in _ds_mla is refused, "a packed FlashMLA DeepSeek V4.1 KV cache format; the selected backend
    # stores plain KV rows"; bf16 (auto) and per-tensor fp8 rows go on (:166-169). 0.30.0 has no such check.
    v41 = {"model": "DeepSeek-V4.1-Flash", "gpu": "B200", "data-parallel-size": 4, "enable-expert-parallel": True,
           "attention-backend": "FLASHINFER_MLA_SPARSE_DSV41"}
    for version in ("0.31.0", "0.33.0"):
        for dtype in ("auto", "fp8"):
            assert planning.plan(load(v41 | {"vllm-version": version, "kv-cache-dtype": dtype})).memory.kv.block_bytes
        with pytest.raises(RecipeError, match="fp8_ds_mla is a packed FlashMLA DeepSeek V4.1 KV cache format"):
            planning.plan(load(v41 | {"vllm-version": version, "kv-cache-dtype": "fp8_ds_mla"}))
    assert planning.plan(load(v41 | {"vllm-version": "0.30.0", "kv-cache-dtype": "fp8_ds_mla"})).memory.kv.block_bytes


def test_a_peak_measured_at_the_budget_it_runs_with_already_holds_mains_reservation():
    # H200: requested = ceil(150,109,880,320 x 0.92) = 138,101,089,895 B (vllm==0.33.0 vllm/v1/worker/utils.py:724-726),
    # less the measured 80 + 6 + 2 + 1 GiB = 42,538,067,559 B of KV cache on 0.33.0. main reserves the larger of the
    # prefill budget and the decode worst case in the profile run (vLLM PR #62860, the seed); 16 sequences' logits are
    # far below a 2,048 MiB budget, whose prefill logits the measured peak already held: the KV cache stays the same.
    recipe = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "max-num-seqs": 16,
              "env": {"VLLM_SPARSE_INDEXER_MAX_LOGITS_MB": 2048},
              "memory": {"weights_gib": 80, "peak_activation_gib": 6, "non_torch_gib": 2, "cudagraph_gib": 1}}
    for version in ("0.33.0", "main"):
        backends = planning.plan(load(recipe | {"vllm-version": version})).backends
        assert {b.kv_cache_bytes for b in backends if b.available} == {42_538_067_559}, version
