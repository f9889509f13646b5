"""The dsa-kvcalc command line: a thin typer layer over recipe, capacity and render."""

import io
import json
import os
import sys
import tempfile
from enum import Enum
from pathlib import Path

import typer

from dsa_kvcalc.recipe import RecipeError, check_backends

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Capacity calculator for DeepSeek-Sparse-Attention models on vLLM.")


class Format(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"
    csv = "csv"


def fail(message: str, code: int = 2):
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def write_output(chunks, output: Path | None, option: str = "--output", mode: str = "w") -> None:
    """Text (or bytes) chunks to stdout, or to the file atomically: written to a temporary file beside it as they come
    (memory stays flat for streamed rows), then renamed over it, so the file appears whole or not at all."""
    if output is None:
        sys.stdout.writelines(chunks)
        return
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        with os.fdopen(handle, mode) as file:
            file.writelines(chunks)
        os.replace(temporary, output)
        temporary = None
    except OSError as error:
        fail(f"{option}: cannot write {output}: {error.strerror or error}")
    finally:
        if temporary is not None:
            os.unlink(temporary)


def console_text(draw) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    draw(console)
    return console.file.getvalue()


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
    from dsa_kvcalc import capacity, render
    from dsa_kvcalc.recipe import load_recipe

    try:
        result = capacity.plan(load_recipe(recipe, set_))
    except RecipeError as error:
        fail(str(error))
    if explain:
        text = render.explain(result)
    elif format is Format.json:
        text = render.render_json(result)
    elif format is Format.markdown:
        text = render.render_markdown(result)
    elif format is Format.csv:
        text = render.render_csv(result)
    elif output is None:
        from rich.console import Console

        render.render_table(result, Console())
        return
    else:
        text = console_text(lambda console: render.render_table(result, console))
    write_output([text], output)


@app.command()
def models():
    """List the model catalog, with sources."""
    from rich.console import Console
    from rich.table import Table

    from dsa_kvcalc.catalog import GIB, MODELS

    table = Table("model", "layers", "index topk", "KV B/token fp8", "KV B/token bf16", "checkpoint GiB", "max len")
    for m in MODELS:
        table.add_row(m.name, str(m.num_layers), str(m.index_topk), f"{m.kv_bytes_per_token['fp8']:,}",
                      f"{m.kv_bytes_per_token['bf16']:,}", f"{m.checkpoint_bytes / GIB:.1f}",
                      f"{m.max_position_embeddings:,}")
    console = Console()
    console.print(table)
    for m in MODELS:
        console.print(f"{m.name}: {m.source}; KV: {m.kv_note}", highlight=False)


@app.command()
def gpus():
    """List the GPU catalog, with sources."""
    from rich.console import Console
    from rich.table import Table

    from dsa_kvcalc.catalog import GIB, GPUS

    table = Table("gpu", "arch", "total memory (torch)", "bytes")
    for g in GPUS:
        table.add_row(g.name, g.arch, f"{g.total_memory_bytes / GIB:.2f} GiB", f"{g.total_memory_bytes:,}")
    console = Console()
    console.print(table)
    for g in GPUS:
        console.print(f"{g.name}: {g.source}", highlight=False)


@app.command()
def schema(output: Path | None = typer.Option(None, "--output", "-o")):
    """Print the recipe's JSON Schema (for editors)."""
    from dsa_kvcalc.recipe import json_schema

    write_output([json.dumps(json_schema(), indent=2) + "\n"], output)


def read_log_file(path: Path, key: str):
    from dsa_kvcalc.vllm_log import read_log

    try:
        return read_log(path.read_text(errors="replace"))
    except OSError as error:
        fail(f"{key}: cannot read {path}: {error.strerror or error}")


@app.command()
def calibrate(
    log: Path = typer.Argument(..., help="A vLLM startup log (any version since the v1 engine; several ranks is fine)"),
    recipe: Path | None = typer.Option(None, "--recipe", help="Recipe YAML; default: the log's non-default args"),
    after: Path | None = typer.Option(None, "--after", help="A log of the same deployment after vLLM #62860: "
                                                             "derives the indexer headroom"),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP + " (e.g. --set gpu=B200 when the log does not say)"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the calibrated recipe YAML (atomically)"),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table or json"),
):
    """Read a vLLM startup log, compare it term by term with plan, and write a recipe whose memory block holds it."""
    from dsa_kvcalc import calibrate as calibration, render_calibration
    from dsa_kvcalc.recipe import read_yaml, set_override

    if format not in (Format.table, Format.json):
        fail(f"--format: calibrate prints table or json, not {format.value}")
    reading = read_log_file(log, "log")
    try:
        if recipe is None:
            raw, notes = calibration.recipe_from_log(reading)
            source, recipe_dir = "from the log's non-default args", Path(".")
        else:
            raw, notes = read_yaml(recipe), []
            source, recipe_dir = str(recipe), recipe.parent
        for assignment in set_:
            set_override(raw, assignment)
        if set_:
            source += " and --set"
        if after is None:
            result = calibration.calibrate(reading, raw, source, recipe_dir)
        else:
            result = calibration.calibrate_pair(reading, read_log_file(after, "--after"), raw, source, recipe_dir)
    except RecipeError as error:
        fail(str(error))
    result.notes[:0] = notes
    text = render_calibration.render_json(result) if format is Format.json else render_calibration.render_text(result)
    sys.stdout.write(text)
    if output is not None:
        write_output([render_calibration.recipe_yaml(result, log.name)], output)


class SweepFormat(str, Enum):
    csv = "csv"
    jsonl = "jsonl"
    table = "table"


