"""plan against vLLM's own start-up (oracle/harness.py: the release's parser, EngineArgs.create_engine_config, one
worker a pipeline stage building the model on the meta device, EngineCore._initialize_kv_caches, with the GPU
emulated), given nothing of plan's but the KV memory. Marked vllm_oracle; skipped unless oracle/setup.sh has set up
the release (CI sets up the newest). At the newest release: every bundled recipe, the setups issue 25 found vLLM
refusing (tests/test_vllm_refusals.py), and the first generated cases drawn for it; at 0.30.0-0.32.0, where set up,
the bundled recipes. The whole table (today's cases and 240 drawn ones on 0.30.0-0.33.0) is oracle/table.py's.

    .venv/bin/python -m pytest -q -m vllm_oracle tests/test_vllm_oracle.py
"""

import sys

import pytest

from conftest import ROOT, RECIPES
from test_vllm_refusals import REFUSED

sys.path.insert(0, str(ROOT / "oracle"))

import cases  # noqa: E402
import table  # noqa: E402

pytestmark = pytest.mark.vllm_oracle
NEWEST = cases.GENERATED_RELEASES[-1]
SPREAD = ["0.30.0", "0.31.0", "0.32.0"]
BUNDLED = sorted(path.stem for path in RECIPES.glob("*.yaml"))
GENERATED_AT_NEWEST = 8  # the first cases the seeded generator draws for the newest release
SET_UP = table.available_releases()
AGREE = ("equal", "both refuse")


def refused_point(what: str, raw: dict) -> cases.Point:
    return cases.point(NEWEST, what, {k: v for k, v in raw.items() if k != "vllm-version"}, None)


@pytest.fixture(scope="session")
def oracle_rows(request) -> dict:
    """{(release, case): the table's row} for the cases the selected tests need, one process a release."""
    wanted = {item.callspec.params.get("release", NEWEST) for item in request.session.items
              if item.module.__name__ == __name__ and hasattr(item, "callspec")}
    releases = [r for r in [NEWEST, *SPREAD] if r in wanted and r in SET_UP]
    if not releases:  # none set up: every test skips in row_of (cases.points([]) would mean every release)
        return {}
    points = cases.points(releases, BUNDLED)
    if NEWEST in releases:
        points += [refused_point(what, raw) for what, raw, *_ in REFUSED]
        points += [p for p in cases.generated_points() if p.release == NEWEST][:GENERATED_AT_NEWEST]
    answers = table.oracle_answers(points, 2, {})
    return {(r["release"], r["case"]): r for r in table.rows(points, answers)}


def row_of(rows: dict, release: str, name: str) -> dict:
    if release not in SET_UP:
        pytest.skip(f"vLLM {release} is not set up: bash oracle/setup.sh {release}")
    return rows[(release, name)]


@pytest.mark.parametrize("recipe", BUNDLED)
def test_plan_and_vllm_agree_on_each_bundled_recipe_at_the_newest_release(oracle_rows, recipe):
    row = row_of(oracle_rows, NEWEST, recipe)
    assert row["verdict"] == "equal", (row["verdict"], row["detail"])


@pytest.mark.parametrize("what, raw, started, key, words, path", REFUSED, ids=[r[0] for r in REFUSED])
def test_vllm_refuses_where_plan_refuses_in_the_same_words(oracle_rows, what, raw, started, key, words, path):
    row = row_of(oracle_rows, NEWEST, what)
    assert row["verdict"] == "both refuse", (row["verdict"], row["detail"])
    vllm_reason = row["detail"].split(" | plan ")[0]
    assert words in vllm_reason and path in vllm_reason, vllm_reason


def test_the_first_generated_cases_agree_at_the_newest_release(oracle_rows):
    rows = [r for (release, name), r in oracle_rows.items() if release == NEWEST and name.startswith("generated")] \
        if NEWEST in SET_UP else pytest.skip(f"vLLM {NEWEST} is not set up")
    assert len(rows) == GENERATED_AT_NEWEST
    assert [(r["case"], r["verdict"], r["detail"]) for r in rows if r["verdict"] not in AGREE] == []


@pytest.mark.parametrize("release", SPREAD)
@pytest.mark.parametrize("recipe", BUNDLED)
def test_plan_and_vllm_agree_on_each_bundled_recipe_at_older_releases(oracle_rows, recipe, release):
    row = row_of(oracle_rows, release, recipe)
    assert row["verdict"] in AGREE + ("not run",), (row["verdict"], row["detail"])
