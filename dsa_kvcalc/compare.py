"""What changes between deployments: two or more recipes, or one recipe across values of its keys (--across, the
n-th values of each key together). Each column is a plan; each row one figure of plan's own JSON (its summary, the
answered backend's figures, its memory terms and its resolved recipe), and the vLLM rules whose values differ
between the columns' releases (engine.VLLM_RULES), with the changes between them and their citations. Pure: plans
in, rows out; render/compare.py words them."""

from dataclasses import dataclass

from dsa_kvcalc import planning
from dsa_kvcalc.capacity import Plan
from dsa_kvcalc.engine import VLLM_RULES, plain
from dsa_kvcalc.keys import RecipeError, Refusal, flatten_keys
from dsa_kvcalc.report import plan_json
from dsa_kvcalc.sweep import Base, Vary, recipe_at


@dataclass(frozen=True)
class Column:
    label: str  # the file, the command, or the values across (their keys head the table)
    plan: Plan | None  # None: vLLM would refuse to start it before any memory is counted
    json: dict | None  # plan's JSON, which every row reads
    refused: str | None  # why vLLM would not start it (a check at start-up, or the plan's own verdict)


def planned(label: str, load) -> Column:
    """The column of the recipe load() gives; a recipe vLLM would refuse is a column that says why."""
    try:
        plan = planning.plan(load())
    except Refusal as error:
        return Column(label, None, None, str(error))
    j = plan_json(plan)
    refused = j["summary"]["refused"]
    return Column(label, plan, j, refused and f"{plan.recipe.engine.label} would refuse to start this deployment: "
                                              f"{refused}")


def across(base: Base, varies: list[Vary]) -> list[Column]:
    """One column for each n-th value of every --across key, together."""
    counts = {len(vary.values) for vary in varies}
    if len(counts) > 1:
        raise RecipeError("--across", f"give each key as many values (one column takes the n-th of each): "
                                      f"{', '.join(f'{v.key} has {len(v.values)}' for v in varies)}")
    columns = []
    for values in zip(*(vary.values for vary in varies)):
        point = {vary.key: value for vary, value in zip(varies, values)}
        label = ", ".join(str(value).lower() if isinstance(value, bool) else str(value) for value in values)
        columns.append(planned(label, lambda: recipe_at(base, point)))
    return columns


def oom_above(j: dict) -> int | bool:
    """The decodes above which the release runs out of memory, or False where it is not at risk."""
    risk = j["summary"]["oom"]
    return risk["at_risk"] and risk["max_decodes"]


def safe_decodes(j: dict) -> int | None:
    """The decodes plan calls safe, a margin below the edge, where the release is at risk (plan's fixes for one
    column: `plan --set` the column's values)."""
    risk = j["summary"]["oom"]
    return risk["safe_decodes"] if risk["at_risk"] else None


def compared(j: dict) -> dict | None:
    """The backend plan compares with the answered one, or deep_select where it cannot run here."""
    other, unavailable = j["summary"]["compared"], j["summary"]["deep_select_unavailable"]
    if other is None:
        return unavailable and {"backend": "deep_select", "unavailable": unavailable}
    return {key: other[key] for key in ("backend", "kv_cache_tokens", "kv_cache_tokens_vs_answered")}


# Rows: (key, where it is read in a plan's JSON). The answer's rows read the summary (the answered backend: the
# recipe's own where it runs) and that backend's figures.
ANSWER_ROWS = (
    ("backend", lambda j, b: j["summary"]["backend"]),
    ("kv_cache_tokens", lambda j, b: j["summary"]["kv_cache_tokens"]),
    ("max_concurrency", lambda j, b: j["summary"]["max_concurrency"]),
    ("deployment_kv_cache_tokens", lambda j, b: j["summary"]["deployment_kv_cache_tokens"]),
    ("oom_above_decodes", lambda j, b: oom_above(j)),
    ("safe_decodes", lambda j, b: safe_decodes(j)),
    ("compared", lambda j, b: compared(j)),
    ("reservation", lambda j, b: b["reservation"]),
    ("reserved_bytes", lambda j, b: b["reserved_bytes"]),
    ("kv_cache_tokens_other_side_of_fix", lambda j, b: b["other_side_of_fix"]["kv_cache_tokens"]),
    ("cudagraph_bytes", lambda j, b: b["cudagraph_bytes"]),
    ("weights_bytes", lambda j, b: j["memory"]["weights_bytes"]),
    ("peak_activation_bytes", lambda j, b: b["peak_activation_bytes"]),
    ("non_torch_bytes", lambda j, b: j["memory"]["non_torch_bytes"]),
    ("kv_cache_bytes", lambda j, b: b["kv_cache_bytes"]),
    ("rules_of", lambda j, b: j["summary"]["rules_of"]),
)


@dataclass(frozen=True)
class Row:
    key: str  # an ANSWER_ROWS key, "recipe.KEY" (a resolved recipe key) or "rule.NAME" (a VLLM_RULES rule)
    values: list  # one a column; None where it does not apply (a column vLLM refuses before planning)
    differs: bool  # between the columns that were planned


def row(key: str, values: list, columns: list[Column], alone: bool = True) -> Row:
    """A row differs where two planned columns differ; with one planned column, every answer's row (alone) tells
    it apart from the columns vLLM refuses."""
    planned = [value for value, column in zip(values, columns) if column.plan is not None]
    return Row(key, values, (alone and len(planned) < 2) or any(value != planned[0] for value in planned))


def answered(j: dict) -> dict:
    return next(b for b in j["backends"] if b["backend"] == j["summary"]["backend"])


def rows(columns: list[Column]) -> list[Row]:
    """The answer's rows (the deployment's KV tokens where a column is data parallel), then the resolved recipe's,
    then the rules': each figure as plan's JSON gives it."""
    planned_json = [c.json for c in columns]
    found = [Row("verdict", [c.refused for c in columns], any(c.refused != columns[0].refused for c in columns))]
    data_parallel = any(j is not None and j["summary"]["data_parallel_size"] > 1 for j in planned_json)
    found += [row(key, [None if j is None else read(j, answered(j)) for j in planned_json], columns)
              for key, read in ANSWER_ROWS if data_parallel or key != "deployment_kv_cache_tokens"]
    recipes = [None if j is None else flatten_keys(j["recipe"]) for j in planned_json]
    keys = dict.fromkeys(key for recipe in recipes if recipe for key in recipe)
    found += [row(f"recipe.{key}", [None if recipe is None else recipe.get(key) for recipe in recipes], columns,
                  False) for key in keys]
    found += [row(f"rule.{name}", [None if j is None else j["engine"]["rules"][name]["value"] for j in planned_json],
                  columns, False) for name in VLLM_RULES]
    return found


def rule_changes(columns: list[Column], name: str) -> dict:
    """One rule between the columns' oldest release and their newest: its value in the oldest, then each change up to
    the newest, with its source (none between engines without a release order)."""
    versions = {c.plan.recipe.engine.version for c in columns
                if c.plan is not None and c.plan.recipe.engine.name == "vllm"}
    if not versions:
        return {"oldest": None, "changes": []}
    oldest, changes = VLLM_RULES[name].between(versions)
    return {"oldest": plain(oldest),
            "changes": [{"release": change.release, "value": plain(change.value), "source": change.source}
                        for change in changes]}
