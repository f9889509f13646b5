"""vLLM's own `vllm serve` argument parser, from one release's Python files, on a CPU: the oracle of
tests/test_vllm_args.py. Run with a Python that has vLLM's dependencies (not the project's venv: vLLM pins a newer
typer), the release's folder first:

    ~/.cache/dsa-kvcalc-oracle/venv/bin/python tests/vllm_parser.py ~/.cache/dsa-kvcalc-oracle/releases/0.33.0 < cases.json

cases.json is a list of {"argv": [words after `vllm serve`]}, {"config": "a --config YAML"} or {"options": true};
it prints one JSON object a case: the namespace (values vLLM's types made, JSON-able) or the parser's error, and for
"options" every option string with its dest and number of values.
"""

import contextlib
import io
import json
import os
import sys

os.environ["VLLM_TARGET_DEVICE"] = "cpu"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, sys.argv[1])

import importlib  # noqa: E402

with contextlib.redirect_stdout(sys.stderr):  # vLLM's import-time messages
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

    # Where each release keeps make_arg_parser (vllm/entrypoints/cli/serve.py imports it from there)
    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",  # 0.33.0; 0.29.0+
                   "vllm.entrypoints.openai.cli_args"):  # 0.19.0 - 0.28.0
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
            break
        except ModuleNotFoundError as error:
            if not module.startswith(error.name or "?"):
                raise


def serve_parser():
    """The parser `vllm serve` runs (vllm/entrypoints/cli/main.py and serve.py: subparser_init)."""
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    make_arg_parser(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    return top, subparsers.choices["serve"]


def jsonable(value, depth: int = 0):
    """A namespace value as JSON: a config object (--compilation-config, --attention-config) as its fields, an enum
    as its name."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if hasattr(value, "__dataclass_fields__") and depth < 3:
        return {name: jsonable(getattr(value, name, None), depth + 1) for name in value.__dataclass_fields__}
    return getattr(value, "name", None) or str(value)


def run(case: dict) -> dict:
    top, serve = serve_parser()
    if case.get("options"):
        return {"options": {o: {"dest": a.dest, "nargs": a.nargs} for o, a in serve._option_string_actions.items()}}
    argv = ["serve", "--config", case["config"]] if "config" in case else ["serve", *case["argv"]]
    error = io.StringIO()
    try:
        with contextlib.redirect_stderr(error):
            namespace = top.parse_args(argv)
    except SystemExit:
        return {"error": error.getvalue().strip().splitlines()[-1]}
    except Exception as problem:  # noqa: BLE001 - vLLM's own ValueErrors (a config file, --served-model-name)
        return {"error": f"{type(problem).__name__}: {problem}"}
    return {"namespace": {k: jsonable(v) for k, v in vars(namespace).items()}}


if __name__ == "__main__":
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's import-time messages
        results = [run(case) for case in json.load(sys.stdin)]
    print(json.dumps(results))
