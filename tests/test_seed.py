"""The figures of vLLM PR #62860 (the table in its description) and the H200 measurements of DeepGEMM 2.8.2
(docs/validation.md, GPU runs), byte for byte. Every expected number here comes from those
texts or is multiplied out by hand in the comment beside it, never from the code under test."""

import dataclasses
from pathlib import Path

import pytest

from dsa_kvcalc import capacity, planning, report
from dsa_kvcalc.catalog import LAYOUTS
from dsa_kvcalc.deployment import logits_shape, resolve
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.units import GIB, MIB
from dsa_kvcalc.fixes import fixes, prefill_overshoot
from dsa_kvcalc.recipe import load_recipe
from dsa_kvcalc.sweep import load_base

SEED = Path(__file__).parent.parent / "recipes" / "deepseek-v4.1-flash-4xb200-dep4.yaml"


@pytest.fixture(scope="module")
def seed_plan():
    return planning.plan(load_recipe(SEED))


def test_auto_reserves_1536_rows_of_bf16_plus_fp32_copy(seed_plan):
    logits = seed_plan.backend("auto").decode_logits
    assert (logits.rows, logits.padded_columns, logits.bytes_per_element) == (1536, 1_049_088, 6)
    assert logits.bytes == 9_668_395_008  # the seed: 1536 rows x 1M x 6 B
    assert seed_plan.backend("auto").with_fix.reserved_bytes == 9_668_395_008


def test_deep_select_reads_bf16_directly(seed_plan):
    logits = seed_plan.backend("deep_select").decode_logits
    assert (logits.bytes_per_element, logits.bytes) == (2, 3_222_798_336)


def test_every_other_backend_pays_the_fp32_copy(seed_plan):
    for name in ("persistent", "cooperative", "flashinfer", "torch"):
        assert seed_plan.backend(name).decode_logits.bytes == 9_668_395_008


def test_the_oom_allocation_is_the_fp32_copy_of_131_decodes():
    recipe = load_recipe(SEED)
    auto = capacity.decode_logits(logits_shape(recipe), topk_reads_bf16=False)  # auto: FP32
    logits = dataclasses.replace(auto, rows=131 * 6)
    # "Tried to allocate 3.07 GiB": 786 rows x 1,049,088 columns x 4 B
    assert logits.copy_bytes == 3_298_332_672


def test_aligning_the_width_adds_4_5_and_1_5_mib(seed_plan):
    # 1536 rows x (1,049,088 - 1,048,576) columns x 6 B = 4.5 MiB; x 2 B = 1.5 MiB
    assert seed_plan.backend("auto").decode_logits.alignment_bytes == 4.5 * MIB
    assert seed_plan.backend("deep_select").decode_logits.alignment_bytes == 1.5 * MIB


def test_cuda_graph_difference_is_the_fp32_copy_at_1536_rows(seed_plan):
    auto, deep_select = seed_plan.backend("auto"), seed_plan.backend("deep_select")
    assert auto.cudagraph_logits_rows == 1536
    # 1536 x 1,049,088 x 4 B = 6,445,596,672 B (6.00 GiB); the seed measured 18.40 - 12.39 = 6.01 GiB
    assert auto.cudagraph_logits_bytes - deep_select.cudagraph_logits_bytes == 6_445_596_672


def test_deep_select_graphs_follow_from_auto_graphs_alone():
    recipe = load_recipe(SEED, ["memory.cudagraph_gib=18.40"])
    graphs_gib = planning.plan(recipe).backend("deep_select").cudagraph.bytes / 2**30
    assert graphs_gib == pytest.approx(12.39, abs=0.01)  # measured in the seed


def test_vllm_default_capture_size_would_not_reach_1536_rows():
    recipe = load_recipe(SEED, ["compilation-config.max_cudagraph_capture_size=null"])
    # min(256 sequences x 6 tokens x 2, 1024 on SM100) = 1024; the largest n x 6 <= 1024 on the grid is 168 x 6
    assert resolve(recipe).cudagraph_logits_rows == 1008


