"""sweep and recommend: --vary parsing, rows against plan's own JSON, failure rows, the search on the seed's recipe."""

import csv
import io
import json
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, SEED, cli, one_line, run, runner
from dsa_kvcalc import planning, report
from dsa_kvcalc.cli import app, console_chunks
from dsa_kvcalc.inputs import RecipeLoader
from dsa_kvcalc.keys import RecipeError, flatten_keys
from dsa_kvcalc.recipe import load_recipe
from dsa_kvcalc.render import sweep as sweep_render
from dsa_kvcalc.sweep import parse_vary, parse_varies
from dsa_kvcalc.values import read_values


def plan_backends(*sets) -> dict:
    result = run("plan", SEED, "--format", "json", *(arg for s in sets for arg in ("--set", s)))
    assert result.exit_code == 0, result.output
    return {b["backend"]: b for b in json.loads(result.output)["backends"]}


@pytest.mark.parametrize("text, values", [
    ("max-num-seqs=64:1024:64", tuple(range(64, 1025, 64))),  # the issue's range: stop included, 16 values
    ("max-num-seqs=256:256:1", (256,)),
    ("max-model-len=128k:512k:128k", (128_000, 256_000, 384_000, 512_000)),  # vLLM's 1k = 1000
    ("max-model-len=64K:128K:64K", (65_536, 131_072)),  # 1K = 1024
    ("gpu-memory-utilization=0.90:0.97:0.01", (0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97)),
    ("speculative-config.num_speculative_tokens=0,1,3,5", (0, 1, 3, 5)),
    ("kv-cache-dtype=fp8, auto", ("fp8", "auto")),
    ("enforce-eager=true,false", (True, False)),
])
def test_vary_reads_lists_ranges_and_units(text, values):
    assert tuple(parse_vary(text).values) == values


@pytest.mark.parametrize("vary, words", [
    ("max-num-seqs=64:1024:0", ["step must be above 0"]),
    ("max-num-seqs=1024:64:64", ["start 1024 is above stop 64"]),
    ("max-num-seqs=a:b:c", ["must be numbers"]),
    ("max-num-seqs=64:1024", ["start:stop:step"]),
    ("max-num-seqs=", ["no values"]),
    ("max-num-seqs=1,,2", ["empty value"]),
    ("max-num-seqs", ["KEY=SPEC"]),
    ("max-num-seq=1,2", ["unknown key", "max-num-seq", "(did you mean max-num-seqs?)"]),
    ("speculative-config.num_tokens=1,2", ["unknown key", "speculative-config.num_tokens"]),
    ("memory.weights_gib.auto=40", ["unknown key"]),
    ("max-num-seqs.x=1", ["no nested keys"]),
    ("port=1,2", ["does not change memory"]),
])
def test_bad_vary_is_one_line_naming_it(vary, words):
    result = run("sweep", SEED, "--vary", vary)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --vary {vary}"), result.output
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize("args, words", [
    ([], ["nothing to sweep"]),  # the empty product
    (["--vary", "max-num-seqs=1,2", "--vary", "max_num_seqs=3"], ["varied twice"]),
    (["--vary", "max-num-seqs=1,2", "--backend", "fastest"], ["--backend", "fastest"]),
])
def test_bad_sweep_is_one_line(args, words):
    result = run("sweep", SEED, *args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0]


