"""Every release threshold is a rule in engine.VLLM_RULES: no module of the package but engine.py orders versions."""

import ast
import re
from pathlib import Path

import dsa_kvcalc

PACKAGE = Path(dsa_kvcalc.__file__).parent
# What orders versions: engine.py's own helpers, and packaging's parser
ORDERING_NAMES = {"release_tuple", "Version", "parse_version"}
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
        if isinstance(node, ast.Name) and node.id in ORDERING_NAMES or \
                isinstance(node, ast.Attribute) and node.attr in ORDERING_NAMES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module in ORDERING_MODULES or \
                isinstance(node, ast.Import) and any(a.name in ORDERING_MODULES for a in node.names):
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
    # orderings of other numbers are none
    assert not comparisons("fits = tokens <= max_model_len and 0 < ratio")
    assert not comparisons("same = engine.version == MAIN")


def test_no_module_but_engine_compares_versions():
    found = {path.relative_to(PACKAGE).as_posix(): comparisons(path.read_text())
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "engine.py" or path.parent != PACKAGE}
    assert {path: lines for path, lines in found.items() if lines} == {}
