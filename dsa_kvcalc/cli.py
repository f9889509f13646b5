"""The dsa-kvcalc command line: a thin typer layer. It checks its own flags, then hands over to recipe, capacity,
calibrate, sweep and verify, and prints what the renderers make of their results."""

import io
import json
import shlex
import shutil
import signal
import sys
from enum import Enum
from pathlib import Path

import typer
from typer._click._textwrap import TextWrapper
from typer.exceptions import TyperException

from dsa_kvcalc import __version__
from dsa_kvcalc.output import OutputError, Outputs, check_targets, outputs, write
from dsa_kvcalc.keys import RecipeError, Refusal
from dsa_kvcalc.streams import console, run, say

# -h folds its text at spaces only: never inside a key at its hyphens (max-num-seqs, not max-num- / seqs). typer
# (pinned below 0.29) formats help with its vendored click, whose wrapper this is.
TextWrapper.wordsep_re = TextWrapper.wordsep_simple_re
REFUSED = 4  # the exit code of a deployment vLLM would refuse to start
EXIT_CODES = ("Exit codes: 0 done; 1 recommend found nothing that meets the targets, or verify found plan and the GPU "
              "differ; 2 bad input (one line, error: KEY: problem), weights that do not fit included; 3 verify has no "
              "usable GPU; 4 vLLM would refuse to start the recipe as written, wherever that is found (a TP that does "
              "not divide the heads, a cache dtype its attention does not take, no KV cache for one request, "
              "max-num-seqs above max-num-batched-tokens; fit: nothing fits); 130 interrupted.")
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Capacity calculator for DeepSeek-Sparse-Attention models on vLLM.", epilog=EXIT_CODES)


def show_version(asked: bool) -> None:
    if asked:
        sys.stdout.write(f"dsa-kvcalc {__version__}\n")
        raise typer.Exit()


@app.callback()
def options(version: bool = typer.Option(False, "--version", callback=show_version, is_eager=True,
                                         help="Print the version and exit")):
    """Capacity calculator for DeepSeek-Sparse-Attention models on vLLM."""


class FixChoice(str, Enum):  # fixes.Fix.name
    seqs = "seqs"
    budget = "budget"
    deep_select = "deep_select"
    kv = "kv"


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"
    serve = "serve"
    vllm_config = "vllm-config"


# -o FILE without --format: the format its suffix names (else a table)
SUFFIX_FORMATS = {".json": Format.json, ".md": Format.markdown, ".csv": Format.csv, ".sh": Format.serve,
                  ".yaml": Format.vllm_config, ".yml": Format.vllm_config}


class ReportFormat(str, Enum):
    table = "table"
    json = "json"


class PickFormat(str, Enum):
    table = "table"
    json = "json"
    serve = "serve"
    vllm_config = "vllm-config"


class CompareFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


class SweepFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"
    table = "table"


def fail(message: str, code: int = 2):
    say(f"error: {message}")
    raise typer.Exit(code)


def guarded(work):
    """Run work(); a RecipeError or OutputError becomes one line and exit 2, a Refusal (vLLM would refuse to start
    the recipe) one line and exit REFUSED."""
    try:
        return work()
    except Refusal as error:
        fail(str(error), REFUSED)
    except (RecipeError, OutputError) as error:
        fail(str(error))


def check_outputs(targets: dict[str, Path | None], inputs: list[Path | None]) -> None:
    """Every output target is checked before any work: a bad one writes nothing at all."""
    guarded(lambda: check_targets(targets, [p for p in inputs if p is not None]))


def emit(chunks, output: Path | None, option: str = "--output", binary: bool = False) -> None:
    if output is None:
        sys.stdout.writelines(chunks)
    else:
        guarded(lambda: write(chunks, output, option, binary))


def check_backends(names: list[str]) -> list[str]:
    from dsa_kvcalc.catalog import BACKENDS

    known = [b.name for b in BACKENDS]
    for name in names:
        if name not in known:
            fail(f"--backend: unknown backend {name!r}; known: {', '.join(known)}")
    return names


def console_text(draw) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    draw(console)
    return console.file.getvalue()