def test_rows_equal_plan_json_for_sampled_points(tmp_path):
    output = tmp_path / "sweep.jsonl"
    result = run("sweep", SEED, "--vary", "max-num-seqs=64:1024:64", "--vary",
                 "speculative-config.num_speculative_tokens=0,1,3,5", "--vary", "gpu-memory-utilization=0.9,0.97",
                 "--backend", "auto", "--backend", "deep_select", "--output", output)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == 16 * 4 * 2 * 2
    assert [row["backend"] for row in rows[:4]] == ["auto", "deep_select", "auto", "deep_select"]
    at = {(r["max-num-seqs"], r["speculative-config.num_speculative_tokens"], r["gpu-memory-utilization"],
           r["backend"]): r for r in rows}
    # The seed's own point: 256 x (1 + 5) = 1536 rows x 1,049,088 x 6 B = 9,668,395,008 B of logits, and the seed's
    # KV tokens on main before and after #62860 (vLLM PR #62860's table).
    seed = at[256, 5, 0.97, "auto"]
    assert (seed["decode_logits.rows"], seed["decode_logits.bytes"]) == (1536, 9_668_395_008)
    assert (seed["kv_cache_tokens"], seed["other_side_of_fix.kv_cache_tokens"]) == (41_050_274, 36_636_372)
    # 64 x 6 = 384 rows: 384 x 1,049,088 x 6 B = 2,417,098,752 B. The graphs, measured at 1536 rows, hold
    # (1536 - 384) x 1,049,088 x 6 B = 7,251,296,256 B less, and Model Runner V2's estimate counts 72 fewer FULL
    # graphs at its 1 MiB floor (vllm==0.33.0 vllm/v1/worker/gpu/cudagraph_utils.py:918, 1038): the grid up to 1536
    # rounded up to whole requests of 6 within 64 x 6 is 1 + 31 + 9 = 41 graphs (6; 12 ... 252; 258 ... 384), not
    # 113. KV 61,163,118,720 B (the seed's 482,663.5 blocks of 126,720 B) + 7,251,296,256 + 72 x 1,048,576 =
    # 68,489,912,448 B = 540,482 blocks; 540,482 / 12,329 pages x 1,048,576 = 45,967,755.
    small = at[64, 5, 0.97, "auto"]
    assert (small["decode_logits.rows"], small["decode_logits.bytes"]) == (384, 2_417_098_752)
    assert (small["kv_cache_bytes"], small["kv_cache_tokens"]) == (68_489_912_448, 45_967_755)
    for row in rows[::37]:  # 7 points spread over the product, both backends
        seqs, spec, util = (row["max-num-seqs"], row["speculative-config.num_speculative_tokens"],
                            row["gpu-memory-utilization"])
        plan = plan_backends(f"max-num-seqs={seqs}", f"speculative-config.num_speculative_tokens={spec}",
                             f"gpu-memory-utilization={util}")[row["backend"]]
        assert row == {"max-num-seqs": seqs, "speculative-config.num_speculative_tokens": spec,
                       "gpu-memory-utilization": util} | flatten_keys(plan)


def test_default_backends_are_the_available_ones_and_csv_holds_the_seeds_figures():
    result = run("sweep", SEED, "--vary", "max-num-seqs=128,256", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    # every backend but aiter (ROCm only; the seed runs B200)
    available = ["auto", "persistent", "cooperative", "deep_select", "flashinfer", "torch"]
    assert [row["backend"] for row in rows] == available * 2
    last = rows[-1]  # torch at 256, which pays the FP32 copy as auto does: the seed's 41,050,274 tokens on main
    assert (last["backend"], last["kv_cache_tokens"], last["error"]) == ("torch", "41050274", "")
    assert last["reserved_bytes"] == str(512 * 2**20)  # vLLM 0.33.0 reserves the prefill budget only (no #62860)


@pytest.mark.parametrize("weights", ["40,45", "200,40"])  # 200 GiB fails first: the error column comes early
def test_csv_rows_equal_plan_json_at_their_points(weights, tmp_path):
    output = tmp_path / "sweep.csv"
    result = run("sweep", SEED, "--vary", f"memory.weights_gib={weights}", "--vary", "max-num-seqs=64,256",
                 "--backend", "auto", "--backend", "deep_select", "--output", output)
    assert result.exit_code == 0, result.output
    rows = [row for row in csv.DictReader(output.open()) if not row["error"]]
    assert len(rows) == (8 if weights == "40,45" else 4)
    for row in rows:
        plan = plan_backends(f"memory.weights_gib={row['memory.weights_gib']}", f"max-num-seqs={row['max-num-seqs']}")
        expected = {key: "" if value is None else str(value) for key, value in flatten_keys(plan[row["backend"]]).items()}
        assert {key: row[key] for key in expected} == expected


def test_an_invalid_point_is_a_row_not_the_end(tmp_path):
    output = tmp_path / "sweep.csv"
    # 200 GiB of weights do not fit a B200 at 0.97 (173 GiB): that point fails, the others stand.
    result = run("sweep", SEED, "--vary", "memory.weights_gib=40,200,45", "--backend", "auto", "--output", output)
    assert result.exit_code == 0, result.output
    assert "1 of 3 points failed" in result.output
    rows = list(csv.DictReader(output.open()))
    assert [row["memory.weights_gib"] for row in rows] == ["40", "200", "45"]
    assert rows[1]["error"].startswith("memory.weights_gib:") and rows[1]["backend"] == ""
    assert rows[0]["error"] == "" and int(rows[0]["kv_cache_tokens"]) > int(rows[2]["kv_cache_tokens"])
    assert [p.name for p in tmp_path.iterdir()] == ["sweep.csv"]  # no temporary file left beside it


def test_named_unavailable_backend_says_why():
    result = run("sweep", SEED, "--vary", "max-num-seqs=256", "--backend", "aiter", "--format", "jsonl")
    row = json.loads(result.output)
    assert row["available"] is False and "gfx942" in row["reason"]


def test_plot_without_matplotlib_is_one_line_and_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run("sweep", SEED, "--vary", "max-num-seqs=128,256", "--plot", tmp_path / "sweep.png")
    assert result.exit_code == 2
    assert result.output.strip() == "error: --plot: needs matplotlib (pip install '.[plot]' in the checkout)"
    assert not list(tmp_path.iterdir())


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    result = run("sweep", SEED, "--vary", "max-num-seqs=64:512:64", "--vary",
                 "speculative-config.num_speculative_tokens=1,5", "--backend", "auto", "--backend", "deep_select",
                 "--output", tmp_path / "sweep.csv", "--plot", tmp_path / "sweep.png")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "sweep.png").read_bytes().startswith(b"\x89PNG")


