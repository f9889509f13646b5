"""capacity.py and the KV-cache modules are arithmetic on values (docs/ARCHITECTURE.md): they import nothing of the
recipe layer, raise nothing, take no recipe, and read no release version, only the values of its rules. What a recipe
means is decided before them: recipe.load() validates it, deployment.resolve() decides and refuses, planning.py walks
it through; these checks read their source, so that a later edit cannot quietly reach back."""

import ast
from pathlib import Path

import pytest

import dsa_kvcalc
from dsa_kvcalc import capacity, planning
from dsa_kvcalc.deployment import resolve
from dsa_kvcalc.keys import Refusal
from dsa_kvcalc.memory_terms import rank_memory
from dsa_kvcalc.recipe import load

PACKAGE = Path(dsa_kvcalc.__file__).parent
ARITHMETIC = [PACKAGE / "capacity.py", *sorted((PACKAGE / "kv_cache").glob("*.py"))]
# The recipe layer: the keys and their values, loading and defaults, vLLM's arguments, the release rules' table (its
# values reach the arithmetic through Deployment and CacheConfig), and the walk that calls the arithmetic
RECIPE_LAYER = {"keys", "recipe", "values", "defaults", "engine", "vllm_args", "vllm_cli", "vllm_config", "inputs",
                "hf_config", "planning", "report"}
VERSION_READS = {"version", "vllm_version", "label", "parsed", "first_release"}  # BackendPlan.release is a Sizing


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def imported(path: Path) -> set[str]:
    """The package modules a file imports, by their last name (dsa_kvcalc.engine and `from dsa_kvcalc import engine`
    alike)."""
    found = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dsa_kvcalc"):
            found.add(node.module.split(".")[-1])
            if node.module == "dsa_kvcalc":
                found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[-1] for alias in node.names if alias.name.startswith("dsa_kvcalc")}
    return found


@pytest.mark.parametrize("path", ARITHMETIC, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_arithmetic_imports_nothing_of_the_recipe_layer(path):
    assert imported(path) & RECIPE_LAYER == set()


@pytest.mark.parametrize("path", ARITHMETIC, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_arithmetic_raises_nothing(path):
    raises = [node.lineno for node in ast.walk(tree(path)) if isinstance(node, ast.Raise)]
    assert raises == []


@pytest.mark.parametrize("path", ARITHMETIC, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_arithmetic_takes_no_recipe_and_reads_no_version(path):
    parameters = {arg.arg for node in ast.walk(tree(path)) if isinstance(node, ast.FunctionDef)
                  for arg in node.args.args}
    names = {node.id for node in ast.walk(tree(path)) if isinstance(node, ast.Name)}
    attributes = {node.attr for node in ast.walk(tree(path)) if isinstance(node, ast.Attribute)}
    assert "recipe" not in parameters and "Recipe" not in names
    assert attributes & VERSION_READS == set()


def test_capacity_passes_the_recipe_on_to_the_report_and_reads_nothing_of_it():
    # Plan.recipe hands the recipe to the report; no other line of capacity.py reads the deployment's recipe
    reads = [node.lineno for node in ast.walk(tree(PACKAGE / "capacity.py"))
             if isinstance(node, ast.Attribute) and node.attr == "recipe"]
    plan_recipe = next(node for node in ast.walk(tree(PACKAGE / "capacity.py"))
                       if isinstance(node, ast.FunctionDef) and node.name == "recipe")
    assert reads == [n.lineno for n in ast.walk(plan_recipe) if isinstance(n, ast.Attribute) and n.attr == "recipe"]


def test_a_recipe_whose_weights_leave_no_room_is_refused_before_the_arithmetic():
    # DeepSeek-V3.2 on one H100: 630 GiB of weights against 80 GB. capacity.plan itself has nothing to refuse: it
    # counts a KV cache of 0 bytes; planning.plan refuses the start as vLLM does (no memory for the cache blocks).
    recipe = load({"model": "DeepSeek-V3.2", "gpu": "H100"})
    deployment = resolve(recipe)
    memory = rank_memory(deployment)
    assert capacity.plan(deployment, memory).backend("auto").kv_cache_bytes == 0
    with pytest.raises(Refusal, match="GiB of weights per rank"):
        planning.plan(recipe)
