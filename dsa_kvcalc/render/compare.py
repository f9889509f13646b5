"""compare's columns as a table (the rows that differ first), markdown and JSON. No arithmetic: every figure is a
value of plan's JSON, read by compare.rows."""


from dsa_kvcalc.compare import Column, Row, rule_changes, rows
from dsa_kvcalc.engine import ALL
from dsa_kvcalc.render import gib, json_text, print_table, print_prose
from dsa_kvcalc.report import TOOL


def tokens(value) -> str:
    return f"{value:,}"


def compared(value: dict) -> str:
    if "unavailable" in value:
        return f"{value['backend']} cannot run here"
    change = value["kv_cache_tokens_vs_answered"]
    return f"{value['backend']} {value['kv_cache_tokens']:,}" + ("" if change is None else f" ({change:+.1%})")


# key -> (label, how a value is shown). None is shown as nothing (a row that does not apply to a column).
ANSWER_LABELS = {
    "verdict": ("vLLM starts", None),  # shown by verdict()
    "backend": ("answered for", str),
    "kv_cache_tokens": ("KV tokens/rank", tokens),
    "max_concurrency": ("requests of max-model-len", lambda v: f"{v:.2f}"),
    "deployment_kv_cache_tokens": ("KV tokens, x DP", tokens),
    "oom_above_decodes": ("OOM", lambda v: f">{v:,} decodes" if v else "no"),
    "safe_decodes": ("safe decodes", tokens),
    "compared": ("instead", compared),
    "reservation": ("reservation", str),
    "reserved_bytes": ("reserved GiB", gib),
    "kv_cache_tokens_other_side_of_fix": ("tokens, other side of fix", tokens),
    "cudagraph_bytes": ("CUDA graphs GiB", gib),
    "weights_bytes": ("weights GiB", gib),
    "peak_activation_bytes": ("peak activation GiB", gib),
    "non_torch_bytes": ("non-torch GiB", gib),
    "kv_cache_bytes": ("KV GiB/rank", gib),
    "rules_of": ("rules of vLLM", str),
}
CAPTION = ("safe decodes: where the release is at risk, the decodes that fit with plan's margin below the edge (plan "
           "--set the column's values for its fixes); instead: the "
           "top-k backend plan compares with the answered one (deep_select against auto); tokens, "
           "other side of fix: with vLLM #62860 where the release has it not, without it where it has; reservation: "
           "what the release's profile run reserves for the indexer's logits")


def shown(value) -> str:
    """A rule's or a recipe key's value, short: yes/no, lists joined, all for every architecture."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, frozenset, set)) and all(isinstance(v, str) for v in value):
        return "all" if list(value) == [ALL] else ", ".join(sorted(value)) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {shown(v)}" for k, v in value.items()) or "none"
    return "none" if value is None else str(value)


def verdict(column: Column, notes: dict[str, int]) -> str:
    if column.refused is None:
        return "yes"
    return f"no [{notes.setdefault(f'{column.label}: {column.refused}', len(notes) + 1)}]"


def cells(row: Row, columns: list[Column], notes: dict[str, int]) -> list[list[str]]:
    """A row as the table shows it: one line."""
    if row.key == "verdict":
        return [[ANSWER_LABELS["verdict"][0], *(verdict(c, notes) for c in columns)]]
    if row.key.startswith("recipe."):  # a nested key by its last part: num_speculative_tokens
        return [[row.key.rsplit(".", 1)[-1], *("" if v is None else shown(v) for v in row.values)]]
    label, show = ANSWER_LABELS[row.key]
    return [[label, *("" if v is None else show(v) for v in row.values)]]


def title(columns: list[Column]) -> str:
    """What every planned column shares (the model, the GPU, the release), or that it differs."""
    recipes = [c.plan.recipe for c in columns if c.plan is not None]
    shared = [(what, {name(r) for r in recipes}) for what, name in (
        ("models", lambda r: r.model.name), ("GPUs", lambda r: r.gpu.name), ("engines", lambda r: r.engine.label))]
    return "Compared per rank: " + ", ".join(names.pop() if len(names) == 1 else f"{what} varied"
                                             for what, names in shared)


def cited(source: str) -> str:
    """A rule's source as its citation: the release, the file and the lines (the text before its first ': ')."""
    return source.split(": ", 1)[0]