# recommend on the seed's recipe. Hand arithmetic: a B200 holds 178.35 GiB; at gpu-memory-utilization 0.97 an
# unfixed vLLM leaves 3 % free, 5.35 GiB = about 5,745,000,000 B. One decode's logits are (1 + k) rows of
# 1,049,088 padded columns: k = 5 with the FP32 copy (auto) 6 x 1,049,088 x 6 B = 37,767,168 B -> 152 decodes fit
# (152.1); deep_select reads BF16, 6 x 1,049,088 x 2 B = 12,589,056 B -> 456 (456.4); k = 0, deep_select
# 1 x 1,049,088 x 2 B = 2,098,176 B -> 2738 (2738.1).

def recommend(*args):
    result = runner.invoke(app, ["recommend", str(SEED), *map(str, args)], env={"COLUMNS": "250"})  # table rows unwrapped
    assert "Traceback" not in result.output, result.output
    return result


def test_recommend_the_issue_example_picks_deep_select():
    result = recommend("--target-concurrency", 256, "--min-kv-tokens", 8_000_000)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # By hand: the seed's step had 4,907,972,772 B at 256 sequences (tests/test_seed.py); the block tables grow by
    # 2 copies x 4 B x (8 x 32,768 + 8,192 + 1) columns = 2,162,696 B a sequence (tests/test_kv_init_buffers.py), so
    # at s sequences the room is 4,907,972,772 - 2,162,696 x (s - 256). deep_select's decode is 6 x 1,049,088 x 2 B =
    # 12,589,056 B; with the 4 MiB margin s x 12,589,056 + 4,194,304 <= 5,461,622,948 - 2,162,696 s holds up to
    # s = 369 (369.9): 370 is at risk.
    assert "Recommended: max-num-seqs 369, speculative-config.num_speculative_tokens 5, " \
           "sparse-indexer-topk-backend deep_select" in text
    assert "at 370: OOM risk on vLLM 0.33.0" in text


def test_recommend_trades_spec_tokens_for_sequences():
    result = recommend("--target-concurrency", 128, "--min-kv-tokens", 1_000_000, "--backend", "auto",
                       "--backend", "deep_select", "--max-spec-tokens", 5)
    text = " ".join(result.output.split())
    # Fewer spec tokens, fewer rows per decode: with none a decode is 1 x 1,049,088 x 2 B, so spec 0 allows the
    # most sequences. Each pick is plan's edge: safe there, at risk one above.
    pick = int(text.split("Recommended: max-num-seqs ")[1].split(",")[0])
    assert f"Recommended: max-num-seqs {pick}, speculative-config.num_speculative_tokens 0, " \
           "sparse-indexer-topk-backend deep_select" in text
    at = [f"speculative-config.num_speculative_tokens=0", "sparse-indexer-topk-backend=deep_select"]
    assert not planning.plan(load_recipe(SEED, at + [f"max-num-seqs={pick}"])).backend("deep_select").oom.at_risk
    assert planning.plan(load_recipe(SEED, at + [f"max-num-seqs={pick + 1}"])).backend("deep_select").oom.at_risk
    # the seed's own setting, auto at 5 spec tokens, is plan's seqs fix
    fix = next(f for f in json.loads(run("plan", SEED, "-f", "json").stdout)["summary"]["oom"]["fixes"]
               if f["name"] == "seqs")
    assert f"auto │ 5 │ {fix['value']} │" in text


