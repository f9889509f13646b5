"""Real launch commands for the DSA models (tests/fixtures/commands, each with its source in SOURCES.md), each planned
or refused as expected.yaml says, with the reason. The reasons were read in the sources and in vLLM's own code, not
in dsa-kvcalc's output: a refusal names what vLLM (or the shell) would not run, a release older than those modelled,
or what dsa-kvcalc does not derive yet; tests/test_vllm_args.py checks the commands' arguments against vLLM's own
parser besides."""

import json
from pathlib import Path

import pytest
import yaml

from conftest import run

COMMANDS = Path(__file__).parent / "fixtures" / "commands"
EXPECTED = yaml.safe_load((COMMANDS / "expected.yaml").read_text())


def test_every_command_has_its_source_and_its_expectation():
    scripts = {p.name for p in COMMANDS.glob("*.sh")}
    assert scripts == set(EXPECTED)
    sources = (COMMANDS / "SOURCES.md").read_text()
    assert all(f"| {name} |" in sources for name in scripts)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_real_command_is_planned_or_refused_rightly(name):
    expected = EXPECTED[name]
    result = run("plan", COMMANDS / name, "--set", f"gpu={expected['gpu']}", "--format", "json")
    if expected.get("planned"):
        assert result.exit_code == 0, result.output
        plans = json.loads(result.stdout)
        assert all(p["summary"]["refused"] is None for p in plans.get("servers", [plans]))
    else:
        assert result.exit_code == expected["exit"], result.output
        assert expected["refused"] in result.output.strip().splitlines()[-1]

