"""vLLM's CUDA-graph estimate (graphs.cudagraph_estimate; docs/cudagraph-estimate.md): the graphs each model runner
counts, against two startup logs' own count and hand derivations from the release code; what the estimate adds past
its first captures; and the seed's deep_select figures, which neither reading of the release code reaches. The
release's own code gives the same counts and extrapolation in tests/test_vllm_cudagraph_estimate.py (vllm_oracle)."""

import re

import pytest

from conftest import ROOT, SEED
from dsa_kvcalc import planning, report
from dsa_kvcalc.deployment import on_model_runner_v2, resolve
from dsa_kvcalc.graphs import GraphEstimate, capture_sizes, runner_capture_sizes, whole_requests
from dsa_kvcalc.recipe import load, load_recipe
from test_records import RECORDS

MIB = 2**20
LOGS = ROOT / "tests" / "fixtures" / "vllm_logs"
PROFILED = re.compile(r"Profiling CUDA graph memory: PIECEWISE=(\d+) \(largest=(\d+)\), FULL=(\d+) \(largest=(\d+)\)")
V32_H200 = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8}


@pytest.mark.parametrize("log, record", [
    ("deepseek-v4-flash-2xrtxpro6000-tp2-stock-v0.25.0.log", "V4-Flash 2xRTX PRO 6000 TP2, vLLM 0.25.0, L=1M, MTP"),
    ("glm-5.2-nvfp4-4xgb200-tp4-ep-v0.26.0.log",
     "GLM-5.2-NVFP4 4xGB200 TP4 EP, vLLM 0.26.0, standard fp8 on FlashInfer sparse MLA"),
])
def test_model_runner_v1_counts_the_graphs_its_log_profiles(log, record):
    # Model Runner V1 logs the graphs of each mode it estimates (vllm==0.25.0 vllm/v1/worker/gpu_model_runner.py
    # profile_cudagraph_memory: "Profiling CUDA graph memory: PIECEWISE=n (largest=..), FULL=n (largest=..)") and
    # counts every graph past each mode's first at max(second sample, 1 MiB). The V4-Flash log's 42 PIECEWISE graphs
    # are its 43 grid sizes up to 384 rounded up to whole requests of 3 tokens (1 and 2 both become 3).
    piecewise, piecewise_largest, full, full_largest = map(int, PROFILED.search((LOGS / log).read_text()).groups())
    recipe = load(next(r for r in RECORDS if r.name == record).recipe)
    estimate = resolve(recipe).cudagraph_estimate
    assert estimate.method is GraphEstimate.SAMPLED
    assert estimate.graphs == {"PIECEWISE": piecewise, "FULL": full}
    captured = runner_capture_sizes(recipe, capture_sizes(recipe), on_model_runner_v2(recipe))
    assert (captured.top, estimate.sampled_rows[0]) == (piecewise_largest, full_largest)
    assert estimate.floor_bytes == (piecewise - 1 + full - 1) * MIB


def test_the_seed_extrapolates_113_full_graphs_from_its_1536_and_1524_token_samples():
    # vLLM 0.33.0, max_cudagraph_capture_size 1536: the grid 1, 2, 4; 8..248 by 8 (31); 256..1536 by 16 (81) = 115
    # sizes, each a PIECEWISE graph, which Model Runner V2 measures in full. Its decode graphs round each size up to
    # whole requests of 6 tokens within 256 x 6 (vllm/v1/worker/gpu/cudagraph_utils.py:316-344): 1, 2, 4 -> 6; the 31
    # multiples of 8 -> 12, 18, 24, 36, ...; the 81 multiples of 16 from 256 -> 258, 276, ..., 1524, 1536: 113 FULL
    # graphs. The two largest are captured (:916, 995): 1536 and 1520 -> 1524; the other 112 count at the 1 MiB floor
    # (:918, 1038), the second sample holding no logits of its own.
    estimate = planning.plan(load_recipe(SEED)).cudagraph_estimate
    assert estimate.method is GraphEstimate.EXTRAPOLATED
    assert estimate.graphs == {"PIECEWISE": 115, "FULL": 113}
    assert estimate.sampled_rows == (1536, 1524)
    assert (estimate.extrapolated_graphs, estimate.floor_bytes) == (112, 112 * MIB)
    data = report.plan_json(planning.plan(load_recipe(SEED)))["cudagraph_estimate"]
    assert (data["method"], data["sampled_graph_tokens"], data["floor_bytes"]) == ("EXTRAPOLATED", [1536, 1524],
                                                                                  117_440_512)


