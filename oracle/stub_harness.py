"""A stand-in VllmConfig for the oracle's narrower tools (weights.py, kv_init_buffers.py, via families.py): the
KV-cache planner of one release run from a case's own model and serving inputs, one release per process, inside the
oracle's venv (oracle/setup.sh). The KV-cache oracle proper, which takes nothing but the user's arguments, is
harness.py.

    VENV/bin/python oracle/stub_harness.py RELEASE_DIR < cases.json > results.json

A case names a spec family (oracle/families.py) with its model and serving inputs; the harness builds the layers as the
release's model code builds them, asks each for its KV-cache spec as the release's GPU model runner does, and runs the
release's own EngineCore._initialize_kv_caches with an executor that hands it those specs and the KV memory. It returns
vLLM's groups, bytes per block, blocks per request and the "GPU KV cache size" line vLLM logged.

The VllmConfig the planner reads is a stand-in: the release's own CacheConfig, SchedulerConfig and ParallelConfig
(wrapped to record what is read), and strict stubs for the rest that raise on any attribute not given, so that a new
release reading something new fails loudly instead of reading a default.
"""

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import sys
import time
import traceback
import types
from pathlib import Path

# What the KV-cache oracle and this harness share: vLLM's log lines, and the planner's answers (families.py and
# kv_init_buffers.py read them here too)
from harness import Executor, blocks_per_request, captured_logs, group_summary, logged_tokens, message, supported_layouts

HERE = Path(__file__).resolve().parent


def activate(release_dir: Path) -> str:
    """The release's files first on sys.path, vllm imported from them; its version."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(release_dir))
    sys.path.insert(1, str(HERE))
    import vllm

    if release_dir.resolve() not in Path(vllm.__file__).resolve().parents:
        raise RuntimeError(f"vllm imported from {vllm.__file__}, not {release_dir}")
    return release_dir.name


# Stubs ------------------------------------------------------------------------------------------------------------

class StubAttributeError(AttributeError):
    pass


class Strict:
    """Exactly the attributes given: reading any other raises, naming it. Reads are recorded in the tree's log."""

    def __init__(self, path: str, log: dict, **attrs):
        object.__setattr__(self, "stub_path", path)
        object.__setattr__(self, "stub_log", log)
        for name, value in attrs.items():
            object.__setattr__(self, name, value)

    def __getattribute__(self, name):
        if not name.startswith("_") and not name.startswith("stub_"):
            log = object.__getattribute__(self, "stub_log")
            log.setdefault("reads", set()).add(f"{object.__getattribute__(self, 'stub_path')}.{name}")
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        path = object.__getattribute__(self, "stub_path")
        object.__getattribute__(self, "stub_log").setdefault("missing", set()).add(f"{path}.{name}")
        raise StubAttributeError(f"oracle stub {path} has no attribute {name!r}: the release reads it")

    def __repr__(self):
        return f"<stub {object.__getattribute__(self, 'stub_path')}>"


class Recorder:
    """A real config object; every read is recorded."""

    def __init__(self, path: str, log: dict, target):
        object.__setattr__(self, "stub_path", path)
        object.__setattr__(self, "stub_log", log)
        object.__setattr__(self, "stub_target", target)

    def __getattr__(self, name):
        if not name.startswith("_"):
            self.stub_log.setdefault("reads", set()).add(f"{self.stub_path}.{name}")
        return getattr(self.stub_target, name)

    def __setattr__(self, name, value):
        setattr(self.stub_target, name, value)


def stub_class(name: str, real_cls, given: set):
    """A Strict subclass carrying real_cls's methods and properties, so that the release's own derived values
    (VllmConfig.max_in_flight_tokens, SpeculativeConfig.use_eagle, ...) are computed by the release."""
    namespace = {}
    for klass in reversed(real_cls.__mro__ if real_cls else ()):
        if klass is object or klass.__module__.startswith(("pydantic", "builtins", "typing")):
            continue
        for key, value in vars(klass).items():
            if key.startswith("__") or key in given:
                continue
            if isinstance(value, (types.FunctionType, property, staticmethod, classmethod)):
                namespace[key] = value
            elif type(value).__name__ == "cached_property":
                namespace[key] = property(value.func)
    return type(f"Stub{name}", (Strict,), namespace)


