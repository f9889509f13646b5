"""Regenerates dsa_kvcalc/vllm_cli.json: the `vllm serve` arguments of every release dsa-kvcalc models
(dsa_kvcalc/engine.py RELEASES), read from each release's own parser.

    .venv/bin/python tools/vllm_cli_table.py            # every release (oracle/setup.sh sets them up)

For each release it runs the oracle's Python (the venv oracle/setup.sh makes, where vLLM's Python imports on a CPU)
on this file with the release's folder: that builds the parser `vllm serve` runs (make_arg_parser: the server's
own arguments, FrontendArgs and AsyncEngineArgs.add_cli_args, vllm/entrypoints/cli/serve.py subparser_init) and
prints every option string with what it does: the argument it sets (dest), how many values it takes, the type that
reads them, its choices, the value a flag stores, and the fields of the config class a JSON argument builds
(vLLM's configs forbid any other key: vllm/config/utils.py ConfigDict(extra="forbid")). Each entry is kept once
with the span of consecutive releases that have it, so that the file stays small.
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TABLE = ROOT / "dsa_kvcalc" / "vllm_cli.json"
ORACLE_HOME = Path(os.environ.get("DSA_KVCALC_ORACLE_HOME", Path.home() / ".cache" / "dsa-kvcalc-oracle"))


# In the oracle's Python, one release ------------------------------------------------------------------------------

def value_type(reader) -> tuple[str, bool]:
    """How an option's type reads its text, as one word, and whether "None" (or "") reads as no value."""
    if reader is None or reader is str:
        return "str", False
    name = getattr(reader, "__name__", "")
    cells = [cell.cell_contents for cell in getattr(reader, "__closure__", None) or ()]
    if reader in (int, float):
        return name, False
    if name == "_optional_type":
        return value_type(cells[0])[0], True
    if name == "_parse_type":
        return value_type(cells[0])
    if name == "parse_dataclass":
        return f"config:{reader.__defaults__[0].__name__}", False
    words = {"human_readable_int": "size", "human_readable_int_or_auto": "size_or_auto", "loads": "json",
             "union_dict_and_str": "json_or_str", "check_port": "int"}
    if name in words:
        return words[name], False
    if name == "<lambda>" and reader("Ab-c") == "ab_c":
        return "lowered", False  # s.lower().replace("-", "_")
    return "str", False


def flag_value(action, string: str):
    """The value a flag (an option of no value) stores when given as string."""
    kind = type(action).__name__
    if kind in ("_StoreTrueAction", "_StoreFalseAction", "_StoreConstAction"):
        return action.const
    if isinstance(action, argparse.BooleanOptionalAction):  # and vLLM's EnableDisableAction, its subclass
        negative = getattr(action, "negative_option_strings", None)
        return string not in negative if negative is not None else not string.startswith("--no-")
    raise ValueError(f"{string}: a {kind} of no value")


def config_classes(parser, vllm_config) -> dict:
    """Each JSON argument's config class: the class its type validates, or (--speculative-config, read as plain JSON
    and validated later) the class of the VllmConfig field it fills."""
    import dataclasses
    import typing

    hints = {f.name: f.type for f in dataclasses.fields(vllm_config)}
    found = {}
    for action in parser._actions:
        kind = value_type(action.type)[0]
        if kind.startswith("config:"):
            reader = action.type
            while reader.__name__ != "parse_dataclass":
                reader = reader.__closure__[0].cell_contents
            found[action.dest] = reader.__defaults__[0]
        elif kind == "json" and action.dest in hints:
            hint = hints[action.dest]
            types = [t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)]
            if types:
                found[action.dest] = types[0]
    return found


# Where each release keeps make_arg_parser, the arguments of `vllm serve` (vllm/entrypoints/cli/serve.py imports it)
PARSER_MODULES = ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",  # 0.33.0, 0.29.0
                  "vllm.entrypoints.openai.cli_args")  # 0.19.0 - 0.28.0


