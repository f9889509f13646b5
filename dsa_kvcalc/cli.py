"""The dsa-kvcalc command line: a thin typer layer over recipe, capacity and render."""

import json
import os
import sys
import tempfile
from enum import Enum
from pathlib import Path

import typer

from dsa_kvcalc.recipe import RecipeError

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


def write_output(text: str, output: Path | None) -> None:
    """stdout, or the file written atomically (a temporary file beside it, then renamed over it)."""
    if output is None:
        sys.stdout.write(text)
        return
    try:
        handle, temporary = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.")
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, output)
    except OSError as error:
        fail(f"--output: cannot write {output}: {error.strerror or error}")


def console_text(draw) -> str:
    from rich.console import Console

    console = Console(file=__import__("io").StringIO(), width=200, force_terminal=False)
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
    write_output(text, output)


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

    write_output(json.dumps(json_schema(), indent=2) + "\n", output)


def main():
    app()
