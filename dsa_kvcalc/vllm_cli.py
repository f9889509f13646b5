"""The `vllm serve` arguments of every release modelled, as each release's own parser declares them: the data in
vllm_cli.json, which tools/vllm_cli_table.py generates from the releases (never edit it by hand).

An argument is what one argparse action sets (its dest): value options with their names, number of values, type and
choices, or flags with the value each of their names stores (--enable-X true, --no-enable-X and --disable-X false).
A JSON argument names the config class it builds, whose fields are the only keys vLLM takes in it (its configs
forbid any other: vllm/config/utils.py ConfigDict(extra="forbid")).
"""

import functools
import json
from dataclasses import dataclass
from importlib import resources

from dsa_kvcalc import engine as engines
from dsa_kvcalc.keys import BY_NAME, NESTED, RecipeError, canonical

TABLE = json.loads(resources.files("dsa_kvcalc").joinpath("vllm_cli.json").read_text())
RELEASES = TABLE["releases"]


@dataclass(frozen=True)
class Argument:
    dest: str
    names: tuple[str, ...]  # every option string, aliases included
    nargs: object  # None: one value; "?", "+", "*"; 0: a flag
    type: str  # str, int, float, size, size_or_auto, json, json_or_str, lowered, config:CLASS
    choices: tuple | None = None
    config: str | None = None  # the config class a JSON argument builds
    flags: tuple[tuple[str, object], ...] = ()  # a flag's option strings and the value each stores
    append: bool = False
    none: bool = False  # "None" (or "") reads as no value


@functools.cache
def arguments(release: str) -> dict[str, Argument]:
    """The release's arguments by option string (every name of each)."""
    found = {}
    for dest, variants in TABLE["arguments"].items():
        entry = next((v for v in variants if engines.within(release, *v["in"])), None)
        if entry is None:
            continue
        flags = tuple(entry.get("flags", {}).items())
        names = tuple(entry.get("names") or (name for name, _ in flags))
        choices = tuple(entry["choices"]) if "choices" in entry else None
        argument = Argument(dest, names, 0 if flags else entry["nargs"], entry.get("type", "flag"), choices,
                            entry.get("config"), flags, entry.get("append", False), entry.get("none", False))
        found |= dict.fromkeys(argument.names, argument)
    return found


@functools.cache
def config_fields(release: str, config: str) -> frozenset:
    return frozenset(next((v["fields"] for v in TABLE["configs"][config] if engines.within(release, *v["in"])), ()))


def spans(found: list[str]) -> str:
    """Releases as runs of consecutive ones: 0.19.0 - 0.25.1, 0.33.0."""
    runs: list[list[str]] = []
    for release in RELEASES:
        if release in found:
            if runs and RELEASES.index(runs[-1][-1]) == RELEASES.index(release) - 1:
                runs[-1].append(release)
            else:
                runs.append([release])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]} - {run[-1]}" for run in runs)


def releases_having(option: str) -> str:
    """Which modelled releases take an option string, in words."""
    found = [r for r in RELEASES if option in arguments(r)]
    if not found:
        return f"no vLLM release from {RELEASES[0]} to {RELEASES[-1]} has it"
    return f"vLLM {spans(found)} {'has' if len(found) == 1 else 'have'} it"


def field_releases(config: str, field: str) -> str:
    found = [r for r in RELEASES if field in config_fields(r, config)]
    if not found:
        return f"no vLLM release from {RELEASES[0]} to {RELEASES[-1]} has it"
    return f"vLLM {spans(found)} {'has' if len(found) == 1 else 'have'} it"


# Shorthands that vLLM merges into a JSON argument, and refuses beside the same key in it
# (vllm==0.33.0 vllm/engine/arg_utils.py:2108-2120 from 0.22.0, and :2834-2848).
SHORTHANDS = {
    "spec-method": "speculative-config.method", "spec-model": "speculative-config.model",
    "spec-tokens": "speculative-config.num_speculative_tokens",
    "cudagraph-capture-sizes": "compilation-config.cudagraph_capture_sizes",
    "max-cudagraph-capture-size": "compilation-config.max_cudagraph_capture_size",
}
# Every long option of any release, without its dashes, by the argument it sets: a recipe (vLLM's --config YAML,
# whose key: value pairs vLLM passes as --key value, a true flag as --key, a false one as --no-key where that exists:
# vllm==0.33.0 vllm/utils/argparse_utils.py:597-613) may give any of them.
OPTIONS = {name[2:]: argument for release in RELEASES for name, argument in arguments(release).items()
           if name.startswith("--")}
MODELLED = {*BY_NAME, *NESTED, *SHORTHANDS}
# Other spellings of a flag dsa-kvcalc reads (disable-expert-parallel): the recipe key and the value each stores
FLAG_SPELLINGS = {name: (canonical(argument.dest), dict(argument.flags)[f"--{name}"])
                  for name, argument in OPTIONS.items()
                  if argument.flags and canonical(argument.dest) in BY_NAME and name not in BY_NAME}
# The arguments dsa-kvcalc accepts and ignores: they do not change memory per rank (a dict: looked up by name, listed
# in the order of the releases' parsers, never a set's order, which changes with the hash seed)
IGNORED_KEYS = dict.fromkeys(
    name for name, argument in OPTIONS.items()
    if name not in MODELLED and name not in FLAG_SPELLINGS and canonical(argument.dest) != "model")
# The config class of each JSON argument, by its long name
CONFIGS = {name: argument.config for name, argument in OPTIONS.items() if argument.config}
# The fields of a JSON argument dsa-kvcalc reads that it ignores (in any release)
IGNORED_NESTED = {top: frozenset(f for v in TABLE["configs"][CONFIGS[top]] for f in v["fields"]
                                 if f"{top}.{f}" not in BY_NAME) for top in NESTED if top in CONFIGS}


def check_release(ignored: dict, engine: engines.Engine) -> None:
    """Every vLLM argument a recipe gives that dsa-kvcalc ignores is one the release takes, with keys its config
    class has: vLLM refuses the others. A release newer than modelled is not checked."""
    if engine.newer_than_modelled:
        return
    release = engines.release_of(engine.version)
    taken = arguments(release)
    for name, value in ignored.items():
        top, dot, inner = name.partition(".")
        if top == "env":  # the environment: no argument
            continue
        argument = taken.get(f"--{top}")
        if argument is None:
            raise RecipeError(top, f"not an argument of vLLM {release}: {releases_having(f'--{top}')}")
        keys = [inner] if dot else list(value) if argument.config and isinstance(value, dict) else []
        for key in keys:
            if key not in config_fields(release, argument.config):
                raise RecipeError(f"{top}.{key}", f"not a key of vLLM {release}'s {argument.config}: "
                                                  f"{field_releases(argument.config, key)}")
