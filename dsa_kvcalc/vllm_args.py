"""vLLM's own command line, both ways: a `vllm serve ...` line (pasted, or in a launch script) read as a raw recipe,
the way vLLM's parser reads it, and the arguments that deploy a planned recipe.

vLLM's parser is FlexibleArgumentParser with EngineArgs.add_cli_args and the server's own arguments
(vllm==0.33.0 vllm/utils/argparse_utils.py:156-470, vllm/engine/arg_utils.py:959-1915,
vllm/entrypoints/common/cli_args.py:431). The aliases, flags and shorthands read here are the same in every release
modelled (0.19.0 to 0.33.0) except where a release is named. tests/test_vllm_args.py checks both directions against
the release's own parser.
"""

import json
import re
import shlex
from dataclasses import dataclass

from dsa_kvcalc.keys import BY_NAME, KEYS, NESTED, Recipe, RecipeError, canonical
from dsa_kvcalc.vllm_config import IGNORED_KEYS

# Short aliases (vllm==0.33.0 vllm/engine/arg_utils.py:992-1894, vllm/entrypoints/common/cli_args.py:453)
ALIASES = {
    "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size", "-dp": "data-parallel-size",
    "-dcp": "decode-context-parallel-size", "-ep": "enable-expert-parallel", "-sc": "speculative-config",
    "-cc": "compilation-config", "-ac": "attention-config", "-q": "quantization", "-dpl": "data-parallel-size-local",
    "-dpa": "data-parallel-address", "-dpp": "data-parallel-rpc-port", "-dpr": "data-parallel-start-rank",
    "-dph": "data-parallel-hybrid-lb", "-dpe": "data-parallel-external-lb", "-asc": "api-server-count",
}
# Shorthands that vLLM merges into a JSON argument, and refuses beside the same key in it
# (vllm==0.33.0 vllm/engine/arg_utils.py:2108-2120 from 0.22.0, and :2834-2848).
SHORTHANDS = {
    "spec-method": "speculative-config.method", "spec-model": "speculative-config.model",
    "spec-tokens": "speculative-config.num_speculative_tokens",
    "cudagraph-capture-sizes": "compilation-config.cudagraph_capture_sizes",
    "max-cudagraph-capture-size": "compilation-config.max_cudagraph_capture_size",
}
# Arguments that take no value, besides the recipe's own booleans: store_true or BooleanOptionalAction in
# vllm==0.33.0 (nargs 0 in the serve parser). Each has a --no- form, and an --enable-X a --disable-X (0.33.0:
# EnableDisableAction, vllm/utils/argparse_utils.py:121-146).
FLAGS = {
    "trust-remote-code", "enable-auto-tool-choice", "disable-log-requests", "disable-log-stats", "enable-log-requests",
    "enable-prefix-caching", "enable-chunked-prefill", "data-parallel-hybrid-lb", "data-parallel-external-lb",
    "enable-eplb", "disable-custom-all-reduce", "enable-dbo", "enable-sleep-mode", "return-tokens-as-token-ids",
    "enable-server-load-tracking", "disable-cascade-attn", "enable-force-include-usage",
    "enable-prompt-tokens-details",
}
# Flags without a --no- form in any release modelled (store_true): false is their default, and not written
NO_NEGATIVE = {"disable-log-requests", "disable-log-stats"}
# Arguments that take one or more values (nargs "+"), among those dsa-kvcalc reads or ignores
MANY_VALUES = {"served-model-name", "api-key", "collect-detailed-traces", "cudagraph-capture-sizes"}
# vLLM's value types where they differ from reading the text as the recipe key's kind: the top-k backend is lowered
# with dashes as underscores (vllm==0.33.0 vllm/engine/arg_utils.py:1850), a CUDA-graph mode upper-cased
# (vllm/config/compilation.py:873-879), and the JSON of a config class may hold 1k-style numbers
# (vllm/engine/arg_utils.py:303-321, for --compilation-config, --attention-config and --engram-config;
# --speculative-config is plain JSON, :1863).
LOWERED = {"sparse-indexer-topk-backend"}
CONFIG_CLASSES = {"compilation-config", "attention-config", "engram-config"}
ENTRY_POINTS = ("vllm serve", "python -m vllm.entrypoints.openai.api_server",
                "python3 -m vllm.entrypoints.openai.api_server")
