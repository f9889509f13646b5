"""vLLM's own command line, both ways: the servers a launch script (or a pasted command) starts, each read as a raw
recipe the way the release's own parser reads its arguments, and the arguments that deploy a planned recipe.

The arguments are the release's (vllm_cli.py: every name, flag, type and choice of its parser, generated from the
release). Before argparse, vLLM's FlexibleArgumentParser moves --model to the front, turns underscores in a name into
dashes, reads -O3 as --optimization-level 3, and gathers `--json-arg.key value` (and `.key+ a,b`) into one JSON
argument passed after all the others, so that it replaces a whole `--json-arg '{...}'` (vllm==0.33.0
vllm/utils/argparse_utils.py:313-501, the same in every release modelled); then argparse reads them, abbreviations
included. tests/test_vllm_args.py checks both directions against the release's own parser.
"""

import argparse
import json
import re
from dataclasses import dataclass, field

from dsa_kvcalc import engine as engines
from dsa_kvcalc import launch_script, vllm_cli
from dsa_kvcalc.keys import BY_NAME, KEYS, NESTED, Recipe, RecipeError, canonical, suggestion
from dsa_kvcalc.vllm_cli import SHORTHANDS, Argument

OWN_KEYS = ("gpu", "engine", "vllm-version", "deepgemm", "memory", "env")  # dsa-kvcalc's, never vLLM arguments
ENTRY_POINTS = "vllm serve (or docker run of vLLM's OpenAI image, or python -m vllm.entrypoints.openai.api_server)"
# The roles of a disaggregated prefill/decode pair, by --kv-transfer-config's kv_role
ROLES = {"kv_producer": "prefill", "kv_consumer": "decode"}
RELEASE_TAG = re.compile(r"(?:^|[^\d.])v?(\d+\.\d+\.\d+)")


@dataclass
class Server:
    """One server of a launch script, as a raw recipe (keys as vLLM spells them), read with the arguments of
    `release`."""
    line: int
    raw: dict
    release: str
    role: str | None = None
    unexpanded: dict = field(default_factory=dict)  # recipe key -> (as written, the shell variable it holds)
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.role or f"line {self.line}"


def human_readable(text: str):
    """vLLM's human_readable_int: 1k = 1000, 1K = 1024, 1.5k = 1500 (vllm==0.33.0 vllm/utils/argparse_utils.py:43-74);
    None where the text is none."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt])|(\d+)([KMGT])|(-?\d+)", text.strip())
    if match is None:
        return None
    if match.group(1):
        return int(float(match.group(1)) * 1000 ** ("kmgt".index(match.group(2)) + 1))
    if match.group(3):
        return int(match.group(3)) * 1024 ** ("KMGT".index(match.group(4)) + 1)
    return int(match.group(5))


def dotted_value(text: str):
    """A dotted argument's value as vLLM reads it: JSON, else a 1k-style number, else the text
    (vllm==0.33.0 vllm/utils/argparse_utils.py:477-486)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        number = human_readable(text)
        return text if number is None else number


