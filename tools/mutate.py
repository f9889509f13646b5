"""Mutation testing of the domain modules: change one constant, boundary or comparison, and some test must fail.

For each target module the source is parsed with `ast` and every single-point mutant generated (the mutations below);
each mutant is written into a private copy of the repository (never the checkout), where a server that has imported
pytest and its plugins once forks a fresh child per run. The tests run in stages, each stopping at its first failure:
tests/test_MODULE.py and the other files that pin the module's rules, the other fast files, then (unless --fast-only)
the slow ones, so that a mutant reported as surviving has passed the whole suite. Results are appended to a JSON-lines file,
one line a mutant, so that a run can be stopped, resumed, sharded (--shard i/n) and summarised later.

    python3 tools/mutate.py                                  # every module, 2 jobs, results in /tmp
    python3 tools/mutate.py --module engine --module capacity --jobs 2
    python3 tools/mutate.py --summary                        # the results so far
    python3 tools/mutate.py --list --module kv_cache.grouping   # the mutants, without running them
    python3 tools/mutate.py --sample 7 --module engine --module fixes   # about 7 of each module, evenly spaced
    python3 tools/mutate.py --at 4fc62cc --fast-only --results BEFORE.jsonl   # the package and tests of a commit
    python3 tools/mutate.py --retest survived --base BEFORE.jsonl --results AFTER.jsonl   # the survivors, again

Mutations (skipping docstrings, f-strings, decorators, string constants other than release strings, and type
annotations): numbers n -> n + 1 and n - 1 (floats x 1.01); comparisons < <= > >= to their boundary neighbour and
their negation, == <-> !=, in <-> not in, is <-> is not; True <-> False; and <-> or; + <-> -, * -> //, // -> * and /,
/ -> //; min <-> max; a release string ("0.28.0": a rule's first release) -> the previous and the next release;
`return x` in a function returning bool -> `return not x`; each `if` and conditional expression's test -> True and
-> False.

Mutants that change no output are listed, with the reason, in tools/mutants_equivalent.json; the summary counts them
apart.
"""

import argparse
import ast
import concurrent.futures
import copy
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dsa_kvcalc"
# A module of a subpackage is named with a dot (kv_cache.grouping: dsa_kvcalc/kv_cache/grouping.py), the subpackage's
# own name standing for its __init__.py (kv_cache: dsa_kvcalc/kv_cache/__init__.py).
MODULES = ("engine", "deployment", "capacity", "kv_cache", "kv_cache.pages", "kv_cache.mla", "kv_cache.deepseek_v4",
           "kv_cache.deepseek_v41", "kv_cache.glm5next", "kv_cache.grouping", "memory_terms", "defaults", "estimates",
           "catalog", "calibrate", "vllm_log", "kv_init_buffers", "weights", "fits", "uncertainty", "fixes", "graphs",
           "report", "vllm_args", "vllm_cli", "planning")
EQUIVALENT = Path(__file__).resolve().parent / "mutants_equivalent.json"
RESULTS = Path(tempfile.gettempdir()) / "dsa-kvcalc-mutants.jsonl"
# Files the fast stages leave to the last one: seconds each (CLI subprocesses, hypothesis, FIFOs), about 45 s in all;
# vLLM's own planner (about 60 s, where oracle/setup.sh set it up), capture sizes (about 100 s) and argument parser
# (about 35 s) as well, the corpus of real launch commands (about 15 s) and vLLM's own KV-init buffers (about 100 s).
SLOW_TESTS = ("test_bad_input.py", "test_files_and_streams.py",
              "test_vllm_oracle.py", "test_vllm_args.py", "test_vllm_capture_sizes.py", "test_command_corpus.py",
              "test_vllm_kv_init_buffers.py", "test_vllm_cudagraph_estimate.py")
