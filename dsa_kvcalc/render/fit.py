"""fit's answers as a table and JSON. No arithmetic: the figures come from fit.Answer and its plan."""

import json

from dsa_kvcalc.fit import Answer
from dsa_kvcalc.keys import Recipe
from dsa_kvcalc.render import print_table
from dsa_kvcalc.report import TOOL

QUESTIONS = {"max-model-len": "longest max-model-len", "concurrency": "most requests at once",
             "max-num-seqs": "largest max-num-seqs that starts with no OOM risk"}


def answer_json(a: Answer) -> dict:
    b = a.plan
    return {"backend": a.backend, "question": a.question, "held": a.held, "largest": a.largest,
            "kv_cache_tokens": b and b.kv_cache_tokens, "max_concurrency": b and b.max_concurrency,
            "oom": {"max_decodes": b and b.oom.max_decodes, "at_risk": b and b.oom.at_risk}, "one_more": a.above}


def render_json(r: Recipe, answers: list[Answer]) -> str:
    recipe = {"model": r.model.name, "gpu": r.gpu.name, "engine": r.engine.label, "max_num_seqs": r.max_num_seqs,
              "max_model_len": r.max_model_len}
    return json.dumps({"tool": TOOL, "recipe": recipe, "answers": [answer_json(a) for a in answers]}, indent=2) + "\n"


def shown(value: int | None) -> str:
    return "none" if value is None else f"{value:,}"


def header(a: Answer) -> str:
    if a.question == "max-model-len":
        return f"longest context at {a.held['max-num-seqs']:,} requests"
    if a.question == "concurrency":
        return f"most requests of {a.held['max-model-len']:,} tokens"
    return "largest max-num-seqs that starts with no OOM risk"


def risk(a: Answer) -> str:
    if a.plan is None or not a.plan.oom.at_risk:
        return ""
    return f" (there, OOM risk above {a.plan.oom.max_decodes:,} concurrent decodes: see plan)"


def render_table(r: Recipe, answers: list[Answer], console) -> None:
    """One row per group of backends with the same answers; under the table, what fails one step up."""
    title = (f"What fits per rank: {r.model.name} on {r.gpu.name}, {r.engine.label}, as planned (max-num-seqs "
             f"{r.max_num_seqs:,}, max-model-len {r.max_model_len:,})")
    by_backend: dict[str, list[Answer]] = {}
    for a in answers:
        by_backend.setdefault(a.backend, []).append(a)
    alike: dict[tuple, list[list[Answer]]] = {}
    for found in by_backend.values():
        alike.setdefault(tuple((a.question, a.largest, a.above, risk(a)) for a in found), []).append(found)
    first = next(iter(by_backend.values()))
    rows = [[", ".join(f[0].backend for f in group), *(shown(a.largest) for a in group[0])] for group in alike.values()]
    console.print(title, highlight=False, markup=False)
    print_table(console, ["backend", *(header(a) for a in first)], rows, left=(0,), prose=(0,))
    console.print("One step above each answer:", highlight=False)
    for group in alike.values():
        names = ", ".join(f[0].backend for f in group)
        for a in group[0]:
            step = "nothing fits" if a.largest is None else f"{a.largest + 1:,}"
            console.print(f"  {header(a)} ({names}): {step}: {a.above}{risk(a)}", highlight=False, markup=False)
