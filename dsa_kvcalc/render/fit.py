"""fit's answers as a table and JSON. No arithmetic: the figures come from fit.Answer and its plans."""


from dsa_kvcalc.fit import Answer
from dsa_kvcalc.keys import Recipe
from dsa_kvcalc.render import gib, json_text, print_table, print_prose
from dsa_kvcalc.report import TOOL


def answer_json(a: Answer) -> dict:
    b, kv = a.at, a.plan and a.plan.memory.kv
    return {"backend": a.backend, "question": a.question, "held": a.held, "key": a.key, "largest": a.largest,
            "set": a.changed, "kv_cache_tokens": b and b.kv_cache_tokens, "max_concurrency": b and b.max_concurrency,
            "oom": {"max_decodes": b and b.oom.max_decodes, "at_risk": b and b.oom.at_risk},
            "pages_per_request": kv and kv.pages_per_request, "window_state_pages": kv and kv.window_state_pages,
            "one_more": a.above}


def render_json(r: Recipe, answers: list[Answer]) -> str:
    recipe = {"model": r.model.name, "gpu": r.gpu.name, "engine": r.engine.label, "max_num_seqs": r.max_num_seqs,
              "max_model_len": r.max_model_len}
    return json_text({"tool": TOOL, "recipe": recipe, "answers": [answer_json(a) for a in answers]})


def header(a: Answer) -> str:
    if a.question == "max-model-len":
        return f"longest context at {a.held['max-num-seqs']:,} requests"
    if a.question == "concurrency":
        return f"most requests of {a.held['max-model-len']:,} tokens"
    return "largest max-num-seqs that starts with no OOM risk"


def cell(a: Answer) -> str:
    if a.largest is None:
        return "none"
    return f"{a.largest:,}" + (" (OOM risk)" if a.at.oom.at_risk else "")


def explained(a: Answer, r: Recipe) -> str:
    """What the answer sets, what plan says there (its OOM risk first), why that and not one more."""
    if a.largest is None:
        return f"{header(a)}: nothing fits: {a.above}"
    b, kv = a.at, a.plan.memory.kv
    keys = ", ".join(f"{key} {value:,}" for key, value in a.changed.items()) or "the recipe as it is"
    said = [f"{header(a)}: {keys}"]
    if b.oom.at_risk:
        said.append(f"at risk there: OOM above {b.oom.max_decodes:,} concurrent decodes outside CUDA graphs on "
                    f"{r.engine.label} (plan with --set {a.key}={a.largest} says what it allows)")
    if a.question == "concurrency" and a.largest != r.max_num_seqs:
        mine = a.recipe_plan.backend(a.backend)
        said.append(f"the KV cache holds {gib(b.kv_cache_bytes)} GiB there, {b.max_concurrency:.2f} requests; at the "
                    f"recipe's max-num-seqs {r.max_num_seqs:,} plan gives {gib(mine.kv_cache_bytes)} GiB, "
                    f"{mine.max_concurrency:.2f} requests")
    if a.question == "max-model-len" and a.pages_bound:
        said.append(f"a request of {a.largest:,} tokens holds {kv.pages_per_request:,} pages, "
                    f"{kv.window_state_pages:,} of them in window and state groups (a window group keeps its window "
                    f"and the tokens in flight, up to the whole request): {a.held['max-num-seqs']:,} requests of "
                    f"{kv.pages_per_request:,} pages fill the KV cache's {b.release.kv_cache_blocks:,} blocks, so "
                    f"those pages, not the tokens at max-model-len {r.max_model_len:,}, bound the context")
    said.append(f"one more, {a.largest + 1:,}: {a.above}")
    return "; ".join(said)


def render_table(r: Recipe, answers: list[Answer], console) -> None:
    """One row per group of backends with the same answers; under the table, what each answer sets, what plan says
    there and what fails one step up."""
    print_prose(console, f"What fits per rank: {r.model.name} on {r.gpu.name}, {r.engine.label}. Each answer sets "
                         f"the keys it names (the recipe: max-num-seqs {r.max_num_seqs:,}, max-model-len "
                         f"{r.max_model_len:,}) and is plan's figure there.")
    by_backend: dict[str, list[Answer]] = {}
    for a in answers:
        by_backend.setdefault(a.backend, []).append(a)
    alike: dict[tuple, list[list[Answer]]] = {}
    for found in by_backend.values():
        alike.setdefault(tuple(explained(a, r) for a in found), []).append(found)
    first = next(iter(by_backend.values()))
    rows = [[", ".join(f[0].backend for f in group), *(cell(a) for a in group[0])] for group in alike.values()]
    print_table(console, ["backend", *(header(a) for a in first)], rows, left=(0,), prose=(0,))
    for lines, group in alike.items():
        print_prose(console, f"{', '.join(f[0].backend for f in group)}:")
        for line in lines:
            print_prose(console, f"  {line}")
