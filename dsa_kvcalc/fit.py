"""What fits, both ways, on plan's own arithmetic: the longest max-model-len at which a concurrency fits, the most
sequences at a max-model-len, and the largest max-num-seqs vLLM would start with. Pure: plans in, answers out.

"Fits" is what vLLM logs and checks, per rank:
- it starts when max-num-seqs <= max-num-batched-tokens and its KV cache holds one request of max-model-len
  (report.refusal);
- N requests of max-model-len L fit when its "Maximum concurrency for L tokens per request" is at least N, that is
  when the KV tokens it logs are at least N x L. Window and state pages (DeepSeek-V4) are in those tokens as vLLM
  counts them, so a longer context does not cost in proportion.
Each question holds for every value up to an edge and for none above it (KV tokens only shrink as max-num-seqs or
max-model-len grows, and what a request needs only grows), so bisection finds the edge; the answer says what fails
one step above it.
"""

from dataclasses import dataclass

from dsa_kvcalc.bisection import largest
from dsa_kvcalc.capacity import BackendPlan, Plan
from dsa_kvcalc.keys import KEYS, Recipe
from dsa_kvcalc.report import refusal
from dsa_kvcalc.sweep import Base, Planner, seqs_ceiling


def shortfall(plan: Plan, b: BackendPlan, concurrency: int) -> str | None:
    """Why `concurrency` requests of max-model-len do not fit at once, or None when they do."""
    r = plan.recipe
    refused = refusal(plan, b)
    if refused:
        return refused
    if b.kv_cache_tokens < concurrency * r.max_model_len:
        return (f"{concurrency:,} x {r.max_model_len:,} = {concurrency * r.max_model_len:,} tokens > the KV cache's "
                f"{b.kv_cache_tokens:,}")
    return None


@dataclass(frozen=True)
class Answer:
    """The edge of one question for one backend: the largest value that fits, the keys set to reach it, the plan
    there and at the recipe itself, and why one more does not fit."""
    backend: str
    question: str  # max-model-len, concurrency or max-num-seqs
    held: dict  # the keys held fixed, as the recipe spells them
    key: str  # the key the answer sets to its value
    largest: int | None  # None: not even the smallest value fits
    plan: Plan | None  # at largest
    above: str  # why largest + 1 (or the smallest value) does not fit
    recipe_plan: Plan  # at the recipe as written

    @property
    def changed(self) -> dict:
        """The keys the answer sets, each as the recipe spells it, where they differ from the recipe's."""
        shape = self.recipe_plan.recipe.shape
        return {key: value for key, value in (self.held | {self.key: self.largest}).items() if shape[key] != value}

    @property
    def pages_bound(self) -> bool:
        """Where the answer is: do a request's window and state pages, over half its pages, bound the context (rather
        than the tokens at max-model-len)?"""
        kv = self.plan.memory.kv
        return 2 * kv.window_state_pages > kv.pages_per_request

    @property
    def at(self) -> BackendPlan | None:
        return None if self.plan is None else self.plan.backend(self.backend)


def answer(planner: Planner, name: str, question: str, key: str, held: dict, low: int, high: int, top: str,
           fails) -> Answer:
    """Bisect key over [low, high] with the other keys held; top says why high + 1 is out of bounds."""
    def failing(value: int) -> str | None:
        return fails(*planner.backend(held | {key: value}, name))

    edge = largest(failing, low, high)
    if edge is None:
        return Answer(name, question, held, key, None, None, failing(low), planner.at({}))
    above = top if edge == high else failing(edge + 1)
    return Answer(name, question, held, key, edge, planner.at(held | {key: edge}), above, planner.at({}))


def longest_context(planner: Planner, name: str, concurrency: int) -> Answer:
    """The largest max-model-len at which `concurrency` requests (max-num-seqs = concurrency) fit at once."""
    r = planner.base.recipe
    return answer(planner, name, "max-model-len", "max-model-len", {"max-num-seqs": concurrency},
                  r.indexer_width_ratio, r.model.max_position_embeddings,
                  f"{r.model.name}'s maximum, {r.model.max_position_embeddings:,}",
                  lambda plan, b: shortfall(plan, b, concurrency))


def most_sequences(planner: Planner, name: str, length: int) -> Answer:
    """The largest number of requests of max-model-len `length` that fit at once, with max-num-seqs set to it."""
    r = planner.base.recipe
    return answer(planner, name, "concurrency", "max-num-seqs", {"max-model-len": length}, 1, seqs_ceiling(r),
                  seqs_top(r), lambda plan, b: shortfall(plan, b, plan.recipe.max_num_seqs))


def starts_safely(plan: Plan, b: BackendPlan) -> str | None:
    """Why vLLM would not start it, or where plan calls it at risk of running out of memory (the margin kept)."""
    if b.oom.at_risk:
        return (f"OOM risk: room for the decode logits of {b.oom.safe_decodes:,} decodes with the margin kept "
                f"({b.oom.max_decodes:,} at the edge)")
    return refusal(plan, b)


def largest_start(planner: Planner, name: str) -> Answer:
    """The largest max-num-seqs vLLM would start with at the recipe's max-model-len and plan calls safe: never a value
    at the OOM edge."""
    r = planner.base.recipe
    return answer(planner, name, "max-num-seqs", "max-num-seqs", {}, 1, seqs_ceiling(r), seqs_top(r), starts_safely)


def seqs_top(r: Recipe) -> str:
    if r.max_num_batched_tokens <= KEYS["max_num_seqs"].maximum:
        return (f"max-num-seqs above max-num-batched-tokens {r.max_num_batched_tokens:,}: {r.engine.label} refuses "
                f"it")
    return f"max-num-seqs is at most {int(KEYS['max_num_seqs'].maximum):,}"


def fits(base: Base, backends: list[str], concurrency: int, length: int) -> list[Answer]:
    """The three questions for each backend (default: those that run here), in that order."""
    planner = Planner(base)
    answers = []
    for name in backends or [b.backend for b in planner.at({}).backends if b.available]:
        answers += [longest_context(planner, name, concurrency), most_sequences(planner, name, length),
                    largest_start(planner, name)]
    return answers