def test_model_runner_v1_samples_both_modes_and_v2_only_its_full_graphs():
    # V3.2 on an H200 (1,024 sequences, no draft tokens): the grid up to min(1024 x 2, 512) is 1, 2, 4, 8..248 by 8
    # and 256..512 by 16: 3 + 31 + 17 = 51 sizes, each a PIECEWISE graph and (within 1,024 requests) a FULL one.
    # 0.28.0 runs V3.2 on V1, which counts (51 - 1) + (51 - 1) graphs at the floor; 0.29.0 on V2, which measures the
    # PIECEWISE graphs whole and extrapolates its 51 FULL graphs: 50.
    v1 = resolve(load(V32_H200 | {"vllm-version": "0.28.0"})).cudagraph_estimate
    v2 = resolve(load(V32_H200 | {"vllm-version": "0.29.0"})).cudagraph_estimate
    assert (v1.method, v1.graphs, v1.floor_bytes) == (GraphEstimate.SAMPLED, {"PIECEWISE": 51, "FULL": 51}, 100 * MIB)
    assert (v2.method, v2.graphs, v2.floor_bytes) == (GraphEstimate.EXTRAPOLATED, {"PIECEWISE": 51, "FULL": 51},
                                                      50 * MIB)
    piecewise = {"compilation-config": {"cudagraph_mode": "PIECEWISE"}}
    v1 = resolve(load(V32_H200 | {"vllm-version": "0.28.0"} | piecewise)).cudagraph_estimate
    v2 = resolve(load(V32_H200 | {"vllm-version": "0.29.0"} | piecewise)).cudagraph_estimate
    assert (v1.graphs, v1.floor_bytes, v1.sampled_rows) == ({"PIECEWISE": 51}, 50 * MIB, ())
    assert (v2.graphs, v2.floor_bytes) == ({"PIECEWISE": 51}, 0)


def test_a_single_full_graph_extrapolates_nothing():
    # cudagraph_capture_sizes [6] with 5 draft tokens: one FULL decode graph of 6 tokens; V2 takes no second sample
    # and counts (1 - 1) graphs past it (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:1038-1039)
    recipe = load_recipe(SEED, ["compilation-config.cudagraph_capture_sizes=[6]",
                                "compilation-config.max_cudagraph_capture_size=6",
                                "compilation-config.cudagraph_mode=FULL_DECODE_ONLY"])
    estimate = resolve(recipe).cudagraph_estimate
    assert (estimate.graphs, estimate.sampled_rows, estimate.floor_bytes) == ({"FULL": 1}, (6,), 0)


@pytest.mark.parametrize("raw", [
    V32_H200 | {"vllm-version": "0.19.1"},  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (vllm/envs.py:1654-1655)
    # V4 on Model Runner V2 in 0.28.0, whose profile_cudagraph_memory returns 0 (vllm/v1/worker/gpu/model_runner.py:
    # 843-845)
    {"model": "DeepSeek-V4-Flash", "gpu": "H200", "tensor-parallel-size": 4, "vllm-version": "0.28.0",
     "kv-cache-dtype": "fp8"},  # auto: vLLM 0.28.0 refuses V4 on the H200
    {"model": "DeepSeek-V3.2", "gpu": "MI300X", "tensor-parallel-size": 8, "vllm-version": "0.25.1"},  # CUDA only
])
def test_releases_that_subtract_no_estimate_count_no_floors(raw):
    estimate = resolve(load(raw)).cudagraph_estimate
    assert (estimate.method, estimate.sampled_rows, estimate.extrapolated_graphs, estimate.per_graph_bytes) == (
        GraphEstimate.NONE, (), 0, 0)
    assert estimate.graphs  # the graphs are captured all the same


@pytest.mark.parametrize("settings, rows", [([], 1536), (["max-num-seqs=128"], 768)])
def test_the_graph_term_of_a_backend_is_its_fp32_copy_once(settings, rows):
    # The estimate's backend term is the first sample's logits, once; the per-graph floors are the same for every
    # backend. With auto's graphs measured alone, deep_select's are derived from them and differ by the FP32 copy of
    # the largest FULL decode graph: rows x 1,049,088 x 4 B, 6,445,596,672 B at 1536 rows and 3,222,798,336 B at 768
    plan = planning.plan(load_recipe(SEED, ["memory.cudagraph_gib=18.40", *settings]))
    auto, deep_select = plan.backend("auto"), plan.backend("deep_select")
    assert auto.cudagraph_subtracted_bytes - deep_select.cudagraph_subtracted_bytes == rows * 1_049_088 * 4


def test_neither_reading_of_the_release_code_reaches_the_seeds_deep_select():
    """docs/cudagraph-estimate.md: deep_select's KV exceeds auto's by what auto's estimate exceeds deep_select's. That
    is the graph figures' difference (plan: 45,381,423 tokens), or, where the profile capture's eager warmups also
    cache an FP32 copy of the 1536 decode rows that the seed's graph figure does not hold, that plus one more copy.
    Then deep_select's estimate is 13,303,661,199 - 1536 x 1,049,088 x 4 B = 6,858,064,527 B: its KV 61,163,118,720
    + 19,756,849,562 - 6,858,064,527 = 74,061,903,755 B, floor(/ 126,720) = 584,453 blocks, int(584,453 / 12,329 x
    1,048,576) = 49,707,469 tokens. The seed's 48,253,887 lies between, 6.0 % above one and 2.9 % below the other."""
    seed = 48_253_887
    graphs = '{"auto": 19756849562, "deep_select": 6858064527}'
    plain, eager = (planning.plan(load_recipe(SEED, settings)).backend("deep_select").kv_cache_tokens
                    for settings in ([], [f"memory.cudagraph_bytes={graphs}"]))
    assert (plain, eager) == (45_381_423, 49_707_469)
    assert plain < seed < eager and min(abs(plain / seed - 1), abs(eager / seed - 1)) > 0.001