def console_chunks(parts):
    """The text that parts(console), a generator, prints on a 200-column console, passed on part by part."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    for _ in parts(console):
        yield console.file.getvalue()
        console.file.seek(0)
        console.file.truncate()


def for_terminal(text: str) -> str:
    """Text for stdout: on a terminal, broken at spaces to its width (it would break numbers at its edge); in a pipe
    or a file, one line a quantity, as written."""
    from dsa_kvcalc.render import wrapped

    return wrapped(text, shutil.get_terminal_size().columns) if sys.stdout.isatty() else text


SET_HELP = ("Override a recipe key, e.g. --set max-num-seqs=384 --set speculative-config.num_speculative_tokens=3; "
            "a launch script or --command takes gpu this way (--set gpu=B200)")
RECIPE_HELP = ("Recipe YAML (a vllm serve --config file plus model and gpu), or a launch script whose vllm serve line "
               "is read as vLLM reads it")
COMMAND_HELP = "A pasted vllm serve command instead of RECIPE, e.g. --command 'vllm serve MODEL -tp 8' --set gpu=H200"


def recipe_argument():
    return typer.Argument(None, help=RECIPE_HELP, show_default=False)


def command_option():
    return typer.Option(None, "--command", help=COMMAND_HELP)


def one_source(name: str, recipe: Path | None, command: str | None) -> None:
    """A recipe file or a pasted command: exactly one of them (a usage error otherwise, as typer words them)."""
    if recipe is None and command is None:
        fail(f"recipe: missing: a recipe file or launch script, or --command 'vllm serve ...' (see dsa-kvcalc "
             f"{name} --help)")
    if recipe is not None and command is not None:
        fail(f"--command: give a recipe file or --command, not both (see dsa-kvcalc {name} --help)")


def chosen(format: Enum | None, output: Path | None, formats: dict, default: Enum) -> Enum:
    """The format asked for, or the one --output's suffix names, else the default."""
    return format or (formats.get(output.suffix.lower()) if output else None) or default