def test_recommend_stops_where_the_kv_target_binds(tmp_path):
    # On vLLM main (#62860), ask for the KV tokens deep_select keeps at max-num-seqs 400 (below its OOM bound of 456).
    # By hand from the seed's recipe: auto's KV before the fix is 482,663.5 blocks x 126,720 B = 61,163,118,720 B;
    # deep_select's graphs are 19,756,849,562 - 13,303,661,199 = 6,453,188,363 B smaller (18.40 and 12.39 GiB); at 400
    # it reserves 400 x 6 rows x 1,049,088 x 2 B = 5,035,622,400 B, raising the peak by that less its headroom of
    # 3,088,855,296 B: 1,946,767,104 B. KV 61,163,118,720 + 6,453,188,363 - 1,946,767,104 = 65,669,539,979 B =
    # 518,225 blocks; 518,225 / 12,329 pages x 1,048,576 = 44,074,807 tokens. At 401, 12,589,056 B more reserved:
    # 518,126 blocks, 44,066,387 tokens.
    fixed = tmp_path / "seed-main.yaml"
    fixed.write_text(SEED.read_text() + "vllm-version: main\n")
    result = runner.invoke(app, ["recommend", str(fixed), "--target-concurrency", "64", "--min-kv-tokens", "44074807",
                                 "--backend", "deep_select"], env={"COLUMNS": "250"})
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "Recommended: max-num-seqs 400," in text
    assert "One more sequence fails: KV cache 44,066,387 tokens per rank < 44,074,807" in text


@pytest.mark.parametrize("args, words", [
    # vLLM refuses max-num-seqs above max-num-batched-tokens (the seed's 8192)
    (["--target-concurrency", 9000, "--min-kv-tokens", 0], ["above max-num-batched-tokens 8,192"]),
    # 125 M tokens x 1,490 B per logged token would be 173.4 GiB: more than all 173 GiB requested
    (["--target-concurrency", 1, "--min-kv-tokens", 125_000_000], ["< 125,000,000"]),
])
def test_recommend_says_why_nothing_fits(args, words):
    result = recommend(*args)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "No setting meets the targets" in text
    for word in words:
        assert word in text


def test_recommend_bad_input_is_one_line():
    result = recommend("--target-concurrency", 0, "--min-kv-tokens", 1)
    assert result.exit_code == 2 and result.output.strip() == "error: --target-concurrency: must be at least 1 and at most 1,048,576, got 0"


# --vary means what a recipe file means; each row is plan's; CSV and memory whatever fails ------------------------------

VARIED_KEYS = ["max-num-seqs", "max_num_seqs", "memory.weights_gib", "memory.weights_bytes", "memory.non_torch_gib",
               "memory.cudagraph_gib", "memory.cudagraph_gib.auto", "memory.cudagraph_bytes.deep_select",
               "memory.cudagraph_gib.deep_select", "memory.gpu", "memory.rest", "speculative-config",
               "speculative-config.num_speculative_tokens", "speculative_config.num_speculative_tokens",
               "compilation-config.max_cudagraph_capture_size"]
VALUES = {"memory.gpu": "B200", "memory.rest": "weights", "speculative-config": "{}", "max-num-seqs": "64"}


def as_yaml(keys: list[str]) -> str:
    """A recipe file that sets every key, nested as a file nests them: a key met twice at one level is written
    twice there, which is what a file that gives both would hold."""
    tree: list = []
    for key in keys:
        level, (*parents, leaf) = tree, key.split(".")
        for part in parents:
            node = next((child for name, child in level if name == part and isinstance(child, list)), None)
            if node is None:
                node = []
                level.append((part, node))
            level = node
        level.append((leaf, VALUES.get(key, "1")))

    def lines(level, indent):
        for name, child in level:
            yield f"{indent}{name}:" + ("" if isinstance(child, list) else f" {child}")
            if isinstance(child, list):
                yield from lines(child, indent + "  ")

    return "\n".join(lines(tree, "")) + "\n"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VARIED_KEYS), min_size=1, max_size=3))
