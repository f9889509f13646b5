"""vLLM's own start-up, as far as it sizes the KV cache, run on a CPU: one release per process, inside the oracle's venv
(oracle/setup.sh). Imports nothing of the project (tests/test_oracle_inputs.py).

    VENV/bin/python oracle/harness.py RELEASE_DIR < cases.json > results.json

A case is what a user gives `vllm serve` and the KV memory to split:

    {"name": ..., "model": a Hugging Face id (configs/<id with / as -->.json is its config.json), "gpu": a name in
     gpus.json, "args": {vLLM argument as written: value} (a `--config` YAML's mapping), "env": {variable: value},
     "kv_cache_bytes": the KV memory each worker reports (null: all the memory vLLM requests)}

For each case the release runs as `vllm serve` runs it, with the GPU emulated (emulation.py):
1. its own argument parser reads the arguments (as a --config file), and its own
   EngineArgs.create_engine_config(OPENAI_API_SERVER) resolves them with the model's config.json into a VllmConfig:
   every default (batch sizes for the GPU's memory, prefix caching, the hybrid cache mode, async scheduling, the
   model runner, the cache dtype) is the release's;
2. one worker a pipeline stage (TP rank 0; its parallel groups hold the case's sizes, its PP rank its stage): the
   release's model runner, its model loader building the model with every layer's real __init__ on the meta device
   (no weights), the drafter its runner picks loading its draft model, then Platform.update_block_size_for_backend
   and the runner's own get_kv_cache_spec;
3. EngineCore._initialize_kv_caches over the stages' specs, each worker reporting kv_cache_bytes.
Whatever the release raises on the way is its refusal, with the line that raised it. What the release computes that
plan also computes comes back: the defaults, the requested memory (request_memory: utilisation x total), whether it
subtracts its CUDA-graph estimate, and the KV cache it plans.
"""

import contextlib
import copy
import functools
import inspect
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "configs"
RELEASE_DIR: Path | None = None
# Raised by the environment, not by a check of the release: the emulation lacks something (an oracle error)
EMULATION_ERRORS = (AttributeError, ImportError, NameError, TypeError, KeyError, IndexError, RecursionError)


def activate(release_dir: Path) -> str:
    """The release's files first on sys.path, vllm imported from them; its version."""
    global RELEASE_DIR
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", tempfile.mkdtemp(prefix="vllm-oracle-cache-"))
    sys.path.insert(0, str(release_dir))
    sys.path.insert(1, str(HERE))
    import vllm

    if release_dir.resolve() not in Path(vllm.__file__).resolve().parents:
        raise RuntimeError(f"vllm imported from {vllm.__file__}, not {release_dir}")
    RELEASE_DIR = release_dir.resolve()
    return release_dir.name


# Logs -------------------------------------------------------------------------------------------------------------

class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@contextlib.contextmanager
def captured_logs():
    """What vLLM logs meanwhile (logger "vllm"), with its *_once caches cleared first."""
    import vllm.logger as vl

    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once"):
        getattr(getattr(vl, name, None), "cache_clear", lambda: None)()
    handler, root = ListHandler(), logging.getLogger("vllm")
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not format
        return str(record.msg)


TOKENS_LINE = re.compile(r"KV cache size: ([\d,]+) tokens")


def logged_tokens(lines: list[str]) -> tuple[int | None, str | None]:
    for line in lines:
        if (found := TOKENS_LINE.search(line)) and "Multiplying" not in line:
            return int(found.group(1).replace(",", "")), line
    return None, None


# Refusals ---------------------------------------------------------------------------------------------------------

class Refusal(Exception):
    """The release refused the case: its message and the line of its code that raised it."""

    def __init__(self, text: str, where: str):
        super().__init__(text)
        self.where = where


def release_line(filename: str, lineno: int) -> str | None:
    path = Path(filename).resolve()
    if RELEASE_DIR is None or RELEASE_DIR not in path.parents:
        return None
    return f"{path.relative_to(RELEASE_DIR)}:{lineno}"


