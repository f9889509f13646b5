"""plan's KV tokens against vLLM's own KV-cache planner (oracle/): every bundled recipe at the newest release and at a
spread of older ones. Marked vllm_oracle; skipped unless oracle/setup.sh has set up the releases (docs/validation.md).

    .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_oracle.py

The oracle builds each layer's KV-cache spec with the release's own model code and plans them with the release's own
EngineCore._initialize_kv_caches (oracle/harness.py, oracle/families.py); plan's groups are never read.
"""

import sys

import pytest

from conftest import ROOT, RECIPES

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402
import table  # noqa: E402

pytestmark = pytest.mark.vllm_oracle
NEWEST = cases.RELEASES[-1]
# One release of each KV-cache rule change plan models: the oldest, token counts from concurrency (0.20.1), bucket
# block prices (0.23.0), windows holding two batches (0.26.0), packed grouping (0.29.0), V4.1 (0.30.0) and its
# block-stride alignments (0.31.0), layer-outer pages padded one by one (0.32.0).
SPREAD = ["0.19.0", "0.20.1", "0.23.0", "0.26.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
BUNDLED = sorted(path.stem for path in RECIPES.glob("*.yaml"))
SET_UP = table.available_releases()

@pytest.fixture(scope="session")
def oracle_rows(request) -> dict:
    """vLLM's answers for the releases the selected tests need, one process a release, two at a time."""
    wanted = {item.callspec.params.get("release", NEWEST) for item in request.session.items
              if item.module.__name__ == __name__ and hasattr(item, "callspec")}
    releases = [r for r in [NEWEST, *SPREAD] if r in wanted and r in SET_UP]
    if not releases:  # none set up: every test skips in row_of (cases.points([]) would mean every release)
        return {}
    points = cases.points(releases, BUNDLED)
    return {(r["release"], r["recipe"]): r for r in table.rows(points, table.oracle_answers(points, 2))}


def row_of(rows: dict, release: str, recipe: str) -> dict:
    if release not in SET_UP:
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    return rows[(release, recipe)]


def check(row: dict) -> None:
    if "vllm_tokens" not in row:
        assert not row["verdict"].startswith(("oracle error", "DIFFERENT")), row["verdict"]
        return  # the release has no model code for it, or plan refuses the recipe there
    # Blocks per request are not compared: before 0.27.0 vLLM's concurrency divides by a byte ratio of its own
    # scheduler blocks, which plan does not model (its tokens and block bytes are what vLLM logs and allocates).
    assert (row["plan_tokens"], row["plan_block_bytes"]) == (row["vllm_tokens"], row["vllm_block_bytes"]), row


@pytest.mark.parametrize("recipe", BUNDLED)
def test_plan_logs_the_tokens_vllm_logs_at_the_newest_release(oracle_rows, recipe):
    row = row_of(oracle_rows, NEWEST, recipe)
    assert "vllm_tokens" in row, row["verdict"]
    check(row)


@pytest.mark.parametrize("release", SPREAD)
@pytest.mark.parametrize("recipe", BUNDLED)
def test_plan_logs_the_tokens_vllm_logs_at_older_releases(oracle_rows, recipe, release):
    check(row_of(oracle_rows, release, recipe))