# The files that pin each module's rules (tests/test_MODULE.py first), run first so that most mutants die
# within a second or two.
FIRST_TESTS = {
    "engine": ("test_rule_changes.py", "test_vllm_versions.py", "test_release_rules.py", "test_kv_cache.py"),
    "deployment": ("test_release_rules.py", "test_capacity.py", "test_seed.py"),
    "capacity": ("test_release_rules.py", "test_seed.py"),
    "kv_cache": (),
    "kv_cache.pages": ("test_kv_cache.py",),
    "kv_cache.mla": ("test_kv_cache.py",),
    "kv_cache.deepseek_v4": ("test_kv_cache.py",),
    "kv_cache.deepseek_v41": ("test_kv_cache.py",),
    "kv_cache.glm5next": ("test_glm53.py", "test_kv_cache.py"),
    "kv_cache.grouping": ("test_kv_cache.py",),
    "memory_terms": ("test_capacity.py", "test_kv_cache.py", "test_seed.py"),
    "defaults": ("test_release_rules.py", "test_capacity.py", "test_records.py", "test_seed.py"),
    "estimates": ("test_capacity.py", "test_weights.py", "test_leave_one_out.py", "test_release_rules.py"),
    "weights": ("test_catalog.py", "test_leave_one_out.py"),
    "fits": ("test_leave_one_out.py", "test_capacity.py"),
    "uncertainty": ("test_leave_one_out.py",),
    "catalog": ("test_seed.py", "test_release_rules.py"),
    "calibrate": (),
    "vllm_log": ("test_calibrate.py",),
    "kv_init_buffers": (),
    "fixes": ("test_oom_fixes.py", "test_seed.py", "test_capacity.py"),
    "graphs": ("test_cudagraph_estimate.py", "test_capacity.py", "test_release_rules.py"),
    "report": ("test_contracts.py", "test_capacity.py", "test_cli.py", "test_sweep_output.py"),
    "vllm_args": ("test_serve_lines.py", "test_vllm_args.py", "test_command_corpus.py"),
    "vllm_cli": ("test_serve_lines.py", "test_vllm_args.py", "test_command_corpus.py"),
    "planning": ("test_capacity.py", "test_release_rules.py", "test_seed.py"),
}
FAST_TIMEOUT = 1200  # the fast files take about 60 s on a quiet machine, over 480 s beside three other agents (2026-12-02)
FULL_TIMEOUT = 500  # the slow files about 140 s

NEIGHBOURS = {
    ast.Lt: (ast.LtE, ast.GtE), ast.LtE: (ast.Lt, ast.Gt), ast.Gt: (ast.GtE, ast.LtE), ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,), ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
}
ARITHMETIC = {ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv,), ast.FloorDiv: (ast.Mult, ast.Div),
              ast.Div: (ast.FloorDiv,)}
SYMBOLS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
           ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
           ast.FloorDiv: "//", ast.Div: "/", ast.And: "and", ast.Or: "or"}


@dataclass(frozen=True)
class Mutant:
    module: str
    node: int  # the node's index in ast.walk order of the parsed module
    kind: str
    change: object  # what apply() sets: a value, an operator's name, a bool
    line: int
    col: int
    original: str
    mutant: str
    code: str  # the source line, stripped: how tools/mutants_equivalent.json names it

    @property
    def id(self) -> str:
        return mutant_id(asdict(self))

    @property
    def where(self) -> str:
        return f"{source_path(self.module)}:{self.line}"


def mutant_id(record: dict) -> str:
    """What a mutant is, whatever its description: the node (in ast.walk order), the kind and the change."""
    return f"{record['module']}:{record['node']}:{record['kind']}:{json.dumps(record['change'])}"


def source_path(module: str) -> str:
    """The module's file, from the repository root (MODULES says how a name reads)."""
    path = module.replace(".", "/")
    return f"dsa_kvcalc/{path}/__init__.py" if (PACKAGE / path).is_dir() else f"dsa_kvcalc/{path}.py"


def module_source(module: str, rev: str | None = None) -> str:
    """The module as the checkout has it, or as it was at a commit."""
    if rev is None:
        return (ROOT / source_path(module)).read_text()
    return subprocess.run(["git", "show", f"{rev}:{source_path(module)}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def releases() -> list[str]:
    """engine.RELEASES, read from the source (the tool imports nothing of the package)."""
    tree = ast.parse(module_source("engine"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RELEASE_COMMITS":
            return list(ast.literal_eval(node.value))
    raise SystemExit("engine.py has no RELEASE_COMMITS")


def skipped_nodes(tree: ast.Module) -> set[int]:
    """Nodes no mutant touches: docstrings, f-strings (message text), annotations, decorators, the release table."""
    roots = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                roots.append(first)
        if isinstance(node, ast.JoinedStr):
            roots.append(node)
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        if isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            roots += node.decorator_list  # @dataclass(frozen=True): the class's machinery, not a rule
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RELEASE_COMMITS":
            roots.append(node)
    return {id(n) for root in roots for n in ast.walk(root)}


def bool_returns(tree: ast.Module) -> set[int]:
    """The return statements of functions annotated `-> bool` (not those of functions nested in them)."""
    found = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef) and isinstance(function.returns, ast.Name) and \
                function.returns.id == "bool":
            stack = list(function.body)
            while stack:
                node = stack.pop()
                if isinstance(node, ast.Return) and node.value is not None:
                    found.add(id(node))
                if not isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ClassDef)):
                    stack.extend(ast.iter_child_nodes(node))
    return found


def short(node: ast.AST, width: int = 90) -> str:
    text = ast.unparse(node)
    return text if len(text) <= width else text[:width - 3] + "..."


def operation(left: ast.AST, op: type, right: ast.AST) -> str:
    """`left OP right`, each side cut short apart (in parentheses where it is an operation), so that the operator
    always shows."""
    def side(node):
        text = short(node, 40)
        return f"({text})" if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp)) else text
    return f"{side(left)} {SYMBOLS[op]} {side(right)}"