def test_seed_recipe_reproduces_the_seed_kv_table(seed_plan):
    """The recipe's memory block was solved from auto's figures in this table (see its comments), so auto's check
    only that the chain of arithmetic gives them back exactly, through V4.1's derived groups: 12,329 pages a request
    and 126,720 B a block. No release has #62860: the default vLLM (0.33.0) logs the seed's "main" column, and main
    after the fix its "this PR" column."""
    auto = seed_plan.backend("auto")
    assert (auto.kv_cache_tokens, auto.other.kv_cache_tokens) == (41_050_274, 36_636_372)
    assert not auto.release.reserves_decode_logits and auto.other.reserves_decode_logits
    assert (seed_plan.memory.kv.pages_per_request, seed_plan.memory.kv.block_bytes) == (12_329, 126_720)


def test_deep_select_falls_short_of_the_seed_by_what_released_code_does_not_explain(seed_plan):
    """deep_select's KV tokens differ from auto's by the two graph pools the seed prints (18.40 - 12.39 = 6.01 GiB).
    The seed's own deep_select figures are 567,362 blocks on main against auto's 482,663: 84,699 blocks x 126,720 B
    = 9.996 GiB. The 3.99 GiB between them is in no released vLLM's profile run (its branch does not read the top-k
    backend) nor its CUDA-graph estimate, whose extrapolation multiplies no logits (docs/cudagraph-estimate.md): plan
    stays 3.99 GiB of KV below the seed's deep_select, on either side of the fix."""
    deep_select = seed_plan.backend("deep_select")
    per_block = 1_048_576 / 12_329  # logged tokens a block
    seed_main, seed_fixed = 48_253_887, 48_163_989
    for planned, seed in ((deep_select.kv_cache_tokens, seed_main), (deep_select.other.kv_cache_tokens, seed_fixed)):
        gap_gib = (seed - planned) / per_block * 126_720 / GIB
        assert abs(gap_gib - (9.996 - 6.01)) < 0.02, gap_gib


def test_main_after_the_fix_gives_the_seed_after_fix_figures_as_its_own():
    fixed = planning.plan(load_recipe(SEED, ["vllm-version=main"]))
    auto = fixed.backend("auto")
    assert (auto.reserved_bytes, auto.kv_cache_tokens, auto.other.kv_cache_tokens) == (
        9_668_395_008, 36_636_372, 41_050_274)
    assert not auto.oom.at_risk


def test_unfixed_vllm_runs_out_where_the_seeds_rank_died(seed_plan):
    """Rank 0 died at 131 decodes: "Tried to allocate 3.07 GiB ... of which 3.04 GiB is free", the FP32 copy of
    786 rows while their BF16 logits were live. The step had 3.04 GiB (less the message's 0.005 GiB rounding:
    3,258,806,436 B) + 786 x 1,049,088 x 2 B = 1,649,166,336 B = 4,907,972,772 B; a decode takes 6 x 1,049,088 x 6 B =
    37,767,168 B: 129.95 fit, so OOM above 129 decodes, and 131 does not fit. The 4 MiB margin keeps 129 safe."""
    oom = seed_plan.backend("auto").oom
    assert (oom.room_bytes, oom.bytes_per_decode, oom.max_decodes, oom.safe_decodes) == (
        4_907_972_772, 37_767_168, 129, 129)
    assert oom.at_risk and oom.worst_decodes == 256
    # deep_select: 6 x 1,049,088 x 2 B = 12,589,056 B a decode, 389 fit in the same room: 256 are safe
    assert not seed_plan.backend("deep_select").oom.at_risk


def test_deep_select_is_answered_beside_auto_the_backend_that_died():
    """With deep_select chosen, plan's answer names auto beside it, the seed's backend, even though auto holds fewer KV
    tokens (its FULL graphs keep the FP32 copy): auto's OOM above 129 decodes, where the seed's rank died at 131."""
    summary = report.summary(planning.plan(load_recipe(SEED, ["sparse-indexer-topk-backend=deep_select"])))
    compared = summary["compared"]
    assert summary["backend"] == "deep_select" and compared["backend"] == "auto"
    assert compared["oom"]["at_risk"] and compared["oom"]["max_decodes"] == 129
    assert compared["kv_cache_tokens_vs_answered"] < 0


