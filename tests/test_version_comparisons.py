"""Every release threshold is a rule in engine.VLLM_RULES: no module of the package but engine.py orders versions, and
engine.py orders them as PEP 440 does (packaging.version). The oracle keeps its own thresholds (it imports nothing of
the project: tests/test_oracle_inputs.py) and orders them with packaging.version too, never by reading digits."""

import ast
import json
import re
import sys
from pathlib import Path

import pytest

import dsa_kvcalc
from conftest import ROOT
from dsa_kvcalc import engine

sys.path.insert(0, str(ROOT / "oracle"))

import families  # noqa: E402

PACKAGE = Path(dsa_kvcalc.__file__).parent
# What orders versions: engine.py's own helpers, and packaging's parser ("parsed" as a plain name is also a common
# variable name: it counts imported or as engine.parsed)
ORDERING_NAMES = {"parsed", "release_tuple", "Version", "parse_version"}
ORDERING_MODULES = {"packaging", "packaging.version"}
VERSION_TEXT = re.compile(r"\d+\.\d+(\.\d+)?([a-z]+\d*)?")
ORDERS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def version_literal(node: ast.AST) -> bool:
    """'0.27.0', or a tuple of whole numbers such as (0, 27, 0)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and VERSION_TEXT.fullmatch(node.value) is not None
    return isinstance(node, ast.Tuple) and len(node.elts) > 1 and all(
        isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts)


def version_operand(node: ast.AST) -> bool:
    """A version literal, or an expression that reads a version (x.version, vllm_version, release)."""
    if version_literal(node):
        return True
    names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return any("version" in name or name in ("release", "first_release") for name in names)


def comparisons(source: str) -> list[str]:
    """Each place the source orders versions: a use of an ordering helper or of packaging.version, or <, <=, >, >=
    with a version (literal or read) on one side."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in ORDERING_NAMES - {"parsed"} or \
                isinstance(node, ast.Attribute) and node.attr in ORDERING_NAMES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module in ORDERING_MODULES or \
                isinstance(node, ast.Import) and any(a.name in ORDERING_MODULES for a in node.names) or \
                isinstance(node, ast.ImportFrom) and any(a.name in ORDERING_NAMES for a in node.names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Compare) and any(isinstance(op, ORDERS) for op in node.ops) and any(
                version_operand(operand) for operand in [node.left, *node.comparators]):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_each_kind_of_version_comparison():
    # what the package did before the rules held every threshold (kv_cache.py, defaults.py, build_of, recipe.py)
    assert comparisons("mxfp4 = release_tuple(v) >= release_tuple(V4_MXFP4_INDEXER_FROM)")
    assert comparisons("ok = engine.version >= '0.27.0'")
    assert comparisons("old = release_tuple(version)[:2] > (0, 1)")
    assert comparisons("first = version < model.first_release")
    assert comparisons("from packaging.version import Version")
    assert comparisons("import packaging.version")
    assert comparisons("newer = Version(a) > Version(b)")
    assert comparisons("from dsa_kvcalc.engine import parsed") and comparisons("key = engines.parsed(v)")
    # orderings of other numbers are none
    assert not comparisons("fits = tokens <= max_model_len and 0 < ratio")
    assert not comparisons("same = engine.version == MAIN")


