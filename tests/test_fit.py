"""fit: each answer is an edge of plan's own figures. At the answer plan says it fits; one token or one sequence more
and plan says it does not, for every bundled recipe, on the release and on main, window caches (DeepSeek-V4)
included. The check reads only plan's JSON: KV tokens against requests x max-model-len, and plan's verdict on
whether vLLM starts."""

import json
import time

import pytest

from conftest import RECIPES, SEED, run
from dsa_kvcalc import fit
from dsa_kvcalc.sweep import load_base

BUNDLED = sorted(RECIPES.glob("*.yaml"))


def backend(recipe, sets: list[str], name: str) -> dict:
    result = run("plan", recipe, *(a for s in sets for a in ("--set", s)), "--format", "json")
    assert result.exit_code in (0, 4), result.output
    return next(b for b in json.loads(result.stdout)["backends"] if b["backend"] == name)


def fits(b: dict, seqs: int, length: int) -> bool:
    return b["refused"] is None and b["kv_cache_tokens"] >= seqs * length


def starts(b: dict) -> bool:
    return b["refused"] is None


def check_edge(recipe, sets, a: dict, length: int, top: int):
    """plan agrees at the answer, and one more does not fit (unless the answer is the top of the range)."""
    name, largest, held = a["backend"], a["largest"], a["held"]
    if a["question"] == "max-model-len":
        seqs = held["max-num-seqs"]
        at = lambda value: fits(backend(recipe, sets + [f"max-num-seqs={seqs}", f"max-model-len={value}"], name),
                                seqs, value)
    elif a["question"] == "concurrency":
        at = lambda value: fits(backend(recipe, sets + [f"max-num-seqs={value}", f"max-model-len={held['max-model-len']}"],
                                        name), value, held["max-model-len"])
    else:
        at = lambda value: starts(backend(recipe, sets + [f"max-num-seqs={value}"], name))
    assert largest is not None and at(largest), a
    if largest < top:
        assert not at(largest + 1), a


@pytest.mark.parametrize("version", ["0.33.0", "main"])
@pytest.mark.parametrize("recipe", BUNDLED, ids=lambda p: p.stem)
def test_every_answer_is_plans_edge(recipe, version):
    sets = [f"vllm-version={version}"]
    result = run("fit", recipe, "--set", sets[0], "--backend", "auto", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    plan = json.loads(run("plan", recipe, "--set", sets[0], "--format", "json").output)
    model_max = next(m for m in json.loads(run("models", "-f", "json").output)["models"]
                     if m["name"] == plan["model"]["name"])["max_position_embeddings"]
    batched = plan["recipe"]["max-num-batched-tokens"]
    for a in data["answers"]:
        top = model_max if a["question"] == "max-model-len" else batched
        check_edge(recipe, sets, a, plan["recipe"]["max-model-len"], top)


def test_the_seed_on_main_hand_checked():
    # vLLM starts while one 1M-token request fits: 12,329 pages x 126,720 B = 1,562,330,880 B. On main (#62860) each
    # sequence reserves 6 rows x 1,049,088 columns, which raises the peak beyond the backend's headroom. auto, at
    # 6 B: KV 61,163,118,720 B (the seed's 482,663.5 blocks) - (n x 37,767,168 - 3,091,880,448) >= 1,562,330,880 up
    # to n = 62,692,668,288 / 37,767,168 = 1,659.98. deep_select, at 2 B and with 19,756,849,562 - 13,303,661,199 =
    # 6,453,188,363 B less in its graphs: (67,616,307,083 + 3,088,855,296 - 1,562,330,880) / 12,589,056 = 5,492.3.
    base = load_base(SEED, ["vllm-version=main"])
    answers = {(a.backend, a.question): a for a in fit.fits(base, ["auto", "deep_select"], 256, 1_048_576)}
    assert (answers["auto", "max-num-seqs"].largest, answers["deep_select", "max-num-seqs"].largest) == (1659, 5492)
    assert "one request of max-model-len 1,048,576 needs" in answers["auto", "max-num-seqs"].above
    # Each of V4.1's requests holds its window and state pages whatever its length (12,329 pages at 1M, of which
    # 8 x 517 + 1 do not grow): 256 of them fit only at a short context, not at 256 x 1M / 2.
    longest = answers["auto", "max-model-len"]
    assert 256 * longest.largest <= longest.plan.kv_cache_tokens and longest.largest < 1_048_576 // 4


def test_a_concurrency_that_never_fits_says_why():
    # Above max-num-batched-tokens (8,192 in the seed's recipe), vLLM refuses the max-num-seqs itself.
    result = run("fit", SEED, "--concurrency", 20_000, "--backend", "auto", "--format", "json")
    context = next(a for a in json.loads(result.output)["answers"] if a["question"] == "max-model-len")
    assert context["largest"] is None and "above max-num-batched-tokens 8,192" in context["one_more"]


def test_fit_is_well_under_a_second():
    base = load_base(SEED)
    started = time.perf_counter()
    fit.fits(base, ["auto", "deep_select"], 256, 1_048_576)
    assert time.perf_counter() - started < 1.0
