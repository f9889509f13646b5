"""Writes the generated parts of the documentation from the code, so that none of them is retyped:

- docs/vllm-versions.md: engine.VLLM_RULES, every rule's value in the oldest release modelled and each change, with
  its source as engine.py cites it, and each rule's meaning from its field's comment on engine.Engine;
- README.md's "What is supported" block: the catalog's models, GPUs and top-k backends, the releases and engines;
- README.md's "One run" block: the first 24 lines `dsa-kvcalc plan` prints for the seed's recipe at 80 columns.

    .venv/bin/python tools/vllm_versions_doc.py          # rewrites them
    .venv/bin/python tools/vllm_versions_doc.py --check  # exits 1 where a committed one is not what the code gives

tests/test_docs.py fails while any of them is stale.
"""

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsa_kvcalc import engine  # noqa: E402
from dsa_kvcalc.catalog import BACKENDS, DEEPGEMM_RELEASES, GPUS, MODELS, UNSUPPORTED_GPUS  # noqa: E402
from dsa_kvcalc.engine import (ALL, MAIN, MAIN_COMMIT, NEWEST_VLLM, OLDEST_VLLM, RELEASE_COMMITS,  # noqa: E402
                               VLLM_RULES)

DOC = ROOT / "docs" / "vllm-versions.md"
README = ROOT / "README.md"
SEED_RECIPE = "recipes/deepseek-v4.1-flash-4xb200-dep4.yaml"
SCREEN_ROWS = 24
SCREEN_COLUMNS = 80
WIDTH = 118  # the docs' source lines
LARGE_SET = 8  # a set of more members than this changes as what it gains and loses
BLOCKS = {
    "supported": "<!-- supported: written by tools/vllm_versions_doc.py from the catalog and engine.py -->",
    "run": "<!-- run: written by tools/vllm_versions_doc.py, the first 24 lines at 80 columns -->",
}
END = "<!-- end -->"


def field_comments() -> dict[str, str]:
    """Each Engine field's comment: the one on its line, else the comment lines right above it."""
    source = (ROOT / "dsa_kvcalc" / "engine.py").read_text()
    lines = source.splitlines()
    engine_class = next(node for node in ast.parse(source).body
                        if isinstance(node, ast.ClassDef) and node.name == "Engine")
    comments = {}
    for node in engine_class.body:
        if not isinstance(node, ast.AnnAssign):
            continue
        line = lines[node.lineno - 1]
        above = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#"):
            above.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        comments[node.target.id] = line.split("  # ", 1)[1].strip() if "  # " in line else " ".join(above)
    return comments


def short_name(member: str) -> str:
    return re.sub(r"For(CausalLM|ConditionalGeneration)$", "", member)


def members(value: frozenset) -> str:
    if not value:
        return "none"
    if ALL in value:
        return "all"
    return ", ".join(sorted(short_name(m) for m in value))


def value_text(name: str, value: object, before: object = None) -> str:
    """A rule's value in words; a large set as what it gains and loses against `before`."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "none"
    if isinstance(value, frozenset):
        if isinstance(before, frozenset) and len(before) > LARGE_SET and ALL not in before:
            gained = [f"+{short_name(m)}" for m in sorted(value - before)]
            lost = [f"-{short_name(m)}" for m in sorted(before - value)]
            return ", ".join(gained + lost)
        if len(value) > LARGE_SET:
            return f"{len(value)}: {members(value)}"
        return members(value)
    if isinstance(value, dict):
        if not value:
            return "none"
        by_rows: dict[int, list[str]] = {}
        for backend, rows in value.items():
            by_rows.setdefault(rows, []).append(backend)
        return "; ".join(f"{rows} for {', '.join(backends)}" for rows, backends in by_rows.items())
    if name == "batch_defaults":
        tiers = []
        for from_gib, seqs, tokens, left_out in value:
            tier = f"{seqs}/{tokens}" + (f" from {from_gib} GiB" if from_gib else "")
            tiers.append(tier + (f" (not {', '.join(left_out)})" if left_out else ""))
        return ", ".join(tiers)
    if isinstance(value, tuple):
        return " / ".join(str(v) for v in value)
    if isinstance(value, int) and name.endswith("_bytes") and value:
        return f"{value >> 20} MiB"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def cited_lines(source: str) -> str:
    """The first file and lines a source cites, shortened to the file's name: `cache.py:66`."""
    found = re.search(r"([\w.]+\.py):([\d, -]*\d)", source)
    return f"{found[1]}:{found[2]}" if found else ""


def rule_row(name: str, rule: engine.Rule) -> str:
    changes, before = [], rule.initial
    for change in rule.changes:
        where = cited_lines(change.source)
        changes.append(f"{change.release}: {value_text(name, change.value, before)}" + (f" ({where})" if where else ""))
        before = change.value
    return f"| [`{name}`](#{name}) | {value_text(name, rule.initial)} | {'; '.join(changes) or 'none'} |"


def rule_section(name: str, rule: engine.Rule, comment: str) -> list[str]:
    lines = [f"### `{name}`", ""]
    if comment:
        lines += [comment + ("" if comment.endswith((".", ")")) else "."), ""]
    lines.append(f"- {OLDEST_VLLM}: **{value_text(name, rule.initial)}**. {rule.source}")
    before = rule.initial
    for change in rule.changes:
        lines.append(f"- {change.release}: **{value_text(name, change.value, before)}**. {change.source}")
        before = change.value
    return lines + [""]