def test_every_fix_plan_offers_clears_its_own_verdict_at_the_cost_it_printed():
    """Each fix, set as a user would with --set, re-plans to no OOM risk and the KV tokens the fix said."""
    plan = planning.plan(load_recipe(SEED))
    offered = fixes(load_base(SEED), plan, plan.backend("auto"))
    assert {f.name for f in offered} == {"seqs", "budget", "deep_select", "kv"}
    for fix in offered:
        fixed = planning.plan(load_recipe(SEED, [f"{fix.key}={fix.value}"]))
        b = fixed.backend(fix.plan.backend)
        assert not b.oom.at_risk, fix
        assert b.kv_cache_tokens - plan.backend("auto").kv_cache_tokens == fix.tokens_change, fix


def test_the_budget_the_seed_thread_would_set_moves_the_risk_to_prefill_chunks():
    """9,221 MiB covers 1536 rows of decode logits (the old advice); on SM100 a prefill chunk that budget sizes holds
    BF16 + FP32 = 1.5 x 9,221 MiB, 4,610 MiB beyond the reservation (vllm==0.33.0 sparse_attn_indexer.py:727-737),
    where the room without the reservation's rise and the fitted credit is 4,907,972,772 - 514,121,565 - 4 MiB =
    4,389,656,903 B (4,186 MiB)."""
    base = load_base(SEED, ["env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=9221"])
    plan = planning.plan(load_recipe(SEED))
    fixed = planning.plan(load_recipe(SEED, ["env.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=9221"])).backend("auto")
    assert not fixed.oom.at_risk
    assert "4,610 MiB beyond the reservation" in prefill_overshoot(plan.backend("auto"), fixed, 9221 * MIB)
    assert "4,186 MiB is free" in prefill_overshoot(plan.backend("auto"), fixed, 9221 * MIB)
    assert prefill_overshoot(plan.backend("auto"), fixed, 7493 * MIB) is None  # 3,746 MiB fits
    assert base.recipe.prefill_budget_mb == 9221


def test_same_recipe_on_h200_is_fp32_256_padded_without_copy():
    # vLLM refuses the seed's MXFP4 indexer cache off SM10x (vllm==0.33.0
    # vllm/v1/attention/backends/mla/indexer.py:95): the H200 runs the FP8 one
    with pytest.raises(RecipeError, match="requires Blackwell datacenter GPUs"):
        planning.plan(load_recipe(SEED, ["gpu=H200", "memory={}"]))
    plan = planning.plan(load_recipe(SEED, ["gpu=H200", "memory={}", "attention-config.indexer_kv_dtype=fp8"]))
    logits = plan.backend("auto").decode_logits
    assert (logits.logits_dtype, logits.padded_columns, logits.bytes_per_element, logits.copy_bytes_per_element) == (
        "fp32", 1_048_576, 4, 0)
    assert logits.bytes == 1536 * 1_048_576 * 4
    assert not plan.backend("deep_select").available


@pytest.mark.parametrize("columns, stride", [(4096, 4096), (4097, 4352), (5000, 5120), (1_048_576, 1_048_576)])
def test_sm90_padding_matches_deepgemm_on_the_h200(columns, stride):
    # Row strides measured on an H200 with DeepGEMM 2.8.2 (docs/validation.md, GPU runs)
    assert capacity.padded_columns(columns, LAYOUTS[("2.8", "sm90")]) == stride


@pytest.mark.parametrize("columns, stride", [(384, 1536), (1000, 1536), (1536, 1536), (1537, 3072),
                                             (1_048_576, 1_049_088)])
def test_sm100_padding_holds_whole_384_splits_at_1024_byte_strides(columns, stride):
    # lcm(384, 512) = 1536 columns (deepinfer-gemm 2.8.2 csrc/apis/attention.hpp); nested alignment would give 512
    # for 384, which is not a whole number of splits
    assert capacity.padded_columns(columns, LAYOUTS[("2.8", "sm100")]) == stride