def merge(into: dict, update: dict) -> None:
    """vLLM's recursive_dict_update: nested mappings merge, lists extend, the rest is replaced."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value


def preprocessed(args: list[str]) -> list[str]:
    """The arguments as FlexibleArgumentParser hands them to argparse: the model first, names with dashes, -O3 as
    --optimization-level 3, dotted arguments gathered into JSON arguments at the end."""
    model = next((i for i, a in enumerate(args) if re.match(r"^--model(=.+|$)", a)), None)
    if model is not None:
        tag = args[model + 1] if args[model] == "--model" and model + 1 < len(args) else args[model][8:]
        args = [tag, *args[:model], *args[model + (2 if args[model] == "--model" else 1):]]
    named = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, equals, value = arg.partition("=")
            head, dot, rest = name[2:].partition(".")
            named.append(f"--{head.replace('_', '-')}{dot}{rest}{equals}{value}")
        elif arg.startswith("-O") and arg != "-O":
            named += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            named.append("--optimization-level")
        else:
            named.append(arg)
    rest, dotted, skip = [], {}, False
    for i, arg in enumerate(named):
        if skip:
            skip = False
            continue
        option, equals, text = arg.partition("=")
        if not (arg.startswith("-") and "." in option and not re.fullmatch(r"-\d[\d.]*", arg)):
            rest.append(arg)
            continue
        if not equals:
            if i + 1 >= len(named):
                raise RecipeError(arg, "expects a value")
            text, skip = named[i + 1], True
        if option.endswith("+"):
            option, value = option[:-1], text.split(",")
        else:
            value = dotted_value(text)
        top, *keys = option.split(".")
        for key in reversed(keys):
            value = {key: value}
        merge(dotted.setdefault(top, {}), value)
    return rest + [part for top, value in dotted.items() for part in (top, json.dumps(value))]


class Recorded(argparse.Action):
    """Records each argument as given: its dest, the option string and its value(s) (a flag: the value it stores)."""

    def __call__(self, parser, namespace, values, option_string=None):
        namespace.given.append((self.dest, option_string, self.const if self.nargs == 0 else values))


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise RecipeError("command", message)


def parser_of(release: str) -> Parser:
    parser = Parser(prog="vllm serve", add_help=False, exit_on_error=False)
    parser.add_argument("model_tag", nargs="?", action=Recorded)
    for argument in dict.fromkeys(vllm_cli.arguments(release).values()):
        if argument.flags:
            for name, value in argument.flags:
                parser.add_argument(name, dest=argument.dest, nargs=0, const=value, action=Recorded)
        else:
            parser.add_argument(*argument.names, dest=argument.dest, nargs=argument.nargs, action=Recorded)
    return parser


def unknown(option: str, release: str) -> RecipeError:
    """An option the release does not take: which releases do, or what it is closest to."""
    name = option.partition("=")[0]
    if name.removeprefix("--") in OWN_KEYS:
        return RecipeError(name, f"not a vLLM argument: give it with --set {name.removeprefix('--')}=...")
    having = vllm_cli.releases_having(name)
    if not having.startswith("no "):
        return RecipeError(name, f"not an argument of vLLM {release}: {having}")
    longs = [n for n in vllm_cli.arguments(release) if n.startswith("--")]
    return RecipeError(name, f"not a vLLM argument{suggestion(name, longs, '--')}: {having}")


def parsed(args: list[str], release: str) -> list[tuple[str, str, object]]:
    """(dest, option string, value as written) for every argument given, in order, as the release's parser reads
    them."""
    for arg in args:  # before argparse, which would read --gpu as an abbreviation of --gpu-memory-utilization
        if arg.partition("=")[0].removeprefix("--") in OWN_KEYS:
            raise unknown(arg, release)
    namespace = argparse.Namespace(given=[])
    try:
        _, extras = parser_of(release).parse_known_args(preprocessed(args), namespace)
    except argparse.ArgumentError as error:
        message = error.message
        problem = ("expects a value" if message.startswith("expected") else
                   "takes no value" if message.startswith("ignored explicit argument") else message)
        raise RecipeError((error.argument_name or "command").split("/")[0], problem) from None
    for extra in extras:
        if "$" in extra or "`" in extra:
            raise RecipeError(extra, "shell variables are not expanded: give the arguments it holds with --set "
                                     "KEY=VALUE (or write them out)")
        if extra.startswith("-") and not re.fullmatch(r"-\d[\d.]*", extra):
            raise unknown(extra, release)
    if extras:
        model = next((v for dest, _, v in namespace.given if dest == "model_tag"), None)
        raise RecipeError("command", f"unexpected argument {extras[0]!r} (vLLM takes one model, {model!r})")
    return namespace.given


def expanded_numbers(text: str) -> str:
    """1k-style numbers outside a JSON's strings as whole numbers, as a config class's JSON argument reads them
    (vllm==0.33.0 vllm/engine/arg_utils.py:303-321)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    parts[::2] = [re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", lambda m: str(human_readable(m.group())), part)
                  for part in parts[::2]]
    return "".join(parts)