def change(before, after) -> str:
    """What a rule's value became: a list of names as what joined and left it, a mapping as its new entries."""
    if isinstance(before, list) and isinstance(after, list):
        return ", ".join([f"+{v}" for v in after if v not in before] + [f"-{v}" for v in before if v not in after])
    if isinstance(before, dict) and isinstance(after, dict):
        return shown({k: v for k, v in after.items() if before.get(k) != v})
    return shown(after)


def changed_rules(columns: list[Column], found: list[Row]) -> list[str]:
    """Each vLLM rule whose value differs between the columns: its value in the oldest release, then each change up
    to the newest with its citation (or, between engines without a release order, each column's value)."""
    lines = []
    for row in found:
        if row.key.startswith("rule.") and row.differs:
            name = row.key.removeprefix("rule.")
            history = rule_changes(columns, name)
            if not history["changes"]:
                lines.append(f"{name}: " + " | ".join("" if v is None else shown(v) for v in row.values))
                continue
            steps, before = [], history["oldest"]
            for step in history["changes"]:
                steps.append(f" -> {change(before, step['value'])} in {step['release']} ({cited(step['source'])})")
                before = step["value"]
            lines.append(f"{name}: {shown(history['oldest'])}" + "".join(steps))
    return lines


def shown_rows(found: list[Row]) -> list[Row]:
    """The rows the table shows: those that differ, the rules apart."""
    return [row for row in found if row.differs and not row.key.startswith("rule.")]


def render_table(columns: list[Column], corner: str, console) -> None:
    """corner heads the labels' column: the keys --across varies (the columns are their values)."""
    found = rows(columns)
    notes: dict[str, int] = {}
    header = [corner, *(c.label for c in columns)]
    differing = shown_rows(found)
    same = [row for row in found if not row.differs and not row.key.startswith(("rule.", "recipe.", "verdict"))
            and row.values[0] is not None]
    print_prose(console, title(columns))
    print_table(console, header, [line for row in differing for line in cells(row, columns, notes)],
                prose=range(1, len(header)))
    for note, number in notes.items():
        print_prose(console, f"[{number}] {note}")
    if same:
        print_prose(console, "the same in every column: " + "; ".join(
            f"{line[0]} {line[1]}" for row in same for line in cells(row, columns, {})))
    rules = changed_rules(columns, found)
    if rules:
        print_prose(console, "vLLM rules that differ between the columns (engine.py VLLM_RULES): the oldest "
                             "release's value, then each change and the first release with it:")
        for line in rules:
            print_prose(console, f"  {line}")
    print_prose(console, CAPTION)


def render_markdown(columns: list[Column], corner: str) -> str:
    found = rows(columns)
    notes: dict[str, int] = {}
    differing = shown_rows(found)
    table = [line for row in differing for line in cells(row, columns, notes)]
    lines = [f"**{title(columns)}**", "", f"| {corner} | " + " | ".join(c.label for c in columns) + " |",
             "|" + "---|" * (len(columns) + 1), *("| " + " | ".join(line) + " |" for line in table), ""]
    lines += [f"- [{number}] {note}" for note, number in notes.items()]
    lines += [f"- vLLM rule {line}" for line in changed_rules(columns, found)]
    lines += ["", CAPTION]
    return "\n".join(lines) + "\n"


def render_json(columns: list[Column], corner: str) -> str:
    found = rows(columns)
    rules = [{"rule": row.key.removeprefix("rule."), "values": row.values}
             | rule_changes(columns, row.key.removeprefix("rule.")) for row in found
             if row.key.startswith("rule.") and row.differs]
    return json_text({"tool": TOOL, "across": corner or None,
                      "columns": [{"label": c.label, "refused": c.refused} for c in columns],
                      "rows": [{"key": row.key, "values": row.values, "differs": row.differs} for row in found
                               if not row.key.startswith("rule.")],
                      "rules_changed": rules})
