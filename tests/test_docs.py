"""The documentation against the code and the tree: the generated parts are what the generator writes now, the README
stays a front page, every relative link resolves, no path outside the repository is cited, and the usage and JSON
docs name every recipe key and every key of plan's JSON."""

import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from conftest import ROOT, SEED, run
from dsa_kvcalc.keys import Recipe

sys.path.insert(0, str(ROOT / "tools"))
import vllm_versions_doc  # noqa: E402

DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
FRONT_PAGE_MAX_BYTES = 16 * 1024  # issue 28: under 16 KB
# The places outside the repository a file once cited: the project's shared folder and the machine's work tree.
OUTSIDE = re.compile(r"(\.\./)?shared/(design|data|seeds|tools|gpu|hooks)\b|/wor[k]/")
NOT_SOURCES = {".venv", ".git", "build", "__pycache__", ".pytest_cache", ".hypothesis"}


def tree_files() -> list[Path]:
    """The files .ci/run copies (tracked, and untracked but not ignored); in a copy without git, every file outside
    the virtual environment and the caches."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [ROOT / name for name in listed.stdout.splitlines() if (ROOT / name).is_file()]
    return [path for path in ROOT.rglob("*") if path.is_file() and not NOT_SOURCES & set(path.relative_to(ROOT).parts)
            and not path.relative_to(ROOT).parts[0].endswith(".egg-info")]


def test_docs_vllm_versions_is_what_the_generator_writes_from_vllm_rules():
    assert (ROOT / "docs" / "vllm-versions.md").read_text() == vllm_versions_doc.versions_doc(), \
        "stale: run .venv/bin/python tools/vllm_versions_doc.py"


def test_readmes_generated_blocks_are_what_the_generator_writes():
    assert README.read_text() == vllm_versions_doc.readme(), "stale: run .venv/bin/python tools/vllm_versions_doc.py"


def test_the_generated_rules_doc_holds_every_rule_and_change_with_its_source():
    from dsa_kvcalc.engine import VLLM_RULES

    text = (ROOT / "docs" / "vllm-versions.md").read_text()
    for name, rule in VLLM_RULES.items():
        assert f"### `{name}`" in text and rule.source in text
        for change in rule.changes:
            assert f"- {change.release}: **" in text and change.source in text


def test_the_readmes_run_is_a_first_screen_at_80_columns():
    shown = [line[4:] for line in vllm_versions_doc.run_block().splitlines()[1:]]
    assert len(shown) == 24 and all(len(line) <= 80 for line in shown)
    assert shown[0].startswith("vLLM 0.33.0 starts. Per rank auto holds")


def test_the_readme_is_a_front_page():
    text = README.read_text()
    assert len(text.encode()) < FRONT_PAGE_MAX_BYTES
    unlinked = [path.name for path in DOCS if f"({path.relative_to(ROOT)})" not in text]
    assert not unlinked, f"every doc is linked from the README: {unlinked}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        assert (page.parent / target.split("#")[0]).exists(), f"{page.name}: {target}"


def test_no_path_outside_the_repository_is_cited():
    cited = []
    for path in tree_files():
        text = path.read_bytes().decode(errors="ignore")
        cited += [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in OUTSIDE.finditer(text)]
    assert not cited, cited


def test_the_pattern_finds_what_it_looks_for():
    cited = ["/".join(parts) for parts in (["..", "shared", "design", "capacity-model.md"], ["shared", "data's records"],
                                           ["", "work", "notes", "glm53.md"])]  # joined: this file cites none of them
    assert all(OUTSIDE.search(text) for text in cited)
    assert not OUTSIDE.search("a shared pool; vllm/distributed/work.py; docs/design.md")


def test_the_usage_doc_names_every_recipe_key():
    text = (ROOT / "docs" / "usage.md").read_text()
    keys = [f.metadata["key"].name for f in fields(Recipe) if "key" in f.metadata]
    missing = [k for k in keys if not re.search(rf"`({re.escape(k)}|{re.escape(k.split('.')[0])})[`:]", text)]
    assert not missing, missing


def test_the_json_contract_names_every_key_plan_writes():
    text = (ROOT / "docs" / "output.md").read_text()
    plan = json.loads(run("plan", SEED, "--format", "json").output)
    backend = plan["backends"][0]
    keys = {*plan, *plan["summary"], *plan["summary"]["oom"], *plan["summary"]["oom"]["fixes"][0], *backend,
            *backend["decode_logits"], *backend["other_side_of_fix"], *backend["oom"], *plan["kv_cache"],
            *plan["memory"], *plan["cudagraph_estimate"]}
    missing = sorted(k for k in keys if not re.search(rf"\b{re.escape(k)}\b", text))
    assert not missing, missing