def test_vary_refuses_exactly_the_pairs_a_recipe_file_refuses(keys):
    # `--vary memory.weights_gib=... --vary memory.weights_bytes=...` let one silently win, where a file refuses both.
    import yaml

    try:
        read_values(yaml.load(as_yaml(keys), Loader=RecipeLoader))
        twice = False
    except RecipeError as error:
        twice = "twice" in str(error)
    if twice:
        with pytest.raises(RecipeError, match="varied twice"):
            parse_varies([f"{key}=1" for key in keys])
    else:
        parse_varies([f"{key}=1" for key in keys])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from([("gpu", "H200"), ("gpu", "B200"), ("memory.weights_gib", "80"),
                                 ("memory.cudagraph_gib.auto", "0.5"), ("memory.gpu", "H200"),
                                 ("max-num-seqs", "64"), ("memory.rest", "weights")]), min_size=1, max_size=3,
                unique_by=lambda pair: pair[0]))
def test_each_sweep_row_is_what_plan_with_the_same_sets_says(pairs):
    # A point of a sweep follows every rule `plan --set` follows: same answer, or the same one-line refusal.
    recipe = ROOT / "recipes" / "deepseek-v3.2-8xh200-tp8.yaml"  # no memory block: a varied term records its GPU
    swept = cli("sweep", recipe, *(a for key, value in pairs for a in ("--vary", f"{key}={value}")), "-f", "jsonl",
                "--backend", "auto")
    [row] = [json.loads(line) for line in swept.stdout.splitlines()]
    planned = cli("plan", recipe, *(a for key, value in pairs for a in ("--set", f"{key}={value}")), "-f", "json")
    if planned.exit_code == 2:
        assert row["error"] == one_line(planned.stderr).removeprefix("error: ")
    else:
        auto = next(b for b in json.loads(planned.stdout)["backends"] if b["backend"] == "auto")
        assert row["kv_cache_tokens"] == auto["kv_cache_tokens"]


# A point re-resolves what reads its values: checked against a recipe loaded fresh at that point --------------------

# every other key at its default
DEFAULTED = {"model": "DeepSeek-V3.2", "gpu": "H200", "tensor-parallel-size": 8, "max-model-len": 1024}
# Each varied key is read by another key's default: max-num-seqs and max-num-batched-tokens by the GPU's memory tier
# (141 GiB H200: 1,024 sequences and 8,192 tokens; 180 GiB B200 from 0.28.0: 16,384 tokens) and performance-mode
# (throughput doubles both), max-num-batched-tokens by max-model-len (at most max-num-seqs x max-model-len: 1,024 x 4
# = 4,096) and by max-num-seqs once given (2 x 1,024 = 2,048: the tier's 1,024 sequences until then),
# gpu-memory-utilization and deepgemm by the release (0.90 before 0.20.0, 0.92 from it), the cache dtype run by
# kv-cache-dtype and the model, attention-backend by attention-config.backend (vllm==0.33.0
# vllm/engine/arg_utils.py:2961-2996).
POINTS = [
    {"gpu": "B200"}, {"vllm-version": "0.19.0"}, {"vllm-version": "0.27.1", "gpu": "B200"},
    {"max-model-len": 4}, {"max-model-len": 4, "max-num-seqs": 2}, {"max-num-seqs": 2},
    {"performance-mode": "throughput"}, {"performance-mode": "throughput", "gpu": "B200"},
    {"kv-cache-dtype": "fp8"}, {"attention-config.backend": "FLASHMLA_SPARSE"},
    {"engine": "deepinfer"}, {"compilation-config.cudagraph_mode": "FULL", "enforce-eager": True},
    {"model": "zai-org/GLM-5.1-FP8"}, {"model": "/models/GLM-5.2-NVFP4"},  # a catalog name; a checkpoint path
]