def mutants(module: str, source: str, known_releases: list[str]) -> list[Mutant]:
    tree = ast.parse(source)
    lines = source.splitlines()
    skip, returns = skipped_nodes(tree), bool_returns(tree)
    found = []

    def add(index, node, kind, change, original, mutated):
        found.append(Mutant(module, index, kind, change, node.lineno, node.col_offset, original, mutated,
                            lines[node.lineno - 1].strip()))

    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                add(index, node, "bool", not value, repr(value), repr(not value))
            elif isinstance(value, int):
                for other in dict.fromkeys((value + 1, value - 1)):
                    add(index, node, "number", other, repr(value), repr(other))
            elif isinstance(value, float) and value:
                add(index, node, "number", value * 1.01, repr(value), repr(value * 1.01))
            elif isinstance(value, str) and value in known_releases:
                at = known_releases.index(value)
                for other in (known_releases[at - 1] if at else None,
                              known_releases[at + 1] if at + 1 < len(known_releases) else None):
                    if other:
                        add(index, node, "release", other, repr(value), repr(other))
        elif isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                left, right = ([node.left] + node.comparators)[j], node.comparators[j]
                for other in NEIGHBOURS[type(op)]:
                    add(index, node, "compare", (j, other.__name__), operation(left, type(op), right),
                        operation(left, other, right))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or if isinstance(node.op, ast.And) else ast.And
            add(index, node, "boolop", other.__name__, f" {SYMBOLS[type(node.op)]} ".join(short(v, 40) for v in node.values),
                f" {SYMBOLS[other]} ".join(short(v, 40) for v in node.values))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITHMETIC:
            left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            for other in ARITHMETIC[type(node.op)]:
                add(index, node, "arithmetic", other.__name__, operation(left, type(node.op), right),
                    operation(left, other, right))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            other = "max" if node.func.id == "min" else "min"
            mutated = copy.deepcopy(node)
            mutated.func.id = other
            add(index, node, "minmax", other, short(node), short(mutated))
        elif isinstance(node, ast.Return) and id(node) in returns:
            add(index, node, "not", None, short(node), f"return not ({short(node.value)})")
        elif isinstance(node, (ast.If, ast.IfExp)):
            test = short(node.test)
            for value in (True, False):
                add(index, node, "if", value, f"if {test}", f"if {value}")
    return found


def apply(source: str, mutant: Mutant) -> str:
    """The source with the mutant's one node rewritten in place: everything else, comments included, as it was
    (tools/vllm_versions_doc.py reads the comments on engine.Engine's fields)."""
    tree = ast.parse(source)
    node = list(ast.walk(tree))[mutant.node]
    kind, change = mutant.kind, mutant.change
    target = node.test if kind == "if" else node.value if kind == "not" else node  # the part rewritten
    start, end = (target.lineno, target.col_offset), (target.end_lineno, target.end_col_offset)
    replacement = node
    if kind in ("bool", "number", "release"):
        node.value = change
    elif kind == "compare":
        j, name = change
        node.ops[j] = getattr(ast, name)()
    elif kind in ("boolop", "arithmetic"):
        node.op = getattr(ast, change)()
    elif kind == "minmax":
        node.func.id = change
    elif kind == "not":
        replacement = ast.UnaryOp(ast.Not(), node.value)
    elif kind == "if":
        replacement = ast.Constant(change)
    text = ast.unparse(replacement)
    text = text if isinstance(replacement, ast.stmt) else f"({text})"
    data = source.encode()  # ast's columns count UTF-8 bytes
    lines = data.splitlines(keepends=True)

    def offset(position: tuple[int, int]) -> int:
        return sum(map(len, lines[:position[0] - 1])) + position[1]

    return (data[:offset(start)] + text.encode() + data[offset(end):]).decode()