def serve_arguments(parser):
    """parser with the release's `vllm serve` arguments."""
    import importlib

    for name in PARSER_MODULES:
        try:
            return importlib.import_module(name).make_arg_parser(parser)
        except ModuleNotFoundError as error:
            if not name.startswith(error.name or "?"):  # a module it imports is missing
                raise
    raise ModuleNotFoundError(f"none of {', '.join(PARSER_MODULES)}")


def dump(release_dir: str) -> dict:
    """The release's serve parser as JSON: every option string, and the config classes' fields."""
    import contextlib
    import dataclasses

    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, release_dir)
    with contextlib.redirect_stdout(sys.stderr):
        from vllm.config import VllmConfig
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        parser = serve_arguments(FlexibleArgumentParser())
    classes = config_classes(parser, VllmConfig)
    arguments = {}
    for action in dict.fromkeys(parser._option_string_actions.values()):  # each once, in the order added
        if action.dest == "help":
            continue
        names = [s for s, a in parser._option_string_actions.items() if a is action]
        kind, optional = value_type(action.type)
        if action.nargs == 0:
            entry = {"flags": {string: flag_value(action, string) for string in names}}
        else:
            entry = {"names": names, "nargs": action.nargs, "type": kind}
            if optional:
                entry["none"] = True
            if action.nargs == "?":
                entry["const"] = action.const
            if action.choices is not None:
                entry["choices"] = [c for c in action.choices if c is None or isinstance(c, (str, int, float))]
            if action.dest in classes:
                entry["config"] = classes[action.dest].__name__
        if type(action).__name__ == "_AppendAction":
            entry["append"] = True
        if action.dest in arguments:
            raise ValueError(f"two arguments set {action.dest}")
        arguments[action.dest] = entry
    configs = {cls.__name__: sorted(f.name for f in dataclasses.fields(cls)) for cls in classes.values()}
    return {"arguments": arguments, "configs": configs}


# In the project's Python, every release ---------------------------------------------------------------------------

def spans(releases: list[str], per_release: list[dict]) -> dict:
    """{name: [{"in": [first, last], **entry}, ...]}: each distinct entry with the consecutive releases it holds in."""
    out: dict = {}
    names = sorted({name for table in per_release for name in table})
    for name in names:
        variants: list[dict] = []
        for release, table in zip(releases, per_release):
            entry = table.get(name)
            if entry is None:
                continue
            last = variants[-1] if variants else None
            if last is not None and last["value"] == entry and last["in"][1] == releases[releases.index(release) - 1]:
                last["in"][1] = release
            else:
                variants.append({"in": [release, release], "value": entry})
        out[name] = [{"in": v["in"], **(v["value"] if isinstance(v["value"], dict) else {"fields": v["value"]})}
                     for v in variants]
    return out


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from dsa_kvcalc.engine import RELEASES

    python = ORACLE_HOME / "venv" / "bin" / "python"
    tables = []
    for release in RELEASES:
        folder = ORACLE_HOME / "releases" / release
        if not (folder / ".ready").exists():
            sys.exit(f"no vLLM {release} under {ORACLE_HOME}/releases: run bash oracle/setup.sh {release}")
        done = subprocess.run([str(python), __file__, str(folder)], capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"vLLM {release}: {done.stderr[-2000:]}")
        tables.append(json.loads(done.stdout))
        print(f"{release}: {len(tables[-1]['arguments'])} arguments", file=sys.stderr)
    table = {
        "source": "generated by tools/vllm_cli_table.py from each release's own `vllm serve` parser "
                  "(make_arg_parser: vllm/entrypoints/common/cli_args.py, vllm/entrypoints/openai/cli_args.py before "
                  "0.31.0; EngineArgs.add_cli_args, vllm/engine/arg_utils.py); regenerate, do not edit",
        "releases": list(RELEASES),
        "arguments": spans(list(RELEASES), [t["arguments"] for t in tables]),
        "configs": spans(list(RELEASES), [t["configs"] for t in tables]),
    }
    TABLE.write_text(json.dumps(table, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {TABLE} ({TABLE.stat().st_size:,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(json.dumps(dump(sys.argv[1])))
    else:
        main()
