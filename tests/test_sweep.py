"""sweep and recommend: --vary parsing, rows against plan's own JSON, failure rows, the search on the seed's recipe."""

import csv
import io
import json
import sys

import pytest

from conftest import SEED, run, runner
from dsa_kvcalc.cli import app
from dsa_kvcalc.report import flatten
from dsa_kvcalc.sweep import parse_vary


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
def test_vary_values(text, values):
    assert tuple(parse_vary(text).values) == values


@pytest.mark.parametrize("vary, words", [
    ("max-num-seqs=64:1024:0", ["step must be above 0"]),
    ("max-num-seqs=1024:64:64", ["start 1024 is above stop 64"]),
    ("max-num-seqs=a:b:c", ["must be numbers"]),
    ("max-num-seqs=64:1024", ["start:stop:step"]),
    ("max-num-seqs=", ["no values"]),
    ("max-num-seqs=1,,2", ["empty value"]),
    ("max-num-seqs", ["KEY=SPEC"]),
    ("max-num-seq=1,2", ["unknown recipe key", "max-num-seq"]),
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
    for row in rows[::37]:  # 7 points spread over the product, both backends
        seqs, spec, util = (row["max-num-seqs"], row["speculative-config.num_speculative_tokens"],
                            row["gpu-memory-utilization"])
        plan = plan_backends(f"max-num-seqs={seqs}", f"speculative-config.num_speculative_tokens={spec}",
                             f"gpu-memory-utilization={util}")[row["backend"]]
        assert row == flatten("", plan, {"max-num-seqs": seqs, "speculative-config.num_speculative_tokens": spec,
                                         "gpu-memory-utilization": util})


def test_default_backends_are_the_available_ones_and_csv_matches_plan():
    result = run("sweep", SEED, "--vary", "max-num-seqs=128,256", "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.output)))
    plan = plan_backends("max-num-seqs=256")
    available = [name for name, b in plan.items() if b["available"]]
    assert "aiter" not in available  # ROCm only; the seed runs B200
    assert [row["backend"] for row in rows] == available * 2
    last = rows[-1]
    assert int(last["kv_cache_tokens"]) == plan[last["backend"]]["kv_cache_tokens"]
    assert int(last["reserved_bytes"]) == plan[last["backend"]]["reserved_bytes"]
    assert last["error"] == ""


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


def test_plot_without_matplotlib(monkeypatch, tmp_path):
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
    assert "Recommended: max-num-seqs 456, speculative-config.num_speculative_tokens 5, " \
           "sparse-indexer-topk-backend deep_select" in text
    # By hand: a B200 has 182,631 MiB = 191,503,908,864 B; at utilisation 0.97 an unfixed vLLM leaves
    # 191,503,908,864 - ceil(0.97 x 191,503,908,864) = 5,745,117,265 B free. A decode of 1 + 5 rows at 1,049,088
    # BF16 columns takes 12,589,056 B with deep_select (456.4 fit) and 37,767,168 B with the FP32 copy (152.1 fit).
    assert "at 457: OOM risk on vLLM 0.33.0 (no #62860)" in text and "logits of 456 decodes" in text
    assert "already at 256: OOM risk on vLLM 0.33.0 (no #62860)" in text and "logits of 152 decodes" in text


def test_recommend_trades_spec_tokens_for_sequences():
    result = recommend("--target-concurrency", 128, "--min-kv-tokens", 1_000_000, "--backend", "auto",
                       "--backend", "deep_select", "--max-spec-tokens", 5)
    text = " ".join(result.output.split())
    # Fewer spec tokens, fewer rows per decode: with none, a decode's logits are 1 x 1,049,088 x 2 B and 456 x 6
    # = 2,736 would fit the OOM bound (5,745,117,265 B / 2,098,176 B = 2,738.1), so spec 0 allows the most sequences.
    assert "Recommended: max-num-seqs 2738, speculative-config.num_speculative_tokens 0, " \
           "sparse-indexer-topk-backend deep_select" in text
    assert "auto │ 5 │ 152 │" in text  # the seed's setting, unfixed: 152 decodes


def test_recommend_stops_where_the_kv_target_binds(tmp_path):
    # On vLLM main (#62860), ask for exactly the KV tokens plan gives deep_select at max-num-seqs 400 (below its OOM
    # bound of 456): one more sequence reserves more decode logits, leaving fewer tokens.
    fixed = tmp_path / "seed-main.yaml"
    fixed.write_text(SEED.read_text() + "vllm-version: main\n")
    tokens = plan_backends("max-num-seqs=400", "vllm-version=main")["deep_select"]["kv_cache_tokens"]
    assert tokens > plan_backends("max-num-seqs=401", "vllm-version=main")["deep_select"]["kv_cache_tokens"]
    result = runner.invoke(app, ["recommend", str(fixed), "--target-concurrency", "64", "--min-kv-tokens", str(tokens),
                                 "--backend", "deep_select"], env={"COLUMNS": "250"})
    text = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "Recommended: max-num-seqs 400," in text
    assert "One more sequence fails: KV cache" in text and f"< {tokens:,}" in text


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