def typed(argument: Argument, written: str, text: str, release: str):
    """One value as the argument's type reads it, checked against its choices: vLLM refuses what they do not take."""
    kind = argument.type
    if argument.none and text in ("", "None"):
        return None
    if kind == "lowered":
        value = text.lower().replace("-", "_")
    elif kind in ("int", "float"):
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            raise RecipeError(written, f"expected a {'whole ' if kind == 'int' else ''}number, got {text!r}") from None
    elif kind in ("size", "size_or_auto"):
        value = -1 if kind == "size_or_auto" and text.strip().lower() == "auto" else human_readable(text)
        if value is None:
            raise RecipeError(written, f"expected a whole number such as 8192, 128k or 1M, got {text!r}")
    elif kind == "json" or kind.startswith("config:") or kind == "json_or_str" and re.match(r"(?s)^\s*{.*}\s*$", text):
        try:
            value = json.loads(expanded_numbers(text) if kind.startswith("config:") else text)
        except json.JSONDecodeError as error:
            raise RecipeError(written, f"not valid JSON: {error.msg}") from None
    else:
        value = text
    if argument.choices is not None and value not in argument.choices:
        shown = ", ".join(str(c) for c in argument.choices if c not in (None, "None"))
        raise RecipeError(written, f"{value!r} is not a choice of vLLM {release}: {shown}")
    if argument.config is not None and value is not None:
        check_config(written, value, argument.config, release)
    return value


def check_config(written: str, value, config: str, release: str) -> None:
    """A JSON argument holds a mapping of its config class's fields, which the release's class has."""
    if not isinstance(value, dict):
        raise RecipeError(written, f"expected a JSON mapping, got {value!r}")
    fields = vllm_cli.config_fields(release, config)
    for key in value:
        if key not in fields:
            raise RecipeError(f"{written}.{key}", f"not a key of vLLM {release}'s {config}{suggestion(key, fields)}: "
                                                  f"{vllm_cli.field_releases(config, key)}")


def holding(value, markers: set) -> str | None:
    """The shell variable a value holds, unexpanded, if any."""
    texts = value if isinstance(value, list) else [value]
    return next((m for t in texts if isinstance(t, str) for m in markers if m in t), None)


def image_release(image: str) -> tuple[str | None, str | None]:
    """The vLLM release an image's tag names (vllm/vllm-openai:v0.25.0), or None with why not."""
    name, colon, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    match = RELEASE_TAG.search(tag)
    if match and "$" not in tag:
        return match.group(1), None
    return None, (f"the image {image} names no vLLM release: planned as {engines.NEWEST_VLLM}, the newest "
                  f"modelled (--set vllm-version=X.Y.Z for the one it runs)")


def server_recipe(server: launch_script.Server, version: str | None) -> Server:
    """A server's raw recipe (keys as vLLM spells them), its arguments read as the parser of `version` reads them,
    else of the image's release; with neither, of the newest release that takes them all (noted when that is not the
    newest modelled). Values that hold a shell variable are left out and named."""
    notes: list[str] = []
    tagged = None
    if server.image is not None:
        tagged, note = image_release(server.image)
        notes += [note] if note else []
    if version or tagged:
        raw, unexpanded = read_server(server, engines.release_of(version or tagged))
    else:
        raw, unexpanded, release = newest_reading(server)
        if release != engines.NEWEST_VLLM:
            notes.append(f"written for an older vLLM: planned as {release}, the newest release that takes every "
                         f"argument given (--set vllm-version=X.Y.Z for another)")
            raw["vllm-version"] = release
    if tagged:
        raw["vllm-version"] = tagged
    role = ROLES.get((raw.get("kv-transfer-config") or {}).get("kv_role"))
    return Server(server.line, raw, engines.release_of(raw.get("vllm-version") or version or engines.NEWEST_VLLM),
                  role, unexpanded, notes)


def newest_reading(server: launch_script.Server) -> tuple[dict, dict, str]:
    """The server read by the newest release whose parser takes it; where none does, the newest's refusal."""
    refusal = None
    for release in reversed(vllm_cli.RELEASES):
        try:
            return (*read_server(server, release), release)
        except RecipeError as error:
            refusal = refusal or error
    raise refusal