def test_older_deepgemm_pads_fp32_to_256_on_blackwell_too():
    plan = planning.plan(load_recipe(SEED, ["deepgemm=2.6.1", "memory={}"]))
    logits = plan.backend("auto").decode_logits
    assert (logits.logits_dtype, logits.padded_columns, logits.bytes_per_element) == ("fp32", 1_048_576, 4)


def test_deep_select_with_dcp_needs_the_fp32_copy():
    # The seed's V4.1 (at TP2, which DCP2 divides) keeps a sliding window, which vLLM's planner refuses to split over
    # DCP ranks
    # (vllm==0.33.0 vllm/v1/kv_cache_interface.py:949): the same top-k on V3.2, which has none.
    v32 = SEED.parent / "deepseek-v3.2-8xb200-tp8.yaml"
    without = planning.plan(load_recipe(v32, ["memory={}"]))
    plan = planning.plan(load_recipe(v32, ["decode-context-parallel-size=2", "memory={}"]))
    assert (without.backend("deep_select").decode_logits.bytes_per_element,
            plan.backend("deep_select").decode_logits.bytes_per_element) == (2, 6)
    with pytest.raises(RecipeError, match="DCP not support sliding window"):
        resolve(load_recipe(SEED, ["decode-context-parallel-size=2", "tensor-parallel-size=2", "memory={}"]))


def test_deepinfer_sizes_logits_over_compressed_keys_in_bf16():
    plan = planning.plan(load_recipe(SEED, ["engine=deepinfer", "memory={}"]))
    (only,) = plan.backends
    # DeepInfer: 256 x (1 + 5) rows, max_kv_len = 1,048,576 // 4 = 262,144 (a multiple of 1536? no: 262,656)
    assert only.decode_logits.rows == 1536
    assert only.decode_logits.columns == 262_144
    assert only.decode_logits.padded_columns == 262_656  # 171 x 1536
    assert only.decode_logits.bytes_per_element == 2


def test_plan_says_where_it_is_off_the_seeds_table_and_only_for_the_seeds_deployment():
    from dsa_kvcalc import published

    # vLLM PR #62860's table: auto 41,050,274 (main) and 36,636,372 (the PR), which plan reproduces; deep_select
    # 48,253,887 and 48,163,989, which plan does not (6.0 % below: 3.99 GiB in no released vLLM's profile run).
    gaps = {(g.backend, g.reserves_decode_logits): (g.published_tokens, g.planned_tokens)
            for g in published.gaps(planning.plan(load_recipe(SEED)))}
    assert set(gaps) == {("deep_select", False), ("deep_select", True)}
    assert gaps["deep_select", False][0] == 48_253_887 and gaps["deep_select", True][0] == 48_163_989
    assert all(0.93 < planned / figure < 0.95 for figure, planned in gaps.values())
    for sets in (["max-num-seqs=128"], ["vllm-version=0.31.0"], ["gpu-memory-utilization=0.95"]):
        assert published.gaps(planning.plan(load_recipe(SEED, sets))) == [], sets  # not the deployment measured


def test_b300_runs_the_sm100_logits_layout():
    """B300 is SM 10.3: vLLM takes DeepGEMM's MX path, whose logits are BF16, on the whole 10.x family
    (vllm==0.33.0 vllm/utils/deep_gemm.py:604-606, is_device_capability_family(100): capability // 10,
    vllm/platforms/interface.py:577-588), so it writes them in whole 384-column splits at 1024-byte strides as on the
    B200, and the top-k reads an FP32 copy: 6 B over 1,049,088 columns, not SM90's 4 B over 1,048,576."""
    logits = planning.plan(load_recipe(SEED, ["gpu=B300", "memory={}"])).backend("auto").decode_logits
    assert (logits.logits_dtype, logits.padded_columns, logits.bytes_per_element) == ("bf16", 1_049_088, 6)