@pytest.mark.parametrize("per_seq", [1, 2, 5, 6, 16, 17, 20, 40, 300])
@pytest.mark.parametrize("bound", [0, 255, 271, 600, 1536, 1537, 10_000])
def test_graphs_counted_without_listing_them_are_those_listed_one_by_one(per_seq, bound):
    # A given max_cudagraph_capture_size can make the grid's run of multiples of 16 from 256 hundreds of millions
    # long, so graphs.Graphs counts the run's round-ups by arithmetic: each size apart where 1 + k <= 16, every
    # multiple between the ends where it is larger. Here against every size rounded up, one by one, as vLLM rounds
    # them (vllm==0.33.0 vllm/config/compilation.py:1537-1565; vllm/v1/worker/gpu/cudagraph_utils.py:321-350).
    # 259 rounds up to 260 with 5 tokens a request, as 256 does: the run's size 260 - 5 + 1 alone holds that graph;
    # 255 rounds up to 256 with 2 tokens a request, the run's first size
    listed, run = {1, 2, 4, 8, 100, 255, 259, 300, 1000, 1540}, range(256, 1537, 16)
    one_by_one = sorted({-(-size // per_seq) * per_seq for size in listed | set(run)
                         if -(-size // per_seq) * per_seq <= bound}, reverse=True)
    graphs = whole_requests(listed, run, per_seq, bound)
    assert (len(graphs), graphs.largest(len(graphs)), graphs.largest(2), graphs.top) == (
        len(one_by_one), one_by_one, one_by_one[:2], (one_by_one or [0])[0])


def test_mode_full_captures_every_size_as_a_full_graph():
    # V3.2 on an H200, 100 sequences, k = 1: the grid up to min(100 x 2 x 2, 512) = 400 is 1, 2, 4, 8..248 by 8 and
    # 256..400 by 16: 3 + 31 + 10 = 44 sizes. Mode FULL captures each as a mixed-batch FULL graph (vllm==0.33.0
    # vllm/v1/cudagraph_dispatcher.py:187-201). V1 (0.28.0) first rounds them up to whole requests of 2 tokens: 1 and
    # 2 both become 2, so 43 (vllm/config/compilation.py:1537-1565), all FULL, none PIECEWISE; V2 (0.29.0) keeps 44
    # (vllm/v1/worker/gpu/cudagraph_utils.py:352-370). FULL_AND_PIECEWISE's FULL graphs are the decode batches within
    # 100 x 2 = 200 tokens: 2, 4, 8..200 by 8 = 27 (the same in both runners), beside V1's 43 PIECEWISE graphs.
    k1 = {"max-num-seqs": 100, "speculative-config": {"method": "mtp", "num_speculative_tokens": 1}}
    full = {"compilation-config": {"cudagraph_mode": "FULL"}}
    assert resolve(load(V32_H200 | k1 | full | {"vllm-version": "0.28.0"})).cudagraph_estimate.graphs == {"FULL": 43}
    assert resolve(load(V32_H200 | k1 | full | {"vllm-version": "0.29.0"})).cudagraph_estimate.graphs == {"FULL": 44}
    assert resolve(load(V32_H200 | k1 | {"vllm-version": "0.28.0"})).cudagraph_estimate.graphs == {
        "PIECEWISE": 43, "FULL": 27}


def test_interactivity_captures_every_size_up_to_32_as_a_graph():
    # 0.30.0, 20 sequences, no draft tokens: the limit is min(20 x 2, 512) = 40; interactivity captures 1..32 and 40
    # (33 sizes, vllm/config/vllm.py _set_cudagraph_sizes), and the decode graphs within 20 requests are 1..20
    recipe = load(V32_H200 | {"max-num-seqs": 20, "vllm-version": "0.30.0", "performance-mode": "interactivity"})
    assert resolve(recipe).cudagraph_estimate.graphs == {"PIECEWISE": 33, "FULL": 20}


def test_given_capture_sizes_are_the_graphs():
    # cudagraph_capture_sizes [1, 2, 4, 100, 300] on the seed (k = 5): five PIECEWISE graphs, which V2 keeps as
    # given; its FULL graphs round them up to whole requests of 6 within 300: 6, 6, 6, 102, 300 -> 3 graphs, the two
    # largest sampled
    recipe = load_recipe(SEED, ["compilation-config.cudagraph_capture_sizes=[1, 2, 4, 100, 300]",
                                "compilation-config.max_cudagraph_capture_size=300"])
    estimate = resolve(recipe).cudagraph_estimate
    assert (estimate.graphs, estimate.sampled_rows, estimate.floor_bytes) == ({"PIECEWISE": 5, "FULL": 3}, (300, 102),
                                                                              2 * MIB)
