"""The README's two commands and .ci/run cannot drift apart: CI runs the README's test command verbatim, as a newcomer
does (a fresh copy, HOME and the oracle's home empty), and the plan command names a bundled recipe."""

import os
import re
import subprocess
import sys

from conftest import ROOT

README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
COMMANDS = [line.strip() for line in README.splitlines()
            if line.startswith("    python3 -m venv .venv && ") and ("dsa-kvcalc plan " in line or "pytest" in line)]


def test_the_readme_gives_two_commands_near_its_top():
    assert len(COMMANDS) == 2, COMMANDS
    first_rows = README.splitlines()[:40]
    assert all(any(line.strip() == command for line in first_rows) for command in COMMANDS)


def test_ci_runs_the_readmes_test_command_verbatim():
    test_command = next(c for c in COMMANDS if "pytest" in c)
    assert test_command in CI.splitlines(), test_command


def test_ci_runs_as_a_newcomer_in_a_fresh_copy_with_empty_homes():
    assert 'cd "$scratch/src"' in CI and "git ls-files" in CI
    assert re.search(r'export HOME="\$scratch/home" DSA_KVCALC_ORACLE_HOME="\$scratch/home/oracle"', CI)
    assert CI.index('cd "$scratch/src"') < CI.index("python3 -m venv .venv")


def test_ci_checks_the_newest_release_with_vllms_own_code():
    assert 'bash oracle/setup.sh "$newest"' in CI and "pytest -q -m vllm_oracle" in CI
    assert CI.index("python3 -m venv .venv") < CI.index("oracle/setup.sh")


def test_the_readmes_plan_command_names_a_bundled_recipe():
    plan_command = next(c for c in COMMANDS if " plan " in c)
    recipe = plan_command.split(" plan ")[1].split()[0]
    assert (ROOT / recipe).is_file(), recipe


def test_the_oracle_tests_skip_where_the_oracle_is_half_set_up(tmp_path):
    """A fresh machine (HOME empty), and one where oracle/setup.sh stopped after unpacking a release but before its
    venv: every test against vLLM's own code skips, one line each, and none errors."""
    half = tmp_path / "oracle"
    (half / "releases" / "0.33.0" / "vllm").mkdir(parents=True)
    (half / "releases" / "0.33.0" / "vllm" / "__init__.py").write_text("")
    for oracle_home in (tmp_path / "nothing", half):
        env = {**os.environ, "HOME": str(tmp_path), "DSA_KVCALC_ORACLE_HOME": str(oracle_home)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m",
                               "vllm_oracle", "tests/test_vllm_oracle.py", "tests/test_vllm_capture_sizes.py",
                               "tests/test_vllm_cudagraph_estimate.py"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        last = done.stdout.strip().splitlines()[-1]
        assert done.returncode == 0 and "skipped" in last and "error" not in last and "passed" not in last, done.stdout
        assert "SKIPPED" in done.stdout and "bash oracle/setup.sh" in done.stdout
