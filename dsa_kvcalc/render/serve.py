"""A Deployment (vllm_args.py) as a `vllm serve` command line or a `vllm serve --config` YAML. No arithmetic."""

import json
import shlex

import yaml

from dsa_kvcalc.vllm_args import Deployment


def argument(name: str, value) -> str:
    """One argument as vLLM's parser takes it: a flag, its --no- form, a JSON mapping, values, or one value."""
    if value is True:
        return f"--{name}"
    if value is False:
        return f"--no-{name}"
    if isinstance(value, dict):
        return f"--{name} {shlex.quote(json.dumps(value))}"
    if isinstance(value, list):
        return f"--{name} " + " ".join(shlex.quote(str(v)) for v in value)
    return f"--{name} {shlex.quote(str(value))}"


COMMENT_WIDTH = 78  # a comment line of the header, after "# "


def laid_out(words: list[str]) -> list[str]:
    """Words on lines of at most COMMENT_WIDTH characters (a longer word alone on its line), the continuations
    indented: a header a terminal does not break."""
    lines = [words[0]]
    for word in words[1:]:
        if len(lines[-1]) + 1 + len(word) > COMMENT_WIDTH:
            lines.append(f"  {word}")
        else:
            lines[-1] += f" {word}"
    return lines


def serve_line(d: Deployment, comments: list[str]) -> str:
    """The environment as a prefix, then `vllm serve MODEL` and one argument a line, continued with backslashes."""
    command = [*(f"{name}={shlex.quote(str(value))}" for name, value in d.env.items()), "vllm", "serve",
               shlex.quote(d.model)]
    lines = " \\\n    ".join([" ".join(command), *(argument(n, v) for n, v in d.arguments.items())])
    return "".join(f"# {c}\n" for c in comments) + lines + "\n"


def vllm_config(d: Deployment, comments: list[str]) -> str:
    """A config file for `vllm serve --config FILE`: the model and the arguments; the environment, which a config
    file cannot hold, in the header."""
    if d.env:
        comments = [*comments, *laid_out(["run with:", *(f"{n}={shlex.quote(str(v))}" for n, v in d.env.items()),
                                          "vllm serve --config FILE"])]
    return "".join(f"# {c}\n" for c in comments) + yaml.safe_dump({"model": d.model} | d.arguments, sort_keys=False)
