"""The oracle reads nothing of plan but the KV memory it is asked to split (oracle/cases.py's docstring): its side
(harness.py, emulation.py, capture_sizes.py) imports nothing of the project, and each case it is given holds what a
user gives `vllm serve` as the recipe writes it, and plan's KV memory. Runs without the oracle set up."""

import ast
import json
import sys

import yaml

from conftest import ROOT, RECIPES

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402

COMPARISON_SIDE = ("cases.py", "table.py")
# every file of oracle/ but the comparison side: the KV-cache oracle (harness.py, emulation.py), capture_sizes.py, and
# the stand-in harness the weights, KV-init-buffer and graph-estimate oracles run on
ORACLE_SIDE = sorted(path.name for path in (ROOT / "oracle").glob("*.py") if path.name not in COMPARISON_SIDE)
PROJECT = ("dsa_kvcalc", "cases", "table", "conftest")
CASE_KEYS = {"name", "model", "gpu", "args", "env", "kv_cache_bytes"}


def imported(path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_the_oracle_side_imports_nothing_of_the_project():
    assert {"harness.py", "emulation.py", "capture_sizes.py", "weights.py", "kv_init_buffers.py"} <= set(ORACLE_SIDE)
    for name in ORACLE_SIDE:
        found = {module for module in imported(ROOT / "oracle" / name) if module.split(".")[0] in PROJECT}
        assert not found, (name, found)
        assert "dsa_kvcalc" not in (ROOT / "oracle" / name).read_text(), name


def test_a_bundled_recipes_case_holds_its_vllm_arguments_as_the_file_writes_them():
    # read here with plain YAML: the model and GPU by name, every other key but dsa-kvcalc's own as written
    own = {"model", "gpu", "engine", "vllm-version", "deepgemm", "memory", "env"}
    for path in sorted(RECIPES.glob("*.yaml")):
        written = yaml.safe_load(path.read_text())
        point = next(p for p in cases.points(["0.33.0"], [path.stem]))
        assert set(point.case) == CASE_KEYS
        assert point.case["args"] == {k: v for k, v in written.items() if k.replace("_", "-") not in own}
        assert point.case["model"].endswith(written["model"].split("/")[-1]) and point.case["gpu"] == written["gpu"]
        assert point.case["kv_cache_bytes"] == point.plan["kv_bytes"]  # the one figure of plan's


def test_a_records_case_splits_the_memory_its_log_printed():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_records import RECORDS

    record = RECORDS[0]
    point = next(p for p in cases.points(["0.33.0"], [record.name]))
    assert point.case["kv_cache_bytes"] == round(record.available_gib * (1 << 30))


def test_every_case_is_json_and_holds_only_the_users_inputs():
    points = cases.points(["0.33.0"]) + cases.generated_points(40)
    for point in points:
        if point.case is None:
            continue
        json.dumps(point.case)
        assert set(point.case) == CASE_KEYS, point.name
        if point.name.startswith("probe"):  # a probe gives no batch limit: none reaches vLLM
            assert not {"max-num-seqs", "max-num-batched-tokens"} & set(point.case["args"]), point.name


def test_a_case_plan_refuses_is_given_no_memory_of_plans():
    point = next(p for p in cases.generated_points(240) if p.case is not None and "refusal" in p.plan
                 and "kv_bytes" not in p.plan)
    assert point.case["kv_cache_bytes"] is None


def test_the_generator_draws_the_same_cases_every_run_across_the_space():
    first, second = cases.generated(60), cases.generated(60)
    assert first == second
    drawn = [raw for _, _, raw in cases.generated(240)]
    assert {cases.find_model(raw["model"], ROOT)[0].family for raw in drawn} == {"mla", "deepseek_v4", "deepseek_v41",
                                                                              "glm5next"}
    assert {release for release, _, _ in cases.generated(240)} == set(cases.GENERATED_RELEASES)
    for key in ("pipeline-parallel-size", "decode-context-parallel-size", "data-parallel-size",
                "enable-expert-parallel", "speculative-config", "kv-cache-dtype", "attention-config", "max-num-seqs"):
        assert any(key in raw for raw in drawn), key
    assert any(raw.get("max-model-len", 0) % 2 for raw in drawn)