@app.command()
def plan(
    recipe: Path | None = recipe_argument(),
    command: str | None = command_option(),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    format: Format | None = typer.Option(None, "--format", "-f", help="Default: the one --output's suffix names "
                                         "(.json, .md, .csv, .sh serve, .yaml vllm-config), else table"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout"),
    explain: bool = typer.Option(False, "--explain", help="Print every quantity with its formula and numbers"),
    fix: FixChoice | None = typer.Option(None, "--fix", help="Plan with this fix of the OOM verdict applied (the "
                                         "value plan offers): seqs, budget, deep_select or kv"),
):
    """The answer first, then decode-logits memory per top-k backend, the #62860 reservation, KV-cache tokens per
    rank and the OOM risk. --format serve prints the vllm serve command that deploys it (with --fix, fixed). Exits 4
    when vLLM would refuse to start it."""
    from dsa_kvcalc import planning
    from dsa_kvcalc.fixes import fixes
    from dsa_kvcalc.recipe import load_recipe, load_recipes
    from dsa_kvcalc.render import plan as render
    from dsa_kvcalc.report import answered_backend, selected_refusal
    from dsa_kvcalc.sweep import load_base

    one_source("plan", recipe, command)
    if explain and format not in (None, Format.table):
        fail(f"--explain: prints its formulas as text; drop --format {format.value}")
    check_outputs({"--output": output}, [recipe])
    recipes = guarded(lambda: load_recipes(recipe, set_, command))
    if len(recipes) > 1:
        plan_servers(recipes, format, output, explain)
        return
    result = guarded(lambda: planning.plan(recipes[0][1]))
    found = guarded(lambda: fixes(load_base(recipe, set_, command), result, answered_backend(result)))
    if fix is not None:
        applied = next((f for f in found if f.name == fix.value), None)
        if applied is None:
            offered = ", ".join(f.name for f in found)
            fail(f"--fix {fix.value}: " + (f"not a fix of this verdict; it offers {offered}" if found else
                                           "the plan has no OOM risk to fix"))
        set_ = [*set_, f"{applied.key}={applied.value}"]
        result, found = guarded(lambda: planning.plan(load_recipe(recipe, set_, command))), []
    check_outputs({"--output": output}, [result.recipe.model.config_path])
    format = Format.table if explain else chosen(format, output, SUFFIX_FORMATS, Format.table)
    if format in (Format.serve, Format.vllm_config):
        risk = oom_comment(result, found)
        if risk:
            sys.stderr.write(f"warning: {risk}\n")
        text = guarded(lambda: deployment_text(result.recipe, format, f"planned by dsa-kvcalc {__version__} from "
                                                                        f"{recipe or 'the command'}", risk))
    elif explain:
        text = render.explain(result)
    elif format is Format.json:
        text = render.render_json(result, found)
    elif format is Format.markdown:
        text = render.render_markdown(result, found)
    elif format is Format.csv:
        text = render.render_csv(result)
    elif output is None:
        text = None
        render.render_table(result, console(), found)
    else:
        text = console_text(lambda c: render.render_table(result, c, found))
    if text is not None:
        emit([for_terminal(text) if explain and output is None else text], output)
    refused = selected_refusal(result)
    if refused:
        say(f"error: {result.recipe.engine.label} would refuse to start this deployment: {refused}")
        raise typer.Exit(REFUSED)


def plan_servers(recipes: list, format: Format | None, output: Path | None, explain: bool) -> None:
    """A script that starts several servers (a prefill/decode pair): each planned, side by side, as a table or JSON.
    Exits 4 when vLLM would refuse to start any of them."""
    from dsa_kvcalc import planning
    from dsa_kvcalc.render import plan as render
    from dsa_kvcalc.report import selected_refusal

    format = chosen(format, output, SUFFIX_FORMATS, Format.table)
    if explain or format not in (Format.table, Format.json):
        fail(f"--format: {len(recipes)} servers plan side by side as a table or JSON; plan one at a time for "
             f"{'--explain' if explain else format.value} (put its line in a file of its own)")
    labelled = guarded(lambda: [(label, planning.plan(r)) for label, r in recipes])
    if format is Format.json:
        emit([render.side_by_side_json(labelled)], output)
    elif output is None:
        render.render_side_by_side(labelled, console())
    else:
        emit([console_text(lambda c: render.render_side_by_side(labelled, c))], output)
    refused = [(label, selected_refusal(p)) for label, p in labelled if selected_refusal(p)]
    for label, reason in refused:
        sys.stderr.write(f"error: {label}: {labelled[0][1].recipe.engine.label} would refuse to start it: {reason}\n")
    if refused:
        raise typer.Exit(REFUSED)


def oom_comment(plan, found: list) -> str | None:
    """The verdict a deployment file carries when it deploys the risk."""
    from dsa_kvcalc.report import answered_backend

    o = answered_backend(plan).oom
    if not o.at_risk:
        return None
    offered = [fix.name for fix in found]
    return (f"this deployment runs out of memory above {o.max_decodes} concurrent decodes (max-num-seqs "
            f"{plan.recipe.max_num_seqs}; safe up to {o.safe_decodes}): write it with --fix "
            f"{'|'.join(offered) or '(none offered: see plan)'}")


def deployment_text(recipe, format: Enum, source: str, risk: str | None = None) -> str:
    """The recipe as the vllm serve line (or config file) that deploys it, the OOM verdict on top where it is at
    risk."""
    from dsa_kvcalc.render import serve as render
    from dsa_kvcalc.vllm_args import deployment

    sets = [f"gpu={recipe.gpu.name}", f"vllm-version={recipe.vllm_version}"] + [
        f"memory.{key}={json.dumps(value) if isinstance(value, dict) else value}"
        for key, value in recipe.memory_block().items() if value is not None]
    comments = [*(render.laid_out(["WARNING:", *risk.split()]) if risk else []),
                f"{recipe.engine.label} on {recipe.gpu.name}, {source}",
                *render.laid_out(["plan it again: dsa-kvcalc plan FILE", *(f"--set {shlex.quote(s)}" for s in sets)])]
    draw = render.serve_line if format.value == "serve" else render.vllm_config
    return draw(deployment(recipe), comments)


@app.command()
def models(format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f")):
    """List the model catalog, with sources."""
    show_catalog("models", format)


@app.command()
def gpus(format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f")):
    """List the GPU catalog, with sources."""
    show_catalog("gpus", format)


def show_catalog(name: str, format: ReportFormat) -> None:
    from dsa_kvcalc.render import catalog as render

    if format is ReportFormat.json:
        sys.stdout.write(render.catalog_json(name))
    else:
        render.TABLES[name](console())


@app.command()
def schema(output: Path | None = typer.Option(None, "--output", "-o")):
    """Print the recipe's JSON Schema (for editors)."""
    from dsa_kvcalc.render import json_text
    from dsa_kvcalc.schema import json_schema

    check_outputs({"--output": output}, [])
    emit([json_text(json_schema())], output)


def read_log_file(path: Path, key: str):
    from dsa_kvcalc.vllm_log import read_log_file as read

    return guarded(lambda: read(path, key))


@app.command()
def calibrate(
    log: Path = typer.Argument(..., help="A vLLM startup log (any version since the v1 engine; several ranks is fine)"),
    recipe: Path | None = typer.Option(None, "--recipe", help="Recipe YAML; default: the log's non-default args"),
    after: Path | None = typer.Option(None, "--after", help="A log of the same deployment after vLLM #62860: "
                                                             "derives the indexer headroom"),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP + " (e.g. --set gpu=B200 when the log does not say)"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the calibrated recipe YAML (atomically)"),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
):
    """Read a vLLM startup log, compare it term by term with plan, and write a recipe whose memory block holds it."""
    from dsa_kvcalc import calibrate as calibration
    from dsa_kvcalc.overrides import set_override
    from dsa_kvcalc.recipe import read_recipe
    from dsa_kvcalc.render import calibration as render

    check_outputs({"--output": output}, [log, recipe, after])
    reading = read_log_file(log, "log")

    def work():
        if reading.oom is not None and calibration.sizing_rank(reading) is None and recipe is None:
            raise RecipeError("--recipe", "the log holds an out-of-memory message and no startup lines: give the "
                                          "deployment's recipe")
        if recipe is None:
            raw, notes = calibration.recipe_from_log(reading)
            for assignment in set_:
                set_override(raw, assignment)
            source, recipe_dir = calibration.recipe_source(reading), Path(".")
        else:
            raw, notes = read_recipe(recipe, set_), []
            source, recipe_dir = str(recipe), recipe.parent
        if set_:
            source += " and --set"
        if reading.oom is not None and calibration.sizing_rank(reading) is None:
            result = calibration.calibrate_oom(reading, raw, source, recipe_dir)
        elif after is None:
            result = calibration.calibrate(reading, raw, source, recipe_dir)
        else:
            result = calibration.calibrate_pair(reading, read_log_file(after, "--after"), raw, source, recipe_dir)
        result.notes[:0] = notes
        return result

    result = guarded(work)
    check_outputs({"--output": output}, [result.recipe.model.config_path])
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    text = (render.render_json(result) if format is ReportFormat.json
            else for_terminal(render.render_text(result, width)))
    calibrated = [render.recipe_yaml(result, log.name)] if output is not None else []  # ready before any write
    sys.stdout.write(text)
    if output is not None:
        emit(calibrated, output)


MAX_KV_TOKENS = 1 << 50  # no rank holds more KV tokens than kv-cache-memory-bytes may name bytes
PROGRESS_MIN_POINTS = 2000  # about a fifth of a second of sweeping


def emit_rows(rows, keys: list[str], format: SweepFormat | None, output: Path | None, files: Outputs) -> None:
    """A sweep's rows in the format asked for, or the one --output's suffix names (else a table)."""
    from dsa_kvcalc.render import sweep as render

    suffix = output.suffix.lower() if output else ""
    format = format or {".csv": SweepFormat.csv, ".jsonl": SweepFormat.jsonl}.get(suffix, SweepFormat.table)
    if format is SweepFormat.csv:
        chunks = render.csv_lines(rows)
    elif format is SweepFormat.jsonl:
        chunks = render.jsonl_lines(rows)
    elif output is None:
        render.render_table(keys, rows, console())
        return
    else:
        chunks = console_chunks(lambda c: render.table_parts(keys, rows, c))
    if output is None:
        sys.stdout.writelines(chunks)
    else:
        files.write(chunks, output)


def plot_module():
    """plot.py, once matplotlib is known to load."""
    from dsa_kvcalc import plot as plotting

    try:
        plotting.load_pyplot()
    except ImportError:
        fail("--plot: needs matplotlib (pip install '.[plot]' in the checkout)")
    return plotting


@app.command()
def sweep(
    recipe: Path | None = recipe_argument(),
    command: str | None = command_option(),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    vary: list[str] = typer.Option([], "--vary", help="KEY=SPEC: any recipe key (dotted for nested keys), SPEC a "
                                                      "range start:stop:step (stop included) or a comma list; repeat "
                                                      "for the cartesian product"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to show (repeat); default: all available"),
    format: SweepFormat | None = typer.Option(None, "--format", "-f", help="Default: csv for --output *.csv, jsonl "
                                                                          "for *.jsonl, else table"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout"),
    plot: Path | None = typer.Option(None, "--plot", help="Also write a PNG of KV tokens against the first varied "
                                                          "key, a panel per value of the second, the OOM bound "
                                                          "marked (and the reservation, where it moves)"),
):
    """Plan every point of the varied keys' product: one row per point and backend (plan's JSON, flattened)."""
    from rich.progress import Progress

    from dsa_kvcalc import sweep as sweeping

    one_source("sweep", recipe, command)
    check_backends(backend)
    check_outputs({"--output": output, "--plot": plot}, [recipe])
    varies = guarded(lambda: sweeping.parse_varies(vary))
    base = guarded(lambda: sweeping.load_base(recipe, set_, command))
    check_outputs({"--output": output, "--plot": plot}, sweeping.model_configs(base, varies))
    plotting = None if plot is None else plot_module()
    keys = [v.key for v in varies]
    total = sweeping.point_count(varies)
    failures = sweeping.Failures()
    show_progress = total >= PROGRESS_MIN_POINTS and sys.stderr.isatty()

    def write_outputs():  # --output and --plot land together, or neither does
        with outputs() as files, Progress(console=console(stderr=True), transient=True,
                                          disable=not show_progress) as progress:
            points = sweeping.points(varies)
            if show_progress:
                points = progress.track(points, total=total, description=f"{total:,} points")
            rows = sweeping.rows(base, varies, backend, points, failures)
            if plot is not None:
                series = plotting.Series(keys, sweeping.title(base, varies))
                rows = series.tap(rows)
            emit_rows(rows, keys, format, output, files)
            if plot is not None:
                files.write([plotting.png_bytes(series)], plot, "--plot", binary=True)

    guarded(write_outputs)
    if failures.count:
        say(f"warning: {failures.count:,} of {total:,} points failed (rows with an error column); first: "
            f"{failures.first}")


@app.command()
def recommend(
    recipe: Path | None = recipe_argument(),
    command: str | None = command_option(),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    target_concurrency: int = typer.Option(..., "--target-concurrency", help="Requests each rank (one vLLM engine) "
                                                                              "must run at once: max-num-seqs >= N"),
    min_kv_tokens: int = typer.Option(..., "--min-kv-tokens", help="KV-cache tokens each rank must hold"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to consider (repeat); default: all "
                                                            "available"),
    max_spec_tokens: int | None = typer.Option(None, "--max-spec-tokens", help="Also try 0..K speculative tokens; "
                                                                               "default: the recipe's count only"),
    format: PickFormat = typer.Option(PickFormat.table, "--format", "-f", help="serve or vllm-config: the pick as the "
                                                                                "vllm serve line that deploys it"),
):
    """The largest max-num-seqs (then spec tokens, then backend) that meets the targets, and what stops one more."""
    from dsa_kvcalc import planning, sweep as sweeping, values
    from dsa_kvcalc.keys import KEYS
    from dsa_kvcalc.render import sweep as render

    one_source("recommend", recipe, command)
    check_backends(backend)

    def work():
        values.check_value("--target-concurrency", KEYS["max_num_seqs"], target_concurrency)
        if not 0 <= min_kv_tokens <= MAX_KV_TOKENS:
            raise RecipeError("--min-kv-tokens", f"must be at least 0 and at most {MAX_KV_TOKENS:,}, got "
                                                 f"{min_kv_tokens:,}")
        if max_spec_tokens is not None:
            values.check_value("--max-spec-tokens", KEYS["num_speculative_tokens"], max_spec_tokens)
        base = sweeping.load_base(recipe, set_, command)
        first = planning.plan(sweeping.recipe_at(base, {}))
        spec_tokens = (list(range(max_spec_tokens, -1, -1)) if max_spec_tokens is not None
                       else [first.recipe.num_speculative_tokens])
        return base, sweeping.recommend(base, target_concurrency, min_kv_tokens, backend, spec_tokens)

    base, candidates = guarded(work)
    best = candidates[0] if candidates and candidates[0].max_num_seqs is not None else None
    if format is PickFormat.json:
        sys.stdout.write(render.recommendation_json(candidates, target_concurrency, min_kv_tokens))
    elif format is PickFormat.table:
        render.render_recommendation(candidates, target_concurrency, min_kv_tokens,
                                     base.recipe.data_parallel_size, console())
    elif best is not None:
        pick = guarded(lambda: sweeping.recipe_at(base, sweeping.pick_point(best)))
        sys.stdout.write(guarded(lambda: deployment_text(pick, format, f"recommended by dsa-kvcalc {__version__} for "
                                                                       f"{target_concurrency} requests per rank")))
    if best is None:
        if format in (PickFormat.serve, PickFormat.vllm_config):
            sys.stderr.write("error: no setting meets the targets (see recommend's table for why)\n")
        raise typer.Exit(1)


@app.command()
def compare(
    recipes: list[Path] = typer.Argument(None, help="Two or more recipes (or launch scripts); one with --across",
                                         show_default=False),
    command: list[str] = typer.Option([], "--command", help="A pasted vllm serve command, as a column (repeat)"),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP + "; applies to every column"),
    across: list[str] = typer.Option([], "--across", help="KEY=V1,V2,...: one column a value (any recipe key: "
                                                          "vllm-version, gpu, tensor-parallel-size, ...); repeat to "
                                                          "change several keys together, the n-th values in the n-th "
                                                          "column"),
    format: CompareFormat | None = typer.Option(None, "--format", "-f", help="Default: the one --output's suffix "
                                                                            "names (.json, .md), else table"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout"),
):
    """What changes between deployments: one column a plan, the rows that differ first (verdict, KV tokens,
    concurrency, OOM bound and fix, reservation, graphs, weights, the recipe as vLLM resolves it), then the vLLM
    rules that differ between their releases, with citations. Exits 4 when vLLM would refuse to start a column."""
    from dsa_kvcalc import compare as comparing, sweep as sweeping
    from dsa_kvcalc.recipe import load_recipe
    from dsa_kvcalc.render import compare as render

    recipes = recipes or []
    names = [path.stem if [p.stem for p in recipes].count(path.stem) == 1 else str(path) for path in recipes]
    sources = [(name, path, None) for name, path in zip(names, recipes)]
    sources += [(f"--command {i}" if len(command) > 1 else "--command", None, text) for i, text in enumerate(command, 1)]
    if across and len(sources) != 1:
        fail(f"--across: compares one recipe across values; give one recipe or --command, not {len(sources)} "
             f"(see dsa-kvcalc compare --help)")
    if not across and len(sources) < 2:
        fail("recipes: give two or more recipes (or --command), or one with --across KEY=V1,V2 (see dsa-kvcalc "
             "compare --help)")
    check_outputs({"--output": output}, recipes)

    def work():
        if across:
            (_, path, text), = sources
            return comparing.across(sweeping.load_base(path, set_, text), sweeping.parse_varies(across, "--across"))
        return [comparing.planned(label, lambda: load_recipe(path, set_, text)) for label, path, text in sources]

    columns = guarded(work)
    corner = ", ".join(text.split("=", 1)[0].strip() for text in across)
    format = chosen(format, output, {".json": CompareFormat.json, ".md": CompareFormat.markdown},
                    CompareFormat.table)
    if format is CompareFormat.json:
        text = render.render_json(columns, corner)
    elif format is CompareFormat.markdown:
        text = render.render_markdown(columns, corner)
    elif output is None:
        text = None
        render.render_table(columns, corner, console())
    else:
        text = console_text(lambda c: render.render_table(columns, corner, c))
    if text is not None:
        emit([text], output)
    for column in columns:
        if column.refused is not None:
            say(f"error: {column.label}: {column.refused}")
    if any(column.refused is not None for column in columns):
        raise typer.Exit(REFUSED)


@app.command()
def fit(
    recipe: Path | None = recipe_argument(),
    command: str | None = command_option(),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    concurrency: int | None = typer.Option(None, "--concurrency", help="Requests at once for the longest "
                                                                       "max-model-len; default: the recipe's "
                                                                       "max-num-seqs"),
    max_model_len: str | None = typer.Option(None, "--max-model-len", help="Context for the most requests at once "
                                                                           "(8192, 128k, 1M); default: the recipe's"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend (repeat); default: the available ones"),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
):
    """What fits per rank: the longest max-model-len at a concurrency, the most requests at a max-model-len, the
    largest max-num-seqs vLLM starts with. Exits 4 when nothing fits."""
    from dsa_kvcalc import fit as fitting, sweep as sweeping
    from dsa_kvcalc.keys import KEYS
    from dsa_kvcalc.values import check_value
    from dsa_kvcalc.render import fit as render

    one_source("fit", recipe, command)
    check_backends(backend)

    def work():
        base = sweeping.load_base(recipe, set_, command)
        r = base.recipe
        held = check_value("--concurrency", KEYS["max_num_seqs"], concurrency or r.max_num_seqs)
        length = check_value("--max-model-len", KEYS["max_model_len"], max_model_len or r.max_model_len)
        return r, fitting.fits(base, backend, held, length or r.model.max_position_embeddings)

    r, answers = guarded(work)
    if format is ReportFormat.json:
        sys.stdout.write(render.render_json(r, answers))
    else:
        render.render_table(r, answers, console())
    if all(a.largest is None for a in answers):
        raise typer.Exit(REFUSED)


@app.command()
def verify(
    recipe: Path | None = typer.Argument(None, help="Recipe YAML; default: the bundled recipes re-planned for this "
                                                    "GPU plus widths that are not multiples of the padding"),
    gpu: bool = typer.Option(False, "--gpu", help="Run the live DeepGEMM pass on the local GPU (needs torch, DeepGEMM)"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to check (repeatable); default: all the "
                                                            "recipe's GPU runs"),
    format: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f"),
    as_local: bool = typer.Option(False, "--as-local", help="Re-plan the recipe for the local GPU"),
    profile: bool = typer.Option(False, "--profile", help="Replay vLLM's memory accounting with what this GPU measures"),
    reproduce_oom: bool = typer.Option(False, "--reproduce-oom", help="Leave only what an unfixed vLLM leaves free and "
                                                                      "grow the decode count until it fails"),
):
    """Measure the decode logits on the local GPU with DeepGEMM and compare them with plan, byte for byte."""
    from dsa_kvcalc import verify as checking
    from dsa_kvcalc.recipe import load_recipe
    from dsa_kvcalc.render import verify as render

    if not gpu:
        fail("--gpu: verify runs the live pass on the local GPU; pass --gpu")
    backends = check_backends(backend)
    if recipe is not None:
        guarded(lambda: load_recipe(recipe))
    from dsa_kvcalc import gpu as live

    try:
        env = live.probe()
        target = checking.local_target(env)
        shapes = guarded(lambda: checking.builtin_shapes(target) if recipe is None
                         else checking.recipe_shapes(recipe, target, as_local))
        report = guarded(lambda: live.run_verify(shapes, backends, env, target, profile, reproduce_oom))
    except checking.Unavailable as error:
        fail(str(error), 3)
    if format is ReportFormat.json:
        sys.stdout.write(render.render_json(report))
    else:
        render.render_table(report, console())
    raise typer.Exit(report["exit_code"])


def usage_line(error: TyperException) -> str:
    """One of typer's usage errors as `KEY: problem (see COMMAND --help)`, naming the option or argument as the
    command line spells it. The classes are typer's vendored click exceptions, told apart by name."""
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx else "dsa-kvcalc"
    kind, param, option = type(error).__name__, getattr(error, "param", None), getattr(error, "option_name", None)
    message = error.message.removeprefix("Value error, ").rstrip(".")
    if param is not None:
        key = max(param.opts, key=len)
        problem = "missing" if kind == "MissingParameter" else message
    elif kind == "NoSuchOption":
        possible = getattr(error, "possibilities", None)
        key, problem = option, "no such option" + (f" (did you mean {', '.join(possible)}?)" if possible else "")
    elif option:
        key, problem = option, message.removeprefix(f"Option '{option}' ")
    else:
        key, problem = command, message[:1].lower() + message[1:]
    return f"{key}: {problem} (see {command} --help)"


def main(args: list[str] | None = None):
    """The console script: a stdout that cannot take the output is handled as streams.run says."""
    sys.exit(run(lambda: exit_code(args)))


def exit_code(args: list[str] | None) -> int:
    """The command's exit code. Usage errors are one line, like every other error; no arguments print the help."""
    try:
        return app(args=args, prog_name="dsa-kvcalc", standalone_mode=False) or 0
    except TyperException as error:  # typer's usage errors (bad option, missing argument)
        if type(error).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(error.message + "\n")
            return 0
        say(f"error: {usage_line(error)}")
        return error.exit_code
    except (KeyboardInterrupt, typer.Abort):  # Ctrl-C: the shell's convention, and no traceback
        return 128 + signal.SIGINT