SERVE_LINE = re.compile(r"\s*(?:[A-Za-z_]\w*=(?:\"[^\"]*\"|'[^']*'|\S)*\s+)*(?:(?:exec|env|nohup)\s+)*"
                        r"(?:vllm\s+serve|python3?\s+-m\s+vllm\.entrypoints\.openai\.api_server)(?:\s|$)")
SHELL_OPERATORS = ("&", "&&", "|", "||", ";", ">", ">>", "<", "2>&1", "2>", "1>")


def logical_lines(text: str) -> list[str]:
    """The script's lines, with backslash continuations joined."""
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def is_launch_script(text: str) -> bool:
    """Does the text run `vllm serve` (or vLLM's OpenAI server module) on a line of its own?"""
    return any(SERVE_LINE.match(line) for line in logical_lines(text))


def assignment(token: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"([A-Za-z_]\w*)=(.*)", token, re.S)
    return match.groups() if match else None


def serve_command(text: str) -> tuple[dict, list[str]]:
    """The environment (export lines and the command's prefix) and the arguments after `vllm serve` of the one
    serve line in a launch script or a pasted command."""
    env: dict = {}
    found = []
    for number, line in enumerate(logical_lines(text), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as error:
            if SERVE_LINE.match(line):
                raise RecipeError("command", f"line {number}: {error}") from None
            continue  # not a line dsa-kvcalc reads
        if tokens[:1] == ["export"]:
            env |= dict(filter(None, map(assignment, tokens[1:])))
        elif SERVE_LINE.match(line):
            found.append((number, tokens))
    if not found:
        raise RecipeError("command", f"no {ENTRY_POINTS[0]} line (nor {ENTRY_POINTS[1]})")
    if len(found) > 1:
        raise RecipeError("command", f"{len(found)} serve commands (lines {', '.join(str(n) for n, _ in found)}): "
                                     f"give one")
    tokens = found[0][1]
    while assignment(tokens[0]):
        env |= dict([assignment(tokens.pop(0))])
    while tokens[0] in ("exec", "env", "nohup"):
        tokens.pop(0)
    args = tokens[2:] if tokens[0] == "vllm" else tokens[3:]
    cut = next((i for i, token in enumerate(args) if token in SHELL_OPERATORS or token.startswith((">", "2>"))),
               len(args))
    return env, args[:cut]


def option_name(token: str) -> str:
    """A long option as vLLM matches it: underscores before the first dot become dashes; an alias its long name."""
    name, dot, rest = token.partition("=")[0].partition(".")
    name = ALIASES.get(name, name)
    return canonical(name.removeprefix("--")) + dot + rest


def human_readable(text: str):
    """vLLM's reading of a dotted argument's value: JSON, else a 1k-style number, else the text
    (vllm==0.33.0 vllm/utils/argparse_utils.py:405-415)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt])|(\d+)([KMGT])", text.strip())
        if match and match.group(1):
            return int(float(match.group(1)) * 1000 ** ("kmgt".index(match.group(2)) + 1))
        if match:
            return int(match.group(3)) * 1024 ** ("KMGT".index(match.group(4)) + 1)
        return text


def merge(into: dict, update: dict) -> None:
    """vLLM's recursive_dict_update: nested mappings merge, lists extend, the rest is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def dotted_arguments(args: list[str]) -> tuple[list[str], dict]:
    """vLLM takes `--json-arg.key value` (and `.key+ a,b` for lists) as parts of one JSON argument, merged and passed
    after all the others, so that they replace a whole `--json-arg '{...}'` given too
    (vllm==0.33.0 vllm/utils/argparse_utils.py:391-436)."""
    rest, dotted, skip = [], {}, False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        option = arg.partition("=")[0]
        if not (arg.startswith("-") and "." in option and not re.fullmatch(r"-\d[\d.]*", arg)):
            rest.append(arg)
            continue
        if "=" in arg:
            text = arg.partition("=")[2]
        elif i + 1 < len(args):
            text, skip = args[i + 1], True
        else:
            raise RecipeError(arg, "expects a value")
        name = option_name(option)
        if name.endswith("+"):
            name, value = name[:-1], text.split(",")
        else:
            value = human_readable(text)
        top, *keys = name.split(".")
        for key in reversed(keys):
            value = {key: value}
        merge(dotted.setdefault(top, {}), value)
    return rest, dotted


def takes_no_value(name: str) -> bool:
    k = KEYS.get(BY_NAME.get(name, ""))
    return name in FLAGS or (k is not None and k.kind == "bool")


def negated(name: str) -> str | None:
    """The boolean a --no-X (or, for --enable-X, --disable-X) turns off; None when name is no such form."""
    for prefix, positive in (("no-", ""), ("disable-", "enable-")):
        if name.startswith(prefix) and takes_no_value(positive + name.removeprefix(prefix)):
            return positive + name.removeprefix(prefix)
    return None


def parsed_options(args: list[str]) -> tuple[str | None, list[tuple[str, str, object]]]:
    """The positional model and every option as (name, as written, value): True or False for a flag, a list for an
    argument of several values, else the text. vLLM's --model (moved to the front with `vllm serve`) is the model."""
    model, options, i = None, [], 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("-") or re.fullmatch(r"-\d[\d.]*", arg):
            if model is not None:
                raise RecipeError("command", f"unexpected argument {arg!r} (vLLM takes one model, {model!r})")
            model = arg
            continue
        written, equals, text = arg.partition("=")
        name = option_name(written)
        if negated(name) or takes_no_value(name):
            if equals:
                raise RecipeError(written, "takes no value")
            options.append((negated(name) or name, written, not negated(name)))
            continue
        if not equals:
            if i >= len(args) or (args[i].startswith("-") and not re.fullmatch(r"-\d[\d.]*", args[i])):
                raise RecipeError(written, "expects a value")
            text, i = args[i], i + 1
        if name in MANY_VALUES:
            values = [text]
            while i < len(args) and not args[i].startswith("-"):
                values.append(args[i])
                i += 1
            options.append((name, written, values))
        elif name == "model":
            model = text
        else:
            options.append((name, written, text))
    return model, options


def typed(name: str, written: str, value):
    """A value as vLLM's argument type reads it, in the form the recipe key takes."""
    if name in NESTED:
        text = expanded_numbers(value) if name in CONFIG_CLASSES and isinstance(value, str) else value
        try:
            mapping = json.loads(text) if isinstance(text, str) else text
        except json.JSONDecodeError as error:
            raise RecipeError(written, f"not valid JSON: {error.msg}") from None
        if not isinstance(mapping, dict):
            raise RecipeError(written, f"expected a JSON mapping, got {value!r}")
        return mapping
    k = KEYS.get(BY_NAME.get(name, ""))
    if k is None or not isinstance(value, str):
        return value
    if name in LOWERED:
        return value.lower().replace("-", "_")
    try:
        return {"int": int, "fraction": float}.get(k.kind, str)(value)
    except ValueError:
        raise RecipeError(written, f"expected a {'whole number' if k.kind == 'int' else 'number'}, got {value!r}") \
            from None


def expanded_numbers(text: str) -> str:
    """1k-style numbers outside the JSON's strings as whole numbers (vllm==0.33.0 vllm/engine/arg_utils.py:303)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    parts[::2] = [re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable(m.group())), part)
                  for part in parts[::2]]
    return "".join(parts)


def as_vllm_validates(raw: dict) -> dict:
    """A CUDA-graph mode in the compilation config as vLLM's validator reads it: any case."""
    mode = raw.get("compilation-config", {}).get("cudagraph_mode")
    if isinstance(mode, str):
        raw["compilation-config"]["cudagraph_mode"] = mode.upper()
    return raw


def recipe_from_command(text: str) -> dict:
    """A raw recipe (keys as vLLM spells them) from a launch script or a pasted `vllm serve ...` line. gpu, and any
    dsa-kvcalc key the line cannot hold, come from --set."""
    env, args = serve_command(text)
    args, dotted = dotted_arguments(args)
    model, options = parsed_options(args)
    raw: dict = {} if model is None else {"model": model}
    for name, written, value in options:
        if name in SHORTHANDS or name in NESTED or name in BY_NAME or name in IGNORED_KEYS:
            if name in ("gpu", "engine", "vllm-version", "deepgemm", "memory", "env"):
                raise RecipeError(written, f"not a vLLM argument: give it with --set {name}=...")
            raw[name] = typed(name, written, value)
        else:
            raise RecipeError(written, "not an argument dsa-kvcalc knows: it reads those that change memory and "
                                       "ignores the others listed in `dsa-kvcalc schema`")
    for top, mapping in dotted.items():
        raw[top] = mapping  # after the whole JSON argument, which it replaces, as in vLLM
    for name, target in SHORTHANDS.items():
        if name in raw:
            top, inner = target.split(".")
            nested = raw.setdefault(top, {})
            if inner in nested:
                raise RecipeError(f"--{name}", f"and --{top}'s {inner} exclude each other (vLLM refuses both)")
            value = raw.pop(name)
            nested[inner] = typed_inner(target, value)
    if env:
        raw["env"] = {name: int(value) if f"env.{name}" in BY_NAME and value.isdigit() else value
                      for name, value in env.items()}
    return as_vllm_validates(raw)


def typed_inner(target: str, value):
    """A shorthand's value in its JSON argument: numbers as numbers."""
    if isinstance(value, list):
        return [int(v) for v in value]
    k = KEYS.get(BY_NAME.get(target, ""))
    return int(value) if k is not None and k.kind == "int" else value


# The arguments that deploy a planned recipe ---------------------------------------------------------------------

# Keys whose default vLLM derives at start-up (from the GPU, the model, the release: declared default_from): the serve
# line pins what the plan planned.
PINNED = {name for name, k in KEYS.items() if k.default_from}
NOT_ARGUMENTS = ("model", "gpu", "engine", "vllm-version", "deepgemm", "memory")  # dsa-kvcalc's own keys


@dataclass(frozen=True)
class Deployment:
    """What `vllm serve` needs for a recipe: the environment, the model and the arguments (long names; True is a
    flag, False its --no- form, a mapping JSON)."""
    env: dict
    model: str
    arguments: dict


def argument_value(recipe: Recipe, field: str):
    """A key's value on the serve line, or None where the recipe leaves it to vLLM's default and that is what the
    plan planned."""
    k, value = KEYS[field], getattr(recipe, field)
    if field == "cudagraph_mode" and recipe.enforce_eager:
        return None  # enforce-eager runs no CUDA graphs
    if field == "topk_backend" and not recipe.engine.topk_backend_flag:
        return None  # the release has no --sparse-indexer-topk-backend: its built-in chain runs
    if field in PINNED or field in recipe.given or value not in (k.default, ()):
        return list(value) if isinstance(value, tuple) else value
    return None


def deployment(recipe: Recipe) -> Deployment:
    """Every key the recipe gives or that is not vLLM's default for its release, every key whose default vLLM
    derives, and the vLLM arguments the plan ignored, as written."""
    if recipe.engine.name != "vllm":
        raise RecipeError("engine", f"{recipe.engine.label} is not vLLM: there is no vllm serve line to write")
    arguments: dict = {}
    for field, k in KEYS.items():
        value = None if k.name.split(".")[0] in NOT_ARGUMENTS else argument_value(recipe, field)
        if value is not None:
            top, _, inner = k.name.rpartition(".")
            (arguments.setdefault(top, {}) if top else arguments)[inner] = value
    for name, value in recipe.passthrough:
        top, _, inner = name.partition(".")
        if value is not None and not (value is False and name in NO_NEGATIVE):
            (arguments.setdefault(top, {}) if inner else arguments)[inner or top] = value
    if "speculative-config" in arguments:  # the draft count changes memory: always said
        arguments["speculative-config"].setdefault("num_speculative_tokens", recipe.num_speculative_tokens)
    env = arguments.pop("env", {})
    return Deployment(env, recipe.model_arg, arguments)