@contextlib.contextmanager
def raising_lines():
    """The line of the release's code where each exception raised meanwhile was raised (first frame it passes):
    pydantic turns the ValueErrors and assertions of a config's __post_init__ into a ValidationError that keeps no
    traceback of them."""
    raised: dict[int, tuple[BaseException, str]] = {}

    def local(frame, event, arg):
        if event == "exception" and id(arg[1]) not in raised:
            where = release_line(frame.f_code.co_filename, frame.f_lineno)
            if where:
                raised[id(arg[1])] = (arg[1], where)
        return local

    def calls(frame, event, arg):
        return local if release_line(frame.f_code.co_filename, 1) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        yield raised
    finally:
        sys.settrace(previous)


def refusal(error: BaseException, raised: dict) -> Refusal | None:
    """The release's refusal behind an exception, or None where the emulation failed (an oracle error)."""
    if type(error).__name__ == "ValidationError":  # pydantic: the ValueError or assertion inside is the refusal
        inner = [e for e, _ in raised.values() if isinstance(e, (ValueError, AssertionError)) and
                 type(e).__name__ != "ValidationError" and (str(e) in str(error) or not str(e))]
        if inner:
            original = inner[-1]
            where = next(w for e, w in raised.values() if e is original)
            return Refusal(f"{type(original).__name__}: {original}".rstrip(": "), where)
        return Refusal(str(error).splitlines()[1].strip() if "\n" in str(error) else str(error), "pydantic")
    if isinstance(error, EMULATION_ERRORS):
        return None
    raising = traceback.extract_tb(error.__traceback__)[-1]
    where = release_line(raising.filename, raising.lineno)
    if where is None:  # raised by torch or the emulation, not by a check of the release
        return None
    return Refusal(f"{type(error).__name__}: {error}", where)


# 1. The arguments and the config ----------------------------------------------------------------------------------

@functools.cache
def serve_parser():
    """The parser `vllm serve` runs (vllm/entrypoints/cli/serve.py: make_arg_parser on a FlexibleArgumentParser)."""
    import importlib

    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.launchers.cli_args",
                   "vllm.entrypoints.openai.cli_args"):
        with contextlib.suppress(ImportError, AttributeError):
            make_arg_parser = importlib.import_module(module).make_arg_parser
            return make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    raise ImportError("no make_arg_parser in this release")


def model_config_json(model: str) -> dict:
    """The model's config.json as vLLM reads a checkpoint's. A text config (model_type X_text: the catalog's copies of
    DeepSeek-V4.1-Flash and GLM-5.3-Flash are the flattened text configs of multimodal checkpoints) is nested as the
    text_config of model type X, with the architectures and the quantization config at the top, the layout the
    release's config classes read (vllm==0.33.0 vllm/transformers_utils/configs/deepseek_v41.py:11-16;
    vllm==0.30.0 vllm/transformers_utils/configs/glm5_next.py:327-366)."""
    config = json.loads((CONFIGS / f"{model.replace('/', '--')}.json").read_text())
    model_type = config["model_type"]
    if not model_type.endswith("_text"):
        return config
    top = {"architectures": config["architectures"], "model_type": model_type.removesuffix("_text"),
           "text_config": config}
    if "quantization_config" in config:
        top["quantization_config"] = config["quantization_config"]
    return top


def model_folder(model: str, folders: dict) -> str:
    """A folder holding the model's config.json, as vLLM is given a model path."""
    if model not in folders:
        folder = Path(tempfile.mkdtemp(prefix="oracle-model-"))
        (folder / "config.json").write_text(json.dumps(model_config_json(model)))
        folders[model] = str(folder)
    return folders[model]