def read_server(server: launch_script.Server, release: str) -> tuple[dict, dict]:
    """The server's raw recipe as the release's parser reads its arguments, and the recipe keys whose values hold a
    shell variable -> (as written, the variable)."""
    raw: dict = {}
    markers = {m for w in server.args for m in w.unexpanded}
    unexpanded: dict = {}
    arguments = vllm_cli.arguments(release)
    for dest, written, value in parsed([w.text for w in server.args], release):
        if value is None:  # argparse's call for an absent model_tag
            continue
        target = argument_key(dest, written, arguments)
        variable = holding(value, markers)
        if variable is not None and target in NESTED:
            value, held = nested_variables(target, written, value, markers)
            unexpanded |= held
            if value is None:
                continue
        elif variable is not None and (target in BY_NAME or target in SHORTHANDS):
            unexpanded[SHORTHANDS.get(target, target)] = (written or target, variable)
            continue
        if target == "config":
            raise RecipeError(written, "a config file's arguments are not read from a serve line: plan the config file "
                                       "itself, with model and gpu (dsa-kvcalc plan FILE --set gpu=...)")
        raw[target] = value if target == "model" or holding(value, markers) else \
            read(arguments[written], written, value, release, target in BY_NAME)
    for name, target in SHORTHANDS.items():
        if name in raw:
            top, inner = target.split(".")
            nested = raw.setdefault(top, {}) or {}
            if inner in nested:
                raise RecipeError(f"--{name}", f"and --{top}'s {inner} exclude each other (vLLM refuses both)")
            raw[top] = nested | {inner: raw.pop(name)}
    env = {name: int(value) if f"env.{name}" in BY_NAME and value.isdigit() else value
           for name, value in server.env.items()}
    for name, variables in server.env_unexpanded.items():
        if f"env.{name}" in BY_NAME:
            unexpanded[f"env.{name}"] = (name, variables[0])
            env.pop(name)
    if env:
        raw["env"] = env
    mode = (raw.get("compilation-config") or {}).get("cudagraph_mode")
    if isinstance(mode, str):  # vLLM's validator reads a CUDA-graph mode in any case
        raw["compilation-config"]["cudagraph_mode"] = mode.upper()
    return raw, unexpanded


def argument_key(dest: str, written: str, arguments: dict) -> str:
    """The raw recipe's key for an argument: the recipe key it sets (its dest, dashed), else, ignored, the flag as
    given (--no-enable-X) or the value option's long name."""
    name = canonical(dest)
    if dest == "model_tag":
        return "model"
    if name in SHORTHANDS or name in BY_NAME or name in NESTED:
        return name
    return written[2:] if arguments[written].flags else arguments[written].names[0].lstrip("-")


def read(argument: Argument, written: str, value, release: str, modelled: bool):
    """An argument's value as the recipe holds it: a modelled flag the value it stores, an ignored flag true (given
    as written), a value as its type reads it, several a list."""
    if argument.flags:
        return value if modelled else True
    if isinstance(value, list):
        return [typed(argument, written, v, release) for v in value]
    return typed(argument, written, value, release)


def nested_variables(top: str, written: str, value: str, markers: set) -> tuple[str | None, dict]:
    """A JSON argument whose text holds a shell variable: the JSON without the recipe keys whose values hold one
    (None when it does not read as JSON at all), and those keys -> (as written, the variable)."""
    try:
        mapping = json.loads(value)
    except json.JSONDecodeError:
        return None, {top: (written, holding(value, markers))}
    held = {key for key, inner in mapping.items() if holding(inner, markers) and f"{top}.{key}" in BY_NAME}
    return (json.dumps({k: v for k, v in mapping.items() if k not in held}),
            {f"{top}.{key}": (f"{written}.{key}", holding(mapping[key], markers)) for key in held})


def servers(text: str, version: str | None = None) -> list[Server]:
    """Every server a launch script or a pasted command starts, read."""
    found = launch_script.servers(text)
    if not found:
        raise RecipeError("command", f"no {ENTRY_POINTS}")
    return [server_recipe(server, version) for server in found]


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
    release = vllm_cli.arguments(engines.release_of(recipe.engine.version))
    for name, value in recipe.passthrough:
        top, _, inner = name.partition(".")
        if value is not None and not (value is False and f"--no-{top}" not in release):
            (arguments.setdefault(top, {}) if inner else arguments)[inner or top] = value
    if "speculative-config" in arguments:  # the draft count changes memory: always said
        arguments["speculative-config"].setdefault("num_speculative_tokens", recipe.num_speculative_tokens)
    env = arguments.pop("env", {})
    return Deployment(env, recipe.model_arg, arguments)
