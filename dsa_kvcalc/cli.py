"""The dsa-kvcalc command line: a thin typer layer. It checks its own flags, then hands over to recipe, capacity,
calibrate, sweep and verify, and prints what the renderers make of their results."""

import io
import json
import signal
import sys
from enum import Enum
from pathlib import Path

import typer
from typer.exceptions import TyperException

from dsa_kvcalc.output import OutputError, Outputs, check_targets, outputs, write
from dsa_kvcalc.recipe import RecipeError
from dsa_kvcalc.streams import Stream, StreamError, console, printable

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, help="Capacity calculator for DeepSeek-Sparse-Attention models on vLLM.")


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


class ReportFormat(str, Enum):
    table = "table"
    json = "json"


class SweepFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"
    table = "table"


def fail(message: str, code: int = 2):
    sys.stderr.write(f"error: {printable(message)}\n")
    raise typer.Exit(code)


def guarded(work):
    """Run work(); a RecipeError or OutputError becomes one line and exit 2."""
    try:
        return work()
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


SET_HELP = "Override a recipe key, e.g. --set max-num-seqs=384 --set speculative-config.num_speculative_tokens=3"


@app.command()
def plan(
    recipe: Path = typer.Argument(..., help="Recipe YAML (a vllm serve --config file plus model and gpu)"),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    format: Format = typer.Option(Format.table, "--format", "-f"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout"),
    explain: bool = typer.Option(False, "--explain", help="Print every quantity with its formula and numbers"),
):
    """Decode-logits memory per top-k backend, the #62860 reservation, KV-cache tokens per rank, OOM risk."""
    from dsa_kvcalc import capacity
    from dsa_kvcalc.recipe import load_recipe
    from dsa_kvcalc.render import plan as render

    if explain and format is not Format.table:
        fail(f"--explain: prints its formulas as text; drop --format {format.value}")
    check_outputs({"--output": output}, [recipe])
    result = guarded(lambda: capacity.plan(load_recipe(recipe, set_)))
    check_outputs({"--output": output}, [result.recipe.model.config_path])
    if explain:
        text = render.explain(result)
    elif format is Format.json:
        text = render.render_json(result)
    elif format is Format.markdown:
        text = render.render_markdown(result)
    elif format is Format.csv:
        text = render.render_csv(result)
    elif output is None:
        render.render_table(result, console())
        return
    else:
        text = console_text(lambda c: render.render_table(result, c))
    emit([text], output)


@app.command()
def models():
    """List the model catalog, with sources."""
    from dsa_kvcalc.render.catalog import render_models

    render_models(console())


@app.command()
def gpus():
    """List the GPU catalog, with sources."""
    from dsa_kvcalc.render.catalog import render_gpus

    render_gpus(console())


@app.command()
def schema(output: Path | None = typer.Option(None, "--output", "-o")):
    """Print the recipe's JSON Schema (for editors)."""
    from dsa_kvcalc.recipe import json_schema

    check_outputs({"--output": output}, [])
    emit([json.dumps(json_schema(), indent=2) + "\n"], output)


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
    from dsa_kvcalc.recipe import read_recipe, set_override
    from dsa_kvcalc.render import calibration as render

    check_outputs({"--output": output}, [log, recipe, after])
    reading = read_log_file(log, "log")

    def work():
        if recipe is None:
            raw, notes = calibration.recipe_from_log(reading)
            for assignment in set_:
                set_override(raw, assignment)
            source, recipe_dir = "from the log's non-default args", Path(".")
        else:
            raw, notes = read_recipe(recipe, set_), []
            source, recipe_dir = str(recipe), recipe.parent
        if set_:
            source += " and --set"
        if after is None:
            result = calibration.calibrate(reading, raw, source, recipe_dir)
        else:
            result = calibration.calibrate_pair(reading, read_log_file(after, "--after"), raw, source, recipe_dir)
        result.notes[:0] = notes
        return result

    result = guarded(work)
    check_outputs({"--output": output}, [result.recipe.model.config_path])
    text = render.render_json(result) if format is ReportFormat.json else render.render_text(result)
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


@app.command()
def sweep(
    recipe: Path = typer.Argument(..., help="Recipe YAML"),
    vary: list[str] = typer.Option([], "--vary", help="KEY=SPEC: any recipe key (dotted for nested keys), SPEC a "
                                                      "range start:stop:step (stop included) or a comma list; repeat "
                                                      "for the cartesian product"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to show (repeat); default: all available"),
    format: SweepFormat | None = typer.Option(None, "--format", "-f", help="Default: csv for --output *.csv, jsonl "
                                                                          "for *.jsonl, else table"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead of stdout"),
    plot: Path | None = typer.Option(None, "--plot", help="Also write a PNG of KV tokens and the decode-logits "
                                                          "reservation against the first varied key"),
):
    """Plan every point of the varied keys' product: one row per point and backend (plan's JSON, flattened)."""
    from rich.progress import Progress

    from dsa_kvcalc import sweep as sweeping
    from dsa_kvcalc.recipe import read_recipe

    check_backends(backend)
    check_outputs({"--output": output, "--plot": plot}, [recipe])
    varies = guarded(lambda: sweeping.parse_varies(vary))
    base = guarded(lambda: sweeping.base_of(read_recipe(recipe), recipe.parent))
    check_outputs({"--output": output, "--plot": plot}, sweeping.model_configs(base, varies))
    if plot is not None:
        from dsa_kvcalc import plot as plotting

        try:
            plotting.load_pyplot()
        except ImportError:
            fail("--plot: needs matplotlib (pip install '.[plot]' in the checkout)")
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
                series = plotting.Series(keys)
                rows = series.tap(rows)
            emit_rows(rows, keys, format, output, files)
            if plot is not None:
                files.write([plotting.png_bytes(series)], plot, "--plot", binary=True)

    guarded(write_outputs)
    if failures.count:
        sys.stderr.write(f"warning: {failures.count:,} of {total:,} points failed (rows with an error column); "
                         f"first: {printable(failures.first)}\n")


@app.command()
def recommend(
    recipe: Path = typer.Argument(..., help="Recipe YAML"),
    target_concurrency: int = typer.Option(..., "--target-concurrency", help="Requests each rank (one vLLM engine) "
                                                                              "must run at once: max-num-seqs >= N"),
    min_kv_tokens: int = typer.Option(..., "--min-kv-tokens", help="KV-cache tokens each rank must hold"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to consider (repeat); default: all "
                                                            "available"),
    max_spec_tokens: int | None = typer.Option(None, "--max-spec-tokens", help="Also try 0..K speculative tokens; "
                                                                               "default: the recipe's count only"),
):
    """The largest max-num-seqs (then spec tokens, then backend) that meets the targets, and what stops one more."""
    from dsa_kvcalc import capacity, sweep as sweeping
    from dsa_kvcalc.recipe import KEYS, check_value, read_recipe
    from dsa_kvcalc.render import sweep as render

    check_backends(backend)

    def work():
        check_value("--target-concurrency", KEYS["max_num_seqs"], target_concurrency)
        if not 0 <= min_kv_tokens <= MAX_KV_TOKENS:
            raise RecipeError("--min-kv-tokens", f"must be at least 0 and at most {MAX_KV_TOKENS:,}, got "
                                                 f"{min_kv_tokens:,}")
        if max_spec_tokens is not None:
            check_value("--max-spec-tokens", KEYS["num_speculative_tokens"], max_spec_tokens)
        base = sweeping.base_of(read_recipe(recipe), recipe.parent)
        first = capacity.plan(sweeping.recipe_at(base, {}))
        spec_tokens = (list(range(max_spec_tokens, -1, -1)) if max_spec_tokens is not None
                       else [first.recipe.num_speculative_tokens])
        return first.recipe, sweeping.recommend(base, target_concurrency, min_kv_tokens, backend, spec_tokens)

    first, candidates = guarded(work)
    render.render_recommendation(candidates, target_concurrency, min_kv_tokens, first.data_parallel_size, console())
    if not candidates or candidates[0].max_num_seqs is None:
        raise typer.Exit(1)


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
    """The console script. stdout and stderr are written as streams.py says (and restored afterwards): a stdout that
    cannot take the output is one line and exit 2, or exit 1 when its reader went away (| head)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Stream(sys.stdout, product=True), Stream(sys.stderr, product=False)
    try:
        code = exit_code(args)
        sys.stdout.flush()
    except StreamError as error:
        code = 1 if error.reader_gone else 2
        if not error.reader_gone:
            sys.stderr.write(f"error: {error}\n")
    finally:
        sys.stdout, sys.stderr = streams
    sys.exit(code)


def exit_code(args: list[str] | None) -> int:
    """The command's exit code. Usage errors are one line, like every other error; no arguments print the help."""
    try:
        return app(args=args, prog_name="dsa-kvcalc", standalone_mode=False) or 0
    except TyperException as error:  # typer's usage errors (bad option, missing argument)
        if type(error).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(error.message + "\n")
            return 0
        sys.stderr.write(f"error: {printable(usage_line(error))}\n")
        return error.exit_code
    except (KeyboardInterrupt, typer.Abort):  # Ctrl-C: the shell's convention, and no traceback
        return 128 + signal.SIGINT