def version_object(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Version"


def by_hand(node: ast.AST) -> bool:
    """A hand-made parser's name (release_tuple), or an ordering or match of versions whose sides are not all
    packaging.version.Version objects (a tuple of whole numbers, a version's text)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return "release_tuple" in (getattr(node, "id", None), getattr(node, "attr", None))
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    ordered = any(isinstance(op, ORDERS) for op in node.ops) and any(version_operand(o) for o in operands)
    matched = any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops) and any(version_literal(o) for o in operands)
    return (ordered or matched) and not all(version_object(o) for o in operands)


def compared_by_hand(source: str) -> list[str]:
    return [f"{node.lineno}: {ast.unparse(node)}" for node in ast.walk(ast.parse(source)) if by_hand(node)]


def test_the_oracle_scan_finds_versions_compared_by_hand():
    # what oracle/ did before: stub_harness.release_tuple read the digits, so 0.24.0rc1 raised and 0.30.0.post1 was
    # not 0.30.0
    assert compared_by_hand("old = stub_harness.release_tuple(release) < (0, 24, 0)")
    assert compared_by_hand("nvidia = serving['release'] == '0.30.0'")
    assert compared_by_hand("new = version >= '0.32.0'")
    assert not compared_by_hand("old = Version(release) < Version('0.24.0') or layer >= layers")


def test_the_oracle_orders_versions_with_packaging_only():
    found = {path.name: compared_by_hand(path.read_text()) for path in sorted((ROOT / "oracle").glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_the_oracle_reads_a_release_candidate_as_the_release_before():
    # GLM-5.2's config (oracle/configs/zai-org--GLM-5.2-FP8.json: index_topk_freq 4, index_skip_topk_offset 3). From
    # vllm==0.24.0 a layer whose top-k is skipped builds no Indexer: layer 5, max(5 - 3 + 1, 0) % 4 = 3, skips; layer
    # 6, 4 % 4 = 0, keeps it (vllm==0.24.0 vllm/model_executor/models/deepseek_v2.py:1000-1050). Before 0.24.0 every
    # layer builds one (vllm==0.23.0 vllm/model_executor/models/deepseek_v2.py:1009). PEP 440: 0.24.0rc1 < 0.24.0 <
    # 0.24.0.post1
    hf = json.loads((ROOT / "oracle" / "configs" / "zai-org--GLM-5.2-FP8.json").read_text())
    assert not families.owns_indexer("0.24.0", 5, hf) and families.owns_indexer("0.24.0", 6, hf)
    assert families.owns_indexer("0.23.0", 5, hf) and families.owns_indexer("0.24.0rc1", 5, hf)
    assert not families.owns_indexer("0.24.0.post1", 5, hf)


def test_no_module_but_engine_compares_versions():
    found = {path.relative_to(PACKAGE).as_posix(): comparisons(path.read_text())
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "engine.py" or path.parent != PACKAGE}
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_versions_order_as_pep_440_says():
    # packaging.version (PEP 440, "Summary of permitted suffixes and relative ordering"): .devN < aN < bN < rcN <
    # the release < .postN; release segments compare as numbers; trailing zeros are equal; a local label (+...)
    # sorts after its public version and before any later one
    assert engine.parsed("0.31.1.dev3") < engine.parsed("0.31.1rc1") < engine.parsed("0.31.1")
    assert engine.parsed("0.31.1") < engine.parsed("0.31.1.post1") < engine.parsed("0.31.2.dev0")
    assert engine.parsed("0.9.0") < engine.parsed("0.10.0") and engine.parsed("0.30") == engine.parsed("0.30.0")
    assert engine.parsed("0.33.0") < engine.parsed("main") < engine.parsed("0.33.0.post1") < engine.parsed("0.34.0")
    assert engine.parsed("0.33.0+gdeadbee1") == engine.parsed("0.33.0")  # build_of reads the commit, not the order


def test_a_release_candidate_takes_the_rules_of_the_release_before():
    # gpu_memory_utilization's default: 0.9 in vllm==0.19.1 vllm/config/cache.py:41, 0.92 from vllm==0.20.0 :66. A
    # 0.20.0rc1 or 0.20.0.dev4 comes before 0.20.0 (the digits alone read them as 0.20.0); a 0.20.0.post1 after it.
    assert engine.vllm("0.20.0rc1").default_gpu_memory_utilization == 0.90
    assert engine.vllm("0.20.0.dev4").default_gpu_memory_utilization == 0.90
    assert engine.vllm("0.20.0").default_gpu_memory_utilization == 0.92
    assert engine.vllm("0.20.0.post1").default_gpu_memory_utilization == 0.92
    assert engine.release_of("0.31.1rc1") == "0.31.0" and engine.release_of("0.31.1") == "0.31.0"
    assert engine.release_of("0.32.0rc2") == "0.31.0" and engine.release_of("main") == engine.NEWEST_VLLM


def test_main_takes_its_own_change_and_a_newer_release_the_newest_rules():
    # main's one change: vLLM PR #62860 reserves the decode logits; 0.34.0 is newer than modelled: 0.33.0's rules
    assert engine.vllm("main").reserves_decode_logits and not engine.vllm("0.33.0").reserves_decode_logits
    assert not engine.vllm("0.34.0").reserves_decode_logits and engine.vllm("0.34.0").newer_than_modelled
    assert not engine.vllm("0.33.0.dev7").newer_than_modelled and not engine.vllm("main").newer_than_modelled


def test_a_dev_build_is_the_release_its_commit_names():
    # vllm==0.20.1 and vllm==0.33.0 vllm/_version.py __commit_id__ (engine.RELEASE_COMMITS): 132765e35, 4ba787ec9
    assert engine.build_of("0.20.1.dev1+g132765e35") == "0.20.1"
    assert engine.build_of("0.1.dev7+g4ba787ec9") == "0.33.0"
    assert engine.build_of("0.34.0.dev12+g317081f00") == "main"
    assert engine.build_of("0.31.1rc1") == "0.31.1rc1"  # no commit: its number, which takes 0.31.0's rules
    with pytest.raises(ValueError, match="Invalid version"):
        engine.build_of("0.30-custom_build")
