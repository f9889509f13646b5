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


def serve_line(d: Deployment, comment: str) -> str:
    """The environment as a prefix, then `vllm serve MODEL` and one argument a line, continued with backslashes."""
    command = [*(f"{name}={shlex.quote(str(value))}" for name, value in d.env.items()), "vllm", "serve",
               shlex.quote(d.model)]
    return f"# {comment}\n" + " \\\n    ".join([" ".join(command), *(argument(n, v) for n, v in d.arguments.items())]) + "\n"


def vllm_config(d: Deployment, comment: str) -> str:
    """A config file for `vllm serve --config FILE`: the model and the arguments; the environment, which a config
    file cannot hold, in the header."""
    header = [f"# {comment}"]
    if d.env:
        header.append("# run with: " + " ".join(f"{n}={shlex.quote(str(v))}" for n, v in d.env.items())
                      + " vllm serve --config FILE")
    return "\n".join(header) + "\n" + yaml.safe_dump({"model": d.model} | d.arguments, sort_keys=False)