def stub(path: str, log: dict, real_cls=None, **attrs) -> Strict:
    return stub_class(path.replace(".", "_"), real_cls, set(attrs))(path, log, **attrs)


def construct(cls, kwargs: dict, log: dict, path: str):
    """A real config object from the keyword arguments its class takes; those it does not are noted."""
    accepted = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    with contextlib.suppress(TypeError, ValueError):
        accepted |= set(inspect.signature(cls).parameters)
    dropped = sorted(set(kwargs) - accepted)
    if dropped:
        log.setdefault("dropped_kwargs", []).append(f"{path}: {dropped}")
    with quiet():
        return cls(**{k: v for k, v in kwargs.items() if k in accepted})


def build_vllm_config(serving: dict, model: dict, log: dict):
    """The VllmConfig stand-in for the planner and the model code.

    serving: max_model_len, max_num_batched_tokens, max_num_seqs, async_scheduling, enable_prefix_caching (vLLM's
      default, on, where absent), cache_dtype (the block size is
      left to the release: Platform.update_block_size_for_backend picks it once the layers exist),
      tensor/pipeline/data/decode_context_parallel_size, speculative ({method, num_speculative_tokens}),
      attention_config ({field: value}), use_v2_model_runner.
    model: architectures, model_type, hf_config ({field: value}: what the model code reads of its config).
    """
    import torch
    import vllm.config as C

    cache = construct(C.CacheConfig, dict(cache_dtype=serving["cache_dtype"],
                                          enable_prefix_caching=serving.get("enable_prefix_caching", True)), log,
                      "cache_config")
    scheduler = construct(C.SchedulerConfig, dict(
        max_num_batched_tokens=serving["max_num_batched_tokens"], max_num_seqs=serving["max_num_seqs"],
        max_model_len=serving["max_model_len"], is_encoder_decoder=False, enable_chunked_prefill=True,
        async_scheduling=serving["async_scheduling"], disable_hybrid_kv_cache_manager=False), log, "scheduler_config")
    for name in ("max_num_batched_tokens", "max_num_seqs", "async_scheduling"):  # __post_init__ may have moved them
        setattr(scheduler, name, serving[name])
    parallel = construct(C.ParallelConfig, dict(
        tensor_parallel_size=serving["tensor_parallel_size"], pipeline_parallel_size=serving["pipeline_parallel_size"],
        data_parallel_size=serving["data_parallel_size"],
        decode_context_parallel_size=serving["decode_context_parallel_size"]), log, "parallel_config")
    heads = model["hf_config"].get("num_attention_heads", 0)
    hf = stub("model_config.hf_config", log, None, model_type=model["model_type"],
              architectures=list(model["architectures"]), **model["hf_config"])
    model_config = stub("model_config", log, None, max_model_len=serving["max_model_len"],
                        original_max_model_len=serving["max_model_len"], supports_kv_cache_grouping=False,
                        architectures=list(model["architectures"]), dtype=torch.bfloat16, is_encoder_decoder=False,
                        hf_config=hf, hf_text_config=hf, is_hybrid=False, rswa_window=None,
                        use_mla=True, is_deepseek_mla=True, get_num_layers=lambda parallel: hf.num_hidden_layers,
                        get_num_attention_heads=lambda parallel: heads // parallel.tensor_parallel_size)
    top = dict(model_config=model_config, cache_config=Recorder("cache_config", log, cache),
               scheduler_config=Recorder("scheduler_config", log, scheduler),
               parallel_config=Recorder("parallel_config", log, parallel),
               speculative_config=speculative_config(serving, model, log),
               device_config=stub("device_config", log, None, device_type="cuda", device=torch.device("cpu")),
               compilation_config=stub("compilation_config", log, None, compilation_time=0.0,
                                       encoder_compilation_time=0.0, static_forward_context={}),
               kv_transfer_config=None, kv_events_config=None, lora_config=None, diffusion_config=None,
               quant_config=None, use_v2_model_runner=serving["use_v2_model_runner"])
    if hasattr(C, "AttentionConfig"):
        attention = construct(C.AttentionConfig, serving["attention_config"], log, "attention_config")
        top["attention_config"] = Recorder("attention_config", log, attention)
    return stub("vllm_config", log, C.VllmConfig, **top)


def speculative_config(serving: dict, model: dict, log: dict):
    """SpeculativeConfig's fields the planner and the model code read, with the release's own methods."""
    spec = serving["speculative"]
    if not spec:
        return None
    import vllm.config as C

    draft_hf = stub("speculative_config.draft_model_config.hf_config", log, None,
                    model_type=model["model_type"], **model["hf_config"])
    draft = stub("speculative_config.draft_model_config", log, None, hf_config=draft_hf, hf_text_config=draft_hf,
                 max_model_len=serving["max_model_len"])
    return stub("speculative_config", log, getattr(C, "SpeculativeConfig", None), method=spec["method"],
                num_speculative_tokens=spec["num_speculative_tokens"], disable_eagle_block_drop=False,
                draft_model_config=draft)


# Logs -------------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def quiet():
    root = logging.getLogger("vllm")
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


# The planner ------------------------------------------------------------------------------------------------------

def plan(vllm_config, specs: dict, available: int, backends: list) -> dict:
    """The release's EngineCore._initialize_kv_caches on these specs and this KV memory."""
    from vllm.v1.engine.core import EngineCore

    executor = Executor([specs], available, supported_layouts(backends))
    engine = types.SimpleNamespace(model_executor=executor, available_gpu_memory_for_kv_cache=-1,
                                   collective_rpc=executor.collective_rpc)
    with captured_logs() as records:
        scheduler_config = EngineCore._initialize_kv_caches(engine, vllm_config)
    lines = [message(r) for r in records]
    tokens, line = logged_tokens(lines)
    groups = [group_summary(g, vllm_config) for g in scheduler_config.kv_cache_groups]
    return {"tokens": tokens, "line": line, "num_blocks": scheduler_config.num_blocks,
            "block_bytes": block_bytes(vllm_config, executor.worker_configs[0]),
            "blocks_per_request": blocks_per_request(vllm_config, scheduler_config), "groups": groups,
            "layout": str(getattr(executor.worker_configs[0], "kv_cache_layout", None)),
            "log": [l for l in lines if "KV cache" in l or "concurrency" in l or "block size" in l.lower()]}


def call_with(fn, **available):
    """fn with the arguments its signature names (they differ between releases)."""
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in available.items() if k in params})