def config_file(args: dict) -> str:
    """The case's arguments as a `vllm serve --config` YAML; mappings as the JSON strings the CLI takes."""
    import yaml

    written = {key: json.dumps(value) if isinstance(value, dict) else value for key, value in args.items()}
    handle, path = tempfile.mkstemp(prefix="oracle-args-", suffix=".yaml")
    with os.fdopen(handle, "w") as file:
        yaml.safe_dump(written, file)
    return path


def engine_args(case: dict, folders: dict):
    """The release's AsyncEngineArgs from its own parser, as `vllm serve MODEL --config ARGS.yaml` builds them."""
    import io

    from vllm.engine.arg_utils import AsyncEngineArgs

    parser = serve_parser()
    argv = [model_folder(case["model"], folders), "--config", config_file(case["args"])]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(argv)
    except SystemExit:
        problem = stderr.getvalue().strip().splitlines()
        raise Refusal(f"vLLM's argument parser: {problem[-1] if problem else 'refused'}",
                      "vllm/entrypoints (argument parser)") from None
    if getattr(namespace, "model_tag", None):
        namespace.model = namespace.model_tag
    return AsyncEngineArgs.from_cli_args(namespace)


@contextlib.contextmanager
def environment(env: dict):
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update({name: str(value) for name, value in env.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def create_config(args) -> object:
    from vllm.usage.usage_lib import UsageContext

    return args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def defaults(vllm_config) -> dict:
    """What the release resolved that plan resolves too."""
    cache, scheduler, parallel = vllm_config.cache_config, vllm_config.scheduler_config, vllm_config.parallel_config
    compilation = vllm_config.compilation_config
    return {"max_num_seqs": scheduler.max_num_seqs, "max_num_batched_tokens": scheduler.max_num_batched_tokens,
            "max_model_len": vllm_config.model_config.max_model_len,
            "async_scheduling": bool(getattr(scheduler, "async_scheduling", False)),
            "enable_prefix_caching": bool(cache.enable_prefix_caching),
            "mamba_cache_mode": getattr(cache, "mamba_cache_mode", None),
            "cache_dtype": cache.cache_dtype, "gpu_memory_utilization": cache.gpu_memory_utilization,
            "model_runner_v2": bool(getattr(vllm_config, "use_v2_model_runner", False)),
            "cudagraph_mode": str(getattr(compilation.cudagraph_mode, "name", compilation.cudagraph_mode)),
            "executor": str(parallel.distributed_executor_backend)}


# 2. The workers ---------------------------------------------------------------------------------------------------

def build_only(loader, vllm_config, model_config, prefix: str = "", **ignored):
    """BaseModelLoader.load_model without its weights: the model made as the release makes it (create_model, else
    initialize_model, under the model's dtype), on the meta device. There are no weights here to load or process."""
    import emulation
    from vllm.model_executor.model_loader.utils import initialize_model

    with torch_default_dtype(model_config.dtype), emulation.MetaDevice():
        make = getattr(loader, "create_model", None) or initialize_model
        return emulation.call_with(make, vllm_config=vllm_config, model_config=model_config, prefix=prefix).eval()


@contextlib.contextmanager
def torch_default_dtype(dtype):
    import torch

    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def loaders_build_only() -> list:
    """Every model loader class of the release, its load_model replaced by build_only."""
    from vllm.model_executor.model_loader.base_loader import BaseModelLoader

    classes, pending = [], [BaseModelLoader]
    while pending:
        cls = pending.pop()
        classes.append(cls)
        pending += cls.__subclasses__()
    return [(cls, "load_model", build_only) for cls in classes if "load_model" in vars(cls)]


def runner_class(vllm_config):
    """The model runner the release's worker makes: Model Runner V2 where its config says so, else V1."""
    if getattr(vllm_config, "use_v2_model_runner", False):
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    else:
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    return GPUModelRunner


def worker_specs(vllm_config, stage: int) -> tuple[dict, list]:
    """One worker's KV-cache specs and attention backends: its runner, the model and the drafter loaded as the runner
    loads them, the block size the platform sets for the model's backends."""
    import emulation
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.platforms import current_platform

    device = torch.device("cuda:0")
    replacements = loaders_build_only() + emulation.checkpoint_files(vllm_config.model_config.hf_text_config)
    with emulation.worker_groups(vllm_config.parallel_config, stage), set_current_vllm_config(vllm_config), \
            emulation.replaced(replacements), emulation.MetaDevice():
        with contextlib.suppress(ImportError):
            from vllm.v1.worker.workspace import init_workspace_manager

            emulation.call_with(init_workspace_manager, device=device, num_ubatches=1)
        runner = runner_class(vllm_config)(vllm_config, device)
        runner.model = get_model_loader(vllm_config.load_config).load_model(
            vllm_config=vllm_config, model_config=vllm_config.model_config)
        drafter = getattr(runner, "speculator", None) or getattr(runner, "drafter", None)
        if drafter is not None and hasattr(drafter, "load_model"):
            drafter.load_model(runner.model)
        current_platform.update_block_size_for_backend(vllm_config)
        specs = runner.get_kv_cache_spec()
        backends = attention_backends(vllm_config)
    return specs, backends


def attention_backends(vllm_config) -> list:
    from vllm.config.vllm import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    backends = []
    for layer in get_layers_from_vllm_config(vllm_config, AttentionLayerBase).values():
        with contextlib.suppress(Exception):
            backend = layer.get_attn_backend()
            if backend not in backends:
                backends.append(backend)
    return backends


def check_builders(vllm_config, backends: list) -> None:
    """The checks of the config alone that the backends' metadata builders run first when the worker builds them
    with its KV cache (after the planner, where a GPU is needed for the rest): the DSA indexer's builder resolves its
    cache dtype by dsa_indexer_uses_fp4, which refuses an MXFP4 indexer cache off the SM10x family
    (vllm==0.33.0 vllm/v1/attention/backends/mla/indexer.py:1028; 0.30.0 :806). Found by name in the builder's
    __init__, so a release whose builder does not call it is not asked."""
    import vllm.v1.attention.backends.mla.indexer as indexer

    for backend in backends:
        try:
            source = inspect.getsource(backend.get_builder_cls().__init__)
        except Exception:  # noqa: BLE001 - a builder the emulation cannot import is not checked here
            continue
        if "dsa_indexer_uses_fp4" in source:
            indexer.dsa_indexer_uses_fp4(vllm_config)


# 3. The planner ---------------------------------------------------------------------------------------------------

class Executor:
    """What EngineCore asks its executor while it sizes the KV cache: the workers' specs, each worker's KV memory."""

    def __init__(self, specs: list[dict], available: int, layouts: list[str]):
        self.specs, self.available, self.layouts = specs, available, layouts
        self.worker_configs = None

    def get_kv_cache_specs(self):
        return self.specs

    def determine_available_memory(self):
        return [self.available] * len(self.specs)

    def get_supported_kv_cache_layouts(self):
        return [list(self.layouts)] * len(self.specs)

    def set_kv_cache_layout(self, *args, **kwargs):
        pass

    def initialize_from_config(self, configs):
        self.worker_configs = configs

    def compile_or_warm_up_model(self):
        return None

    def get_simple_cpu_offload_num_blocks(self):
        return None

    def collective_rpc(self, method, *args, **kwargs):
        return [None] * len(self.specs)


def supported_layouts(backends: list) -> list[str]:
    """The KV-cache layouts the workers report for their layers' backends (0.29.0+)."""
    try:
        import vllm.v1.attention.backends.utils as utils
    except ImportError:
        return []
    if not hasattr(utils, "get_supported_kv_cache_layouts"):
        return []
    return [layout.name for layout in utils.get_supported_kv_cache_layouts(backends)]


def plan(vllm_config, specs: list[dict], available: int, backends: list) -> dict:
    """The release's EngineCore._initialize_kv_caches on these specs and this KV memory."""
    from vllm.v1.engine.core import EngineCore

    executor = Executor(specs, available, supported_layouts(backends))
    engine = types.SimpleNamespace(model_executor=executor, available_gpu_memory_for_kv_cache=-1,
                                   collective_rpc=executor.collective_rpc)
    with captured_logs() as records:
        scheduler_config = EngineCore._initialize_kv_caches(engine, vllm_config)
    lines = [message(r) for r in records]
    tokens, line = logged_tokens(lines)
    return {"tokens": tokens, "line": line, "num_blocks": scheduler_config.num_blocks,
            "block_bytes": max(block_bytes(vllm_config, config) for config in executor.worker_configs),
            "blocks_per_request": blocks_per_request(vllm_config, scheduler_config),
            "groups": [group_summary(g, vllm_config) for g in scheduler_config.kv_cache_groups],
            "log": [l for l in lines if "KV cache" in l or "concurrency" in l or "block size" in l.lower()]}


def blocks_per_request(vllm_config, scheduler_config) -> int | float:
    """The blocks one request of max_model_len holds, as the release counts them for its concurrency: num_blocks over
    its get_max_concurrency_for_kv_cache_config (a byte ratio before 0.27.0, the groups' pages summed since)."""
    import vllm.v1.core.kv_cache_utils as utils

    ratio = scheduler_config.num_blocks / utils.get_max_concurrency_for_kv_cache_config(vllm_config, scheduler_config)
    return round(ratio) if abs(ratio - round(ratio)) < 1e-6 else round(ratio, 3)


def group_summary(group, vllm_config) -> dict:
    spec = group.kv_cache_spec
    most = spec.max_memory_usage_bytes(vllm_config)
    inner = getattr(spec, "kv_cache_specs", None)
    pages = sorted({s.page_size_bytes for s in inner.values()}) if isinstance(inner, dict) else [spec.page_size_bytes]
    return {"type": type(spec).__name__, "layers": len(group.layer_names), "first_layer": group.layer_names[0],
            "block_size": spec.block_size, "page_bytes": spec.page_size_bytes, "layer_pages": pages,
            "blocks_per_request": math.ceil(most / spec.page_size_bytes)}


def block_bytes(vllm_config, kv_cache_config) -> int:
    """What one block costs, by the release's own function where it has one (0.20.1+), else the tensors' bytes over
    the blocks (0.19.x, 0.20.0)."""
    import vllm.v1.core.kv_cache_utils as utils

    planning = utils
    with contextlib.suppress(ImportError):
        import vllm.v1.core.kv_cache_planning as planning  # 0.33.0+
    groups = [g for g in kv_cache_config.kv_cache_groups if not getattr(g, "host_resident", False)]
    if hasattr(planning, "_pool_bytes_per_block_from_builder"):
        from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder

        return planning._pool_bytes_per_block_from_builder(get_kv_cache_config_builder(vllm_config), vllm_config,
                                                            groups)
    if hasattr(planning, "_pool_bytes_per_block"):
        import emulation

        return emulation.call_with(planning._pool_bytes_per_block, vllm_config=vllm_config, kv_cache_groups=groups)
    return sum(t.size for t in kv_cache_config.kv_cache_tensors) // kv_cache_config.num_blocks


# The memory chain -------------------------------------------------------------------------------------------------

def requested_memory(vllm_config, gpu: dict) -> int:
    """The release's request_memory (utilisation x total, rounded up) on the GPU's memory, all of it free."""
    from vllm.v1.worker.utils import request_memory

    snapshot = types.SimpleNamespace(total_memory=gpu["total_memory_bytes"], free_memory=gpu["total_memory_bytes"],
                                     device_="cuda:0", device=None)
    return request_memory(snapshot, vllm_config.cache_config)


def subtracts_graph_estimate(vllm_config, runner_cls) -> bool:
    """Whether the worker takes its CUDA-graph estimate out of the KV memory: its environment switch
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, vllm/envs.py), graphs captured at all, and a runner whose
    profile_cudagraph_memory estimates something (Model Runner V2's returned 0 before 0.29.0)."""
    import vllm.envs as envs

    if not getattr(envs, "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", False):
        return False
    mode = vllm_config.compilation_config.cudagraph_mode
    if str(getattr(mode, "name", mode)) == "NONE":
        return False
    estimate = getattr(runner_cls, "profile_cudagraph_memory", None)
    if estimate is None:
        return False
    body = [line.strip() for line in inspect.getsource(estimate).splitlines()[1:]
            if line.strip() and not line.strip().startswith(("#", '"""', "'''"))]
    return body != ["return 0"]


# Cases ------------------------------------------------------------------------------------------------------------

def run(case: dict, folders: dict) -> dict:
    """A case -> whether the release starts and, if it does, what it resolves and the KV cache it plans."""
    import emulation

    started = time.perf_counter()
    result: dict = {"name": case["name"]}
    gpu = emulation.GPUS[case["gpu"]]
    raised: dict = {}
    try:
        with environment(case.get("env", {})), emulation.emulate(gpu, devices=1024), \
                emulation.replaced(emulation.tokenizer_files()), raising_lines() as raised:
            args = engine_args(case, folders)
            vllm_config = create_config(args)
        with environment(case.get("env", {})), emulation.emulate(gpu, devices=1024), \
                emulation.replaced(emulation.tokenizer_files()):
            result["defaults"] = defaults(vllm_config)
            result["requested_bytes"] = requested_memory(vllm_config, gpu)
            result["subtracts_graph_estimate"] = subtracts_graph_estimate(vllm_config, runner_class(vllm_config))
            stages = vllm_config.parallel_config.pipeline_parallel_size
            one_process = result["defaults"]["executor"] == "uni"
            workers = [worker_specs(vllm_config if one_process else copy.deepcopy(vllm_config), stage)
                       for stage in range(stages)]
            available = result["requested_bytes"] if case["kv_cache_bytes"] is None else case["kv_cache_bytes"]
            backends = [b for _, stage_backends in workers for b in stage_backends]
            result |= plan(vllm_config, [specs for specs, _ in workers], available, backends)
            with raising_lines() as raised:
                check_builders(vllm_config, backends)
            result["backends"] = sorted({b.get_name() for b in backends})
            result["stride_alignments"] = sorted({str(getattr(spec, "block_stride_alignment", None))
                                                  for specs, _ in workers for spec in specs.values()})
        result["starts"] = True
    except Refusal as found:
        result |= {"starts": False, "refusal": str(found), "refusal_at": found.where}
    except Exception as error:  # noqa: BLE001 - a case that fails is reported, the others still run
        found = refusal(error, raised)
        if found is None:
            result |= {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-4000:]}
        else:
            result |= {"starts": False, "refusal": str(found)[:2000], "refusal_at": found.where}
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main() -> int:
    release_dir = Path(sys.argv[1])
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM's log handler of old releases writes to stdout
    started = time.perf_counter()
    release = activate(release_dir)
    import emulation

    cases = json.load(sys.stdin)
    architectures = {json.loads((CONFIGS / f"{c['model'].replace('/', '--')}.json").read_text())["architectures"][0]
                     for c in cases}
    emulation.preload(architectures, emulation.GPUS[cases[0]["gpu"]] if cases else emulation.GPUS["H200"])
    imported = round(time.perf_counter() - started, 2)
    folders: dict = {}
    progress = os.environ.get("ORACLE_PROGRESS")  # a file each answer is appended to as it comes (a long table)
    results = []
    for case in cases:
        results.append(run(case, folders))
        if progress:
            with open(progress, "a") as file:
                file.write(json.dumps({"release": release, "case": case} | results[-1], default=str) + "\n")
    json.dump({"release": release, "import_seconds": imported, "results": results}, real_stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