# Runs in each workspace under the interpreter with pytest: imports what every test run imports (pytest and its
# plugins, typer, rich, hypothesis: over a second a run) once, then forks a child for each run, which imports the
# package from the workspace. The parent never imports dsa_kvcalc.
SERVER = r"""
import json, os, signal, sys
import pytest, hypothesis, hypothesis.strategies, jsonschema, yaml, typer, typer.testing, rich.console
for line in sys.stdin:
    job = json.loads(line)
    out = os.open(job["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        # a tool started in the background (nohup, &) ignores SIGINT, SIGQUIT and SIGHUP, and so would the tests'
        # own children: tests/test_files_and_streams.py signals them
        for name in ("SIGHUP", "SIGQUIT", "SIGTERM"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.chdir(job["cwd"])
        sys.path.insert(0, job["cwd"])
        os.environ.update(job["env"])
        code = pytest.main(job["args"])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    os.close(out)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class Workspace:
    """A private copy of the repository (tracked and untracked, not ignored, files) where mutants are written, and
    its test server."""

    def __init__(self, tests_from: str | None = None, package_from: str | None = None):
        self.path = Path(tempfile.mkdtemp(prefix="dsa-kvcalc-mutant-"))
        names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, check=True).stdout.decode().split("\0")
        for name in filter(None, names):
            source, target = ROOT / name, self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():  # recipes -> dsa_kvcalc/recipes
                target.symlink_to(os.readlink(source))
            elif source.is_file():
                shutil.copy2(source, target)
        for folder, rev in (("tests", tests_from), ("dsa_kvcalc", package_from)):  # as they were at a commit
            if rev:
                shutil.rmtree(self.path / folder)
                archive = subprocess.run(["git", "archive", rev, folder], cwd=ROOT, capture_output=True, check=True)
                subprocess.run(["tar", "-x", "-C", str(self.path)], input=archive.stdout, check=True)
        self.output = self.path / "pytest-output.txt"
        self.server = subprocess.Popen([PYTHON, "-c", SERVER], cwd=self.path, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)

    def pytest(self, args: list[str], timeout: int) -> tuple[int | None, str]:
        """pytest in a fresh child of the server: its exit code (None: cut off at the timeout) and output."""
        job = {"cwd": str(self.path), "output": str(self.output), "args": args,
               "env": {"PYTHONPATH": str(self.path)}}  # for the tests' own subprocesses
        self.server.stdin.write(json.dumps(job) + "\n")
        self.server.stdin.flush()
        pid = json.loads(self.server.stdout.readline())["pid"]
        cut = threading.Event()

        def kill():
            cut.set()
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        code = json.loads(self.server.stdout.readline())["code"]
        timer.cancel()
        return (None if cut.is_set() else code), self.output.read_text(errors="replace")

    def run(self, module: str, source: str, stages: list[tuple[list[str], int]]) -> dict:
        """The tests, stage by stage, until one fails (each stage stops at its first failure)."""
        target = self.path / source_path(module)
        original = target.read_text()
        start, code, output, ran = time.monotonic(), 0, "", 0
        target.write_text(source)
        try:
            for tests, timeout in stages:
                for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
                    stale.unlink()  # a mutant of the same size written within the second would pass for it
                code, output = self.pytest(["-q", "-rf", "-x", "-p", "no:cacheprovider", *tests], timeout)
                ran += 1
                if code != 0:
                    break
        finally:
            target.write_text(original)
            for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
                stale.unlink()
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
        return {"code": code, "stages": ran, "seconds": round(time.monotonic() - start, 1), "failed": failed[:1],
                "tail": output[-2000:]}

    def remove(self):
        self.server.stdin.close()
        self.server.wait()
        shutil.rmtree(self.path, ignore_errors=True)


def stages(module: str, tests: Path, full: bool) -> list[tuple[list[str], int]]:
    """The module's own test files, then the other fast ones, then (full) the slow ones: the whole suite in three,
    each with its timeout."""
    files = sorted(p.name for p in tests.glob("test_*.py"))
    first = [f for f in (f"test_{module}.py", *FIRST_TESTS[module]) if f in files]
    fast = [f for f in files if f not in first and f not in SLOW_TESTS]
    slow = [f for f in files if f in SLOW_TESTS] if full else []
    return [([f"tests/{f}" for f in part], timeout)
            for part, timeout in ((first, FAST_TIMEOUT), (fast, FAST_TIMEOUT), (slow, FULL_TIMEOUT)) if part]


def status_of(result: dict) -> str:
    """killed: a test failed; error: the run broke (the mutant breaks the import: collection errors); timeout."""
    if result["code"] is None:
        return "timeout"
    if result["code"] == 5 or "file or directory not found" in result["tail"]:  # the tool's fault, not the mutant's
        raise SystemExit(f"pytest could not run the selection:\n{result['tail']}")
    return {0: "survived", 1: "killed"}.get(result["code"], "error")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def read_results(path: Path, base: Path | None = None) -> dict[str, dict]:
    """The latest record of each mutant (in base, then in path)."""
    latest = {}
    for one in (base, path):
        if one is None or not one.exists():
            continue
        for line in one.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                latest[mutant_id(record)] = record
    return latest


def equivalents() -> list[dict]:
    return json.loads(EQUIVALENT.read_text()) if EQUIVALENT.exists() else []


def equivalence(record: dict, known: list[dict]) -> dict | None:
    return next((e for e in known if e["module"] == record["module"] and e["code"] == record["code"]
                 and e["original"] == record["original"] and e["mutant"] == record["mutant"]), None)


def summary(path: Path, modules: list[str], rev: str | None = None, base: Path | None = None) -> None:
    results = read_results(path, base)
    known = equivalents()
    sources = {m: module_source(m, rev) for m in modules}
    current = {m: digest(source) for m, source in sources.items()}
    described = {m.id: m for module in modules for m in mutants(module, sources[module], releases())}
    results = {key: record for key, record in results.items()  # this source's mutants, as this tool describes them
               if key in described and record["digest"] == current[record["module"]]}
    for key, record in results.items():
        record.update({k: getattr(described[key], k) for k in ("line", "col", "original", "mutant", "code")})
    print(f"{'module':<21} {'killed':>7} {'total':>6} {'rate':>7}   equivalent  killed/changing-output  rate")
    survivors, totals = [], [0, 0, 0, 0]
    for module in modules:
        records = [r for r in results.values() if r["module"] == module]
        if not records:
            continue
        killed = [r for r in records if r["status"] != "survived"]
        alive = [r for r in records if r["status"] == "survived"]
        same = [r for r in alive if equivalence(r, known)]
        changing = len(records) - len(same)
        print(f"{module:<21} {len(killed):>7} {len(records):>6} {len(killed) / len(records):>7.1%}   {len(same):>10}  "
              f"{len(killed):>10}/{changing:<11} {len(killed) / changing if changing else 1:.1%}")
        for n, value in enumerate((len(killed), len(records), len(same), changing)):
            totals[n] += value
        survivors += sorted(alive, key=lambda r: (r["line"], r["col"]))
    if totals[1]:
        print(f"{'all':<21} {totals[0]:>7} {totals[1]:>6} {totals[0] / totals[1]:>7.1%}   {totals[2]:>10}  "
              f"{totals[0]:>10}/{totals[3]:<11} {totals[0] / totals[3] if totals[3] else 1:.1%}")
    unverified = [r for r in survivors if r.get("phase") != "full"]
    if survivors:
        print(f"\nsurvivors ({len(survivors)}; {len(unverified)} not yet run against the full suite):")
    for r in survivors:
        same = equivalence(r, known)
        note = f"   [{same['reason']}]" if same else ("   [fast tests only]" if r.get("phase") != "full" else "")
        print(f"{source_path(r['module'])}:{r['line']}: {r['original']} -> {r['mutant']}{note}")
    statuses = {}
    for r in results.values():
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    print(f"\nby status: {statuses}")


def main() -> None:
    global PYTHON
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=MODULES, help="a target module (repeatable; default all)")
    parser.add_argument("--limit", type=int, help="at most this many mutants (after --shard)")
    parser.add_argument("--shard", default="1/1", help="i/n: only every n-th mutant, starting at the i-th")
    parser.add_argument("--sample", type=int, help="about this many mutants of each module: every n-th from the "
                        "first, n = ceil(the module's mutants / sample)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once, each in its own copy")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"the JSON-lines file (default {RESULTS})")
    parser.add_argument("--base", type=Path, help="earlier results (read, never written): --retest survived with "
                        "--base BEFORE.jsonl --results AFTER.jsonl keeps the two runs apart")
    parser.add_argument("--retest", action="append", default=[], metavar="STATUS",
                        help="run again the mutants last recorded with this status (survived, error, ...)")
    parser.add_argument("--tests-from", metavar="REV", help="the tests as they were at this commit")
    parser.add_argument("--verify", action="store_true", help="only the slow files, for the mutants that survived "
                        "the fast stages (a --fast-only run)")
    parser.add_argument("--skip-equivalent", action="store_true", help="with --verify: not the known equivalents")
    parser.add_argument("--fast-only", action="store_true", help="no full-suite run for the fast survivors")
    parser.add_argument("--python", default=str(ROOT / ".venv/bin/python") if (ROOT / ".venv/bin/python").exists()
                        else sys.executable, help="the interpreter with pytest and the package's dependencies")
    parser.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    parser.add_argument("--summary", action="store_true", help="summarise the results file, run nothing")
    parser.add_argument("--at", metavar="REV", help="the package and the tests as they were at this commit (for a "
                        "run or a --summary: the kill rate before later changes)")
    args = parser.parse_args()
    PYTHON = args.python
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill PID: the copies are removed all the same
    modules = args.module or list(MODULES)
    if args.summary:
        return summary(args.results, modules, args.at, args.base)

    known_releases = releases()
    sources = {m: module_source(m, args.at) for m in modules}
    found = [mutants(module, sources[module], known_releases) for module in modules]
    if args.sample:  # every n-th of each module from the first, n = ceil(its mutants / sample)
        found = [each[::-(-len(each) // args.sample)] for each in found]
    todo = [m for each in found for m in each]
    shard, shards = map(int, args.shard.split("/"))
    todo = todo[shard - 1::shards]
    if args.list:
        for m in todo:
            print(f"{m.where}: {m.original} -> {m.mutant}   ({m.kind})")
        print(f"{len(todo)} mutants")
        return
    done = read_results(args.results, args.base)
    digests = {m: digest(s) for m, s in sources.items()}
    if args.verify:  # the slow files, for the survivors of the fast stages (and not the known equivalents)
        known = equivalents()
        todo = [m for m in todo if m.id in done and done[m.id]["digest"] == digests[m.module]
                and done[m.id]["status"] == "survived" and done[m.id]["phase"] == "fast"
                and not (args.skip_equivalent and equivalence(asdict(m), known))]
    else:
        todo = [m for m in todo if m.id not in done or done[m.id]["digest"] != digests[m.module]
                or done[m.id]["status"] in args.retest]
    if args.limit is not None:
        todo = todo[:args.limit]
    print(f"{len(todo)} mutants to run, {args.jobs} at a time; results in {args.results}", flush=True)
    if not todo:
        return summary(args.results, modules, args.at, args.base)

    lock, free = threading.Lock(), []
    for _ in range(args.jobs):
        free.append(Workspace(args.tests_from or args.at, args.at))
    module = todo[0].module  # the unparsed, unmutated source must pass; the stages of one module are every test
    baseline = free[0].run(module, sources[module], stages(module, free[0].path / "tests", not args.fast_only))
    if baseline["code"] != 0:
        raise SystemExit(f"{module}: the unmutated module fails the tests:\n{baseline['tail']}")
    counter = iter(range(1, len(todo) + 1))

    def one(mutant: Mutant) -> None:
        with lock:
            workspace = free.pop()
        try:
            source = apply(sources[mutant.module], mutant)
            plan = stages(mutant.module, workspace.path / "tests", not args.fast_only)
            if args.verify:
                plan = plan[-1:]  # the fast stages passed already
            result = workspace.run(mutant.module, source, plan)
            status = status_of(result)
            phase = "full" if not args.fast_only and result["stages"] == len(plan) else "fast"
            record = asdict(mutant) | {"id": mutant.id, "digest": digests[mutant.module], "status": status,
                                       "phase": phase, "seconds": result["seconds"], "failed": result["failed"],
                                       "tail": "" if status in ("killed", "survived") else result["tail"][-600:]}
            with lock:
                with args.results.open("a") as out:
                    out.write(json.dumps(record) + "\n")
                n = next(counter)
                print(f"[{n}/{len(todo)}] {status:<8} {phase} {result['seconds']:>5}s {mutant.where}: "
                      f"{mutant.original} -> {mutant.mutant}", flush=True)
        finally:
            with lock:
                free.append(workspace)

    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        for future in [pool.submit(one, m) for m in todo]:
            future.result()
    finally:
        pool.shutdown(cancel_futures=True)
        for workspace in free:
            workspace.remove()
    summary(args.results, modules, args.at, args.base)


PYTHON = sys.executable

if __name__ == "__main__":
    main()