def release_rows() -> list[str]:
    changed: dict[str, list[str]] = {}
    for name, rule in VLLM_RULES.items():
        for change in rule.changes:
            changed.setdefault(change.release, []).append(f"`{name}`")
    rows = [f"| {release} | {commit} | {', '.join(changed.get(release, [])) or '(the oldest modelled)'} |"
            if release == OLDEST_VLLM else f"| {release} | {commit} | {', '.join(changed.get(release, [])) or 'none'} |"
            for release, commit in RELEASE_COMMITS.items()]
    return rows + [f"| main | {MAIN_COMMIT} and later | {', '.join(changed.get(MAIN, []))} |"]


def versions_doc() -> str:
    comments = field_comments()
    changes = sum(len(rule.changes) for rule in VLLM_RULES.values())
    head = f"""# vLLM versions

<!-- Written by tools/vllm_versions_doc.py from dsa_kvcalc/engine.py; edit engine.py and run the tool. -->

`vllm-version` picks every rule that moved between vLLM releases. The default is {NEWEST_VLLM}, the newest release
modelled; every release from {OLDEST_VLLM} is modelled, and `main` is unreleased vLLM main at and after {MAIN_COMMIT},
the merge of vLLM PR #62860. A release newer than {NEWEST_VLLM} takes {NEWEST_VLLM}'s rules, with a first line that
says so; one older than {OLDEST_VLLM} is refused. A dev build `X.Y.Z.devN+gHASH` is the release whose wheel was built
from that commit (the table below, from each wheel's `vllm/_version.py`), or main for {MAIN_COMMIT}; otherwise its
number, which takes the rules of the last release at or before it in PEP 440's order (`packaging.version`:
0.20.1.dev1 and 0.20.1rc1 come before 0.20.1, and take 0.20.0's rules; 0.20.1.post1 takes 0.20.1's). A source build
numbered `0.1.devN` whose commit is no release's is refused, with how to name its base.

`dsa_kvcalc/engine.py` holds the rules in one table, `VLLM_RULES`: {len(VLLM_RULES)} rules, {changes} changes. Each
gives its value in {OLDEST_VLLM} and every change: the first release with the new value, and the source, read in the
released wheels and cited as `vllm==X.Y.Z path:line` (the release before the change and the first with it; a value
that is an absence names the release or file it is absent from; main's one change is cited to PR #62860 and its
merge commit). `plan --format json` lists every rule's value and source at the recipe's version under
`engine.rules`; `compare --across vllm-version=...` prints the rules that differ between two releases.

## Releases

| release | commit | rules that change in it |
|---|---|---|
"""
    summary = ["", "## Rules", "",
               f"Each rule's value in {OLDEST_VLLM}, then each change: the first release with it, the value, and the "
               "file and lines it is cited to (in full under [Sources](#sources)).", "",
               f"| rule | {OLDEST_VLLM} | changes: first release, value (where) |", "|---|---|---|"]
    summary += [rule_row(name, rule) for name, rule in VLLM_RULES.items()]
    sources = ["", "## Sources", "",
               "Each rule with its meaning (its field's comment on `engine.Engine`), its value in each release from "
               "the first that has it, and the source as engine.py cites it.", ""]
    for name, rule in VLLM_RULES.items():
        sources += rule_section(name, rule, comments.get(name, ""))
    return head + "\n".join(release_rows() + summary + sources).rstrip() + "\n"


def supported_block() -> str:
    families: dict[str, list[str]] = {}
    for gpu in GPUS:
        families.setdefault(gpu.arch, []).append(gpu.name)
    releases = list(RELEASE_COMMITS)
    deepgemm = list(DEEPGEMM_RELEASES)
    lines = [
        f"- **Models** ({len(MODELS)}): " + ", ".join(f"`{m.name}`" for m in MODELS) + "; or a local `config.json` "
        "of one of their architectures (`dsa-kvcalc models` lists each config's source).",
        f"- **GPUs** ({len(GPUS)}): " + "; ".join(f"{arch}: {', '.join(names)}" for arch, names in families.items())
        + f" (`dsa-kvcalc gpus`). {', '.join(UNSUPPORTED_GPUS)}: refused, with the reason (vLLM runs no DSA model "
          "on them).",
        f"- **vLLM releases** ({len(releases)}): {', '.join(releases)}; and `main`, unreleased vLLM main at and after "
        f"{MAIN_COMMIT} (PR #62860). The rules that differ between them: [docs/vllm-versions.md]"
        "(docs/vllm-versions.md).",
        f"- **Engines**: `vllm` (the default) and `deepinfer` ({engine.DEEPINFER.label}, the seed's other engine).",
        f"- **Top-k backends** of the indexer: {', '.join(f'`{b.name}`' for b in BACKENDS)}; each that cannot run "
        "on the GPU or release is listed with the reason. **DeepGEMM** logits layouts: "
        f"{', '.join(deepgemm)}.",
    ]
    return "\n".join(textwrap.fill(line, WIDTH, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False) for line in lines)


def run_block() -> str:
    env = {**os.environ, "COLUMNS": str(SCREEN_COLUMNS), "LINES": str(SCREEN_ROWS), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "dsa_kvcalc", "plan", SEED_RECIPE], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    screen = [line.rstrip() for line in done.stdout.splitlines()[:SCREEN_ROWS]]
    return "\n".join(["    $ COLUMNS=80 dsa-kvcalc plan " + SEED_RECIPE] + ["    " + line if line else "" for line in screen])


def with_block(text: str, name: str, body: str) -> str:
    start = text.index(BLOCKS[name]) + len(BLOCKS[name])
    end = text.index(END, start)
    return text[:start] + "\n" + body + "\n" + text[end:]


def readme() -> str:
    text = README.read_text()
    text = with_block(text, "supported", supported_block())
    return with_block(text, "run", "\n" + run_block() + "\n")


def main() -> int:
    wanted = {DOC: versions_doc(), README: readme()}
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if "--check" in sys.argv:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} (run tools/vllm_versions_doc.py)")
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