@pytest.mark.parametrize("point", POINTS, ids=lambda point: ",".join(point))
def test_a_point_resolves_as_a_recipe_loaded_at_it(point):
    from dsa_kvcalc import sweep
    from dsa_kvcalc.overrides import set_value
    from dsa_kvcalc.recipe import load

    base = sweep.base_of(dict(DEFAULTED), ROOT)
    raw = dict(DEFAULTED)
    for key, value in point.items():
        set_value(raw, key, value)
    try:
        fresh = load(raw, ROOT)
    except RecipeError as error:
        with pytest.raises(RecipeError, match=error.problem):
            sweep.recipe_at(base, point)
        return
    at_point = sweep.recipe_at(base, point)
    assert at_point == fresh
    assert at_point != base.recipe  # the point moves the recipe: a point that kept the base's values would fail
    if "max-num-seqs" in point or "max-model-len" in point:
        assert at_point.max_num_batched_tokens == point.get("max-num-seqs", 1_024) * point.get("max-model-len", 1_024)
    assert report.plan_json(planning.plan(at_point)) == report.plan_json(planning.plan(fresh))


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda path: path.stem)
def test_the_shape_a_point_is_compared_at_is_the_resolved_recipe_flat_in_its_order(path):
    # A point's shape is compared with the recipe its memory block was measured on, and a change of shape is named
    # key by key in resolved()'s order (Recipe.shape_change): the same keys, values and order as flatten_keys gives.
    for overrides in ([], ["max-num-seqs=3", "compilation-config.cudagraph_capture_sizes=[1,2]"]):
        recipe = load_recipe(path, overrides)
        assert list(recipe.shape.items()) == list(flatten_keys(recipe.resolved()).items())


# Memory: flat in every format, whatever fails ---------------------------------------------------------------------

failed_row = st.builds(lambda seqs, error: {"max-num-seqs": seqs, "error": error}, st.integers(), st.text(max_size=30))
planned_row = st.builds(lambda seqs, tokens: {"max-num-seqs": seqs, "backend": "auto", "available": True,
                                              "decode_logits.rows": 1, "kv_cache_tokens": tokens},
                        st.integers(), st.integers(0, 10 ** 9))
unavailable_row = st.builds(lambda seqs: {"max-num-seqs": seqs, "backend": "deep_select", "available": False,
                                          "reason": "not on SM90", "decode_logits": None}, st.integers())


def test_csv_header_is_the_fields_up_to_the_first_planned_row_then_error():
    # The header: every field of the rows up to the first available one, in order, a field with dotted children
    # (decode_logits, null where unavailable) left out, error kept; a later row's new field (extra) gets no column.
    rows = [{"max-num-seqs": 1, "error": "bad"},
            {"max-num-seqs": 2, "backend": "deep_select", "available": False, "reason": "not on SM90",
             "decode_logits": None},
            {"max-num-seqs": 3, "backend": "auto", "available": True, "decode_logits.rows": 6, "kv_cache_tokens": 7},
            {"max-num-seqs": 4, "error": "late", "extra": 1}]
    assert "".join(sweep_render.csv_lines(iter(rows))) == (
        "max-num-seqs,error,backend,available,reason,decode_logits.rows,kv_cache_tokens\n"
        "1,bad,,,,,\n2,,deep_select,False,not on SM90,,\n3,,auto,True,,6,7\n4,late,,,,,\n")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(failed_row, planned_row, unavailable_row), min_size=1, max_size=40), st.integers(1, 400))
def test_csv_rows_are_the_same_whatever_spills(rows, wait_bytes):
    whole = "".join(sweep_render.csv_lines(iter(rows)))  # WAIT_BYTES of 1 MiB: these rows never spill
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "WAIT_BYTES", wait_bytes)  # spill to disk early, or not at all
        assert "".join(sweep_render.csv_lines(iter(rows))) == whole


def peak_bytes(format: str, count: int) -> int:
    """What streaming count failed points in this format holds at most in memory."""
    rows = ({"max-num-seqs": -i, "error": f"max-num-seqs: must be at least 1 and at most 1,048,576, got -{i % 7}"}
            for i in range(count))
    chunks = {"csv": sweep_render.csv_lines, "jsonl": sweep_render.jsonl_lines,
              "table": lambda rows: console_chunks(lambda c: sweep_render.table_parts(["max-num-seqs"], rows, c))}
    tracemalloc.start()
    for _ in chunks[format](rows):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("format, rows", [("csv", 1000), ("jsonl", 1000), ("table", 40)])
def test_memory_stays_flat_in_every_format_when_every_point_fails(format, rows):
    # A sweep whose points all failed grew in CSV (every row waited for the header), not in JSONL.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweep_render, "TABLE_ROWS", 20)  # a table's memory is a part's: twenty rows show it
        patch.setattr(sweep_render, "WAIT_BYTES", 64 << 10)
        peak_bytes(format, rows)  # imports and first-use caches out of the way
        few, many = peak_bytes(format, rows), peak_bytes(format, 10 * rows)
    assert many < few * 1.5 + (512 << 10), (few, many)  # rich's caches grow up to their bound