def block_bytes(vllm_config, kv_cache_config):
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
        return call_with(planning._pool_bytes_per_block, vllm_config=vllm_config, kv_cache_groups=groups)
    return sum(t.size for t in kv_cache_config.kv_cache_tensors) // kv_cache_config.num_blocks


# Cases ------------------------------------------------------------------------------------------------------------

def run(case: dict) -> dict:
    """{"name", "family", "model": {...}, "serving": {...}, "available_bytes"} -> vLLM's plan, or its error."""
    import families
    import platform_cuda

    started = time.perf_counter()
    log: dict = {}
    try:
        built = families.build(case, log)
        result = plan(built["vllm_config"], built["specs"], case["available_bytes"], built["backends"])
        result["info"] = built["info"]
    except platform_cuda.Unsupported as error:
        result = {"unsupported": str(error)}
    except Exception as error:  # noqa: BLE001 - a case that fails is reported, the others still run
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    result["name"] = case["name"]
    result["config_missing"] = sorted(log.get("missing", ()))
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main() -> int:
    release_dir = Path(sys.argv[1])
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # vLLM's log handler of old releases writes to stdout
    started = time.perf_counter()
    release = activate(release_dir)
    imported = round(time.perf_counter() - started, 2)
    results = [run(case) for case in json.load(sys.stdin)]
    json.dump({"release": release, "import_seconds": imported, "results": results}, real_stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
