"""Every test checks something: each test function in tests/ holds an assert that is not a constant, or a
pytest.raises, pytest.warns or pytest.fail, itself or in a helper of tests/ it calls (its own module's, or one it
imports from conftest.py and the other helper modules), however deep. A test that only runs code passes whatever the
code answers, short of an exception."""

import ast
from pathlib import Path

TESTS = Path(__file__).parent
CHECKS = {"raises", "warns", "fail"}  # pytest.raises(...), pytest.warns(...), pytest.fail(...)


def called_name(call: ast.Call) -> str | None:
    """f(...) -> 'f', pytest.raises(...) -> 'raises'; anything else (a method of an object) -> None."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    function = call.func
    if isinstance(function, ast.Attribute) and isinstance(function.value, ast.Name) and function.value.id == "pytest":
        return function.attr
    return None


def checks_itself(function: ast.FunctionDef) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert) and not isinstance(node.test, ast.Constant):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CHECKS and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest":
            return True
    return False


def helpers(sources: dict[str, str]) -> dict[str, dict[str, tuple[str, ast.FunctionDef]]]:
    """Per module of tests/ (by its name), the functions it can call by a bare name, each with the module that defines
    it: its own top-level ones, and those it imports from another module of tests/."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    own = {name: {n.name: (name, n) for n in tree.body if isinstance(n, ast.FunctionDef)}
           for name, tree in trees.items()}
    visible = {}
    for name, tree in trees.items():
        visible[name] = dict(own[name])
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module in own:
                for alias in node.names:
                    if alias.name in own[node.module]:
                        visible[name][alias.asname or alias.name] = own[node.module][alias.name]
    return visible


def unchecked(sources: dict[str, str]) -> list[str]:
    """module:test for each test function of the test_*.py modules that checks nothing, itself or through a helper."""
    visible = helpers(sources)
    known: dict[int, bool] = {}

    def checks(function: ast.FunctionDef, module: str) -> bool:
        if id(function) not in known:
            known[id(function)] = False  # a helper that calls itself checks only if it checks elsewhere
            names = visible[module]
            known[id(function)] = checks_itself(function) or any(
                checks(names[called][1], names[called][0]) for node in ast.walk(function)
                if isinstance(node, ast.Call) and (called := called_name(node)) in names)
        return known[id(function)]

    found = []
    for module, text in sources.items():
        if not module.startswith("test_"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test") and not checks(node, module):
                found.append(f"{module}:{node.name}")
    return found


def test_every_test_function_asserts_or_checks_a_raise():
    sources = {path.stem: path.read_text() for path in sorted(TESTS.glob("*.py"))}
    assert unchecked(sources) == []


def test_the_scan_tells_a_test_that_only_runs_code_from_one_that_checks():
    # hand-written modules: what each test does is in its name
    helper = "def check(x):\n    assert x > 0\n\ndef relay(x):\n    check(x)\n\ndef quiet(x):\n    return x\n"
    tests = ("from helper import relay, quiet\nimport pytest\n\n"
             "def test_runs_only():\n    quiet(1)\n\n"
             "def test_asserts_a_constant():\n    assert True\n\n"
             "def test_calls_a_method_of_the_same_name():\n    thing.relay(1)\n\n"
             "def test_asserts():\n    assert quiet(1) == 1\n\n"
             "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n\n"
             "def test_through_two_helpers():\n    relay(1)\n\n"
             "def test_fails_on_purpose():\n    pytest.fail('no')\n")
    assert unchecked({"helper": helper, "test_sample": tests}) == [
        "test_sample:test_runs_only", "test_sample:test_asserts_a_constant",
        "test_sample:test_calls_a_method_of_the_same_name"]