PROGRESS_MIN_POINTS = 2000  # about a fifth of a second of sweeping


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
    from rich.console import Console
    from rich.progress import Progress

    from dsa_kvcalc import sweep as sweeping, sweep_render
    from dsa_kvcalc.recipe import build_recipe, read_yaml

    try:
        varies = sweeping.parse_varies(vary)
        check_backends(backend, sweeping.BACKEND_NAMES)
        raw = read_yaml(recipe)
        build_recipe(raw, recipe.parent)
    except RecipeError as error:
        fail(str(error))
    if plot is not None:
        from dsa_kvcalc import plot as plotting

        try:
            plotting.load_pyplot()
        except ImportError:
            fail("--plot: needs matplotlib (pip install 'dsa-kvcalc[plot]')")
    suffix = output.suffix.lower() if output else ""
    format = format or {".csv": SweepFormat.csv, ".jsonl": SweepFormat.jsonl}.get(suffix, SweepFormat.table)
    keys = [v.key for v in varies]
    total = sweeping.point_count(varies)
    failures = sweeping.Failures()
    show_progress = total >= PROGRESS_MIN_POINTS and sys.stderr.isatty()
    with Progress(console=Console(stderr=True), transient=True, disable=not show_progress) as progress:
        points = sweeping.points(varies)
        if show_progress:
            points = progress.track(points, total=total, description=f"{total:,} points")
        rows = sweeping.rows(raw, recipe.parent, varies, backend, points, failures)
        if plot is not None:
            series = plotting.Series(keys)
            rows = series.tap(rows)
        if format is SweepFormat.csv:
            write_output(sweep_render.csv_lines(rows), output)
        elif format is SweepFormat.jsonl:
            write_output(sweep_render.jsonl_lines(rows), output)
        elif output is None:
            sweep_render.render_table(keys, rows, Console())
        else:
            write_output([console_text(lambda console: sweep_render.render_table(keys, rows, console))], output)
    if plot is not None:
        write_output([plotting.png_bytes(series)], plot, "--plot", "wb")
    if failures.count:
        typer.echo(f"warning: {failures.count:,} of {total:,} points failed (rows with an error column); first: "
                   f"{failures.first}", err=True)


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
    from rich.console import Console

    from dsa_kvcalc import capacity, sweep as sweeping, sweep_render
    from dsa_kvcalc.recipe import build_recipe, read_yaml

    if target_concurrency < 1:
        fail(f"--target-concurrency: must be at least 1, got {target_concurrency}")
    if min_kv_tokens < 0:
        fail(f"--min-kv-tokens: must not be negative, got {min_kv_tokens}")
    if max_spec_tokens is not None and max_spec_tokens < 0:
        fail(f"--max-spec-tokens: must not be negative, got {max_spec_tokens}")
    try:
        check_backends(backend, sweeping.BACKEND_NAMES)
        raw = read_yaml(recipe)
        base = build_recipe(raw, recipe.parent)
        capacity.plan(base)
        spec_tokens = (list(range(max_spec_tokens, -1, -1)) if max_spec_tokens is not None
                       else [base.num_speculative_tokens])
        candidates = sweeping.recommend(raw, recipe.parent, target_concurrency, min_kv_tokens, backend, spec_tokens)
    except RecipeError as error:
        fail(str(error))
    sweep_render.render_recommendation(candidates, target_concurrency, min_kv_tokens, base.data_parallel_size,
                                       Console())
    if not candidates or candidates[0].max_num_seqs is None:
        raise typer.Exit(1)


@app.command()
def verify(
    recipe: Path | None = typer.Argument(None, help="Recipe YAML; default: the bundled recipes re-planned for this "
                                                    "GPU plus widths that are not multiples of the padding"),
    gpu: bool = typer.Option(False, "--gpu", help="Run the live DeepGEMM pass on the local GPU (needs torch, DeepGEMM)"),
    backend: list[str] = typer.Option([], "--backend", help="Top-k backend to check (repeatable); default: all the "
                                                            "recipe's GPU runs"),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table or json"),
    as_local: bool = typer.Option(False, "--as-local", help="Re-plan the recipe for the local GPU"),
    profile: bool = typer.Option(False, "--profile", help="Replay vLLM's memory accounting with what this GPU measures"),
    reproduce_oom: bool = typer.Option(False, "--reproduce-oom", help="Leave only what an unfixed vLLM leaves free and "
                                                                      "grow the decode count until it fails"),
):
    """Measure the decode logits on the local GPU with DeepGEMM and compare them with plan, byte for byte."""
    from dsa_kvcalc import verify as checking, verify_render
    from dsa_kvcalc.recipe import load_recipe

    if not gpu:
        fail("--gpu: verify runs the live pass on the local GPU; pass --gpu")
    if format not in (Format.table, Format.json):
        fail(f"--format: verify prints table or json, not {format.value}")
    try:
        backends = check_backends(backend)
        if recipe is not None:
            load_recipe(recipe)
    except RecipeError as error:
        fail(str(error))
    from dsa_kvcalc import gpu as live

    try:
        env = live.probe()
        target = checking.local_target(env)
    except checking.Unavailable as error:
        fail(str(error), 3)
    try:
        shapes = (checking.builtin_shapes(target) if recipe is None
                  else checking.recipe_shapes(recipe, target, as_local))
        report = live.run_verify(shapes, backends, env, target, profile, reproduce_oom)
    except RecipeError as error:
        fail(str(error))
    if format is Format.json:
        write_output([verify_render.render_json(report)], None)
    else:
        from rich.console import Console

        verify_render.render_table(report, Console())
    raise typer.Exit(report["exit_code"])


def main():
    app()
