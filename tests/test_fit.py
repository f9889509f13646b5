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


def starts_safely(b: dict) -> bool:
    return b["refused"] is None and not b["oom"]["at_risk"]


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
        at = lambda value: starts_safely(backend(recipe, sets + [f"max-num-seqs={value}"], name))
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
    assert 256 * longest.largest <= longest.at.kv_cache_tokens and longest.largest < 1_048_576 // 4


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


@pytest.mark.parametrize("recipe", BUNDLED, ids=lambda p: p.stem)
def test_each_answer_names_the_keys_it_sets_and_is_plans_figure_there(recipe):
    data = json.loads(run("fit", recipe, "--backend", "auto", "--format", "json").output)
    shape = json.loads(run("plan", recipe, "--format", "json").output)["recipe"]
    for a in data["answers"]:
        assert a["set"] == {k: v for k, v in (a["held"] | {a["key"]: a["largest"]}).items() if shape[k] != v}, a
        there = backend(recipe, [f"{key}={value}" for key, value in a["set"].items()], "auto")
        assert (there["kv_cache_tokens"], there["max_concurrency"]) == (a["kv_cache_tokens"], a["max_concurrency"])
        assert a["oom"] == {"max_decodes": there["oom"]["max_decodes"], "at_risk": there["oom"]["at_risk"]}, a


def test_the_seeds_answers_say_what_they_set_and_flag_the_oom_risk():
    text = " ".join(run("fit", SEED, "--backend", "auto").output.split())
    # the most requests of 1M are planned at max-num-seqs 44, where plan holds more than at the recipe's 256
    plan_256 = backend(SEED, [], "auto")
    assert "most requests of 1,048,576 tokens: max-num-seqs 44;" in text
    assert f"at the recipe's max-num-seqs 256 plan gives 56.96 GiB, {plan_256['max_concurrency']:.2f} requests" in text
    # 8,192 sequences start (max-num-batched-tokens), but plan calls them at risk: fit answers the largest it calls
    # safe, plan's own seqs fix, and says why one more is not
    fix = next(f for f in json.loads(run("plan", SEED, "-f", "json").output)["summary"]["oom"]["fixes"]
               if f["name"] == "seqs")
    assert backend(SEED, ["max-num-seqs=8192"], "auto")["oom"]["at_risk"] and "8,192" not in text
    assert f"largest max-num-seqs that starts with no OOM risk: max-num-seqs {fix['value']:,};" in text
    assert f"one more, {fix['value'] + 1:,}: OOM risk: room for the decode logits of" in text


def test_a_context_bound_by_window_pages_says_so():
    # At max-model-len 8,416 a V4.1 request holds cdiv(8,416, 128) = 66 compressed pages, and in each of its 8
    # window groups (block 32, window 128, 2 x 8,192 tokens in flight: more than the request) cdiv(8,416, 32) + 1 =
    # 264 pages, plus 1 ring page: 66 + 8 x 264 + 1 = 2,179 pages, 2,113 of them windows and state.
    data = json.loads(run("fit", SEED, "--backend", "auto", "--format", "json").output)
    context = next(a for a in data["answers"] if a["question"] == "max-model-len")
    assert (context["largest"], context["pages_per_request"], context["window_state_pages"]) == (8416, 2179, 2113)
    plan = json.loads(run("plan", SEED, "--set", "max-model-len=8416", "--format", "json").output)
    assert plan["kv_cache"]["pages_per_request"] == 2179
    text = " ".join(run("fit", SEED, "--backend", "auto").output.split())
    assert ("a request of 8,416 tokens holds 2,179 pages, 2,113 of them in window and state groups" in text
            and "those pages, not the tokens at max-model-len 1,048,576, bound the context" in text)
    glm = " ".join(run("fit", RECIPES / "glm-5-8xb200-tp8.yaml", "--backend", "auto").output.split())
    assert "window and state groups" not in glm  # one full-attention group: the tokens bound it
