"""The bytes a rank holds after vLLM loads a model, counted by building the release's own model classes on PyTorch's
meta device, on a CPU: one release per process, inside the oracle's venv (oracle/setup.sh).

    VENV/bin/python oracle/weights.py RELEASE_DIR < cases.json > results.json

A case gives a model's config.json (tools/derive_weights.py reads them from oracle/configs) and the serving arguments
that shape the model: the GPU's arch, the parallel sizes, the batch and length limits, the cache dtype and the
speculative method. The release builds its VllmConfig from them (EngineArgs.create_engine_config, on the CPU platform),
then the harness turns the platform into the release's CUDA platform answering as the GPU (platform_cuda.cuda_platform)
and builds, under torch.device("meta"):

- the target model, as GPUModelRunner.load_model does (vllm/model_executor/model_loader/utils.py initialize_model);
- the drafter's model, as the proposer's load_model does, and the embeddings and LM head the proposer then shares with
  the target (vllm==0.33.0 vllm/v1/spec_decode/llm_base_proposer.py:1303-1320, 1418-1585), called on the built model.

Every tensor then alive on the meta device is what the load left allocated: "Model loading took" is the CUDA
allocator's growth across the same calls (vllm==0.33.0 vllm/v1/worker/gpu_model_runner.py:4989-5076,
DeviceMemoryProfiler in vllm/utils/mem_utils.py:82-101). Storages are counted once (views and tied weights share
one). Each is filed by what holds it: a routed-expert parameter (a RoutedExperts module's), another parameter or
buffer of decoder layer N, of the embedding, of the final norm and LM head, of the drafter; or no parameter at all
(workspaces and index buffers the model's __init__ allocates).

The attention backends are imported before the count starts, as vLLM imports them while it picks one: a buffer a
kernel module allocates when imported (CUTLASS MLA's 128 MiB SM100 workspace) is left out.

Parallel groups are stand-ins with the sizes and rank 0 (vllm/distributed/parallel_state.py get_tp_group and the rest
return them), so every layer takes rank 0's shard. Compiled kernels are not called: a module that would call one when
built gets a stand-in, and no weight is loaded or post-processed, so a layout that a kernel backend rewrites after
loading (process_weights_after_loading) is counted as created.
"""

import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from unittest import mock

import stub_harness
import platform_cuda

# Op namespaces of vLLM's compiled extensions and kernel packages (torch.ops.NAMESPACE.op): looked up, never called.
COMPILED_OP_NAMESPACES = ("_C", "_C_cache_ops", "_moe_C", "_C_custom_ar", "_flashmla_C", "_flashmla_extension_C",
                          "_vllm_fa2_C", "_vllm_fa3_C", "_C_cuda_utils", "_qutlass_C", "_flashkda_C", "deep_gemm",
                          "deep_select", "fmha_sm100")
# What a GPU install of the release has (the vLLM image ships DeepGEMM): the model code asks before it builds.
# Streaming multiprocessors a kernel module asks for when imported (torch.cuda.get_device_properties): H100/H200, B200,
# B300, RTX PRO 6000, GB10 (NVIDIA's data sheets); the count sizes no weight.
SM_COUNTS = {"sm90": 132, "sm100": 148, "sm103": 148, "sm120": 188, "sm121": 48}
KERNEL_PACKAGES = ("tilelang", "cutlass", "cuda")
INSTALLED = {"is_uva_available", "has_tilelang", "has_deep_gemm", "is_deep_gemm_supported", "has_deep_gemm_sparse_mqa"}


class KernelPackages(platform_cuda.GpuOnlyPackages):
    """Stand-ins for kernel packages a GPU install has beside flashinfer: TileLang for DeepSeek-V4's mHC kernels,
    CUTLASS's Python DSL and cuda-python for V4.1's."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in KERNEL_PACKAGES:
            return platform_cuda.importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None


class OpNamespace:
    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, op):
        if op.startswith("__"):
            raise AttributeError(op)
        return mock.MagicMock(name=f"torch.ops.{self.name}.{op}")


def on_gpu(device) -> bool:
    if device is None or isinstance(device, bool):
        return False
    return isinstance(device, int) or str(device).startswith("cuda")


def meta_mode():
    """Tensors the model code puts on the GPU (device="cuda", .cuda(), .to("cuda")) go to the meta device."""
    import torch
    from torch.overrides import TorchFunctionMode

    class OnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if on_gpu(kwargs.get("device")):
                kwargs["device"] = "meta"
            if func is torch.Tensor.cuda:
                return args[0].to("meta")
            if func is torch.Tensor.pin_memory:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple("meta" if not isinstance(a, (torch.Tensor, torch.dtype)) and on_gpu(a) else a
                             for a in args)
            return func(*args, **kwargs)

    return OnMeta()


def group(size: int, name: str):
    """A parallel group of this size seen from its rank 0 (GroupCoordinator's fields the model code reads)."""
    process_group = types.SimpleNamespace(size=lambda: size, rank=lambda: 0)
    return types.SimpleNamespace(world_size=size, rank_in_group=0, rank=0, ranks=list(range(size)), local_rank=0,
                                 is_first_rank=True, is_last_rank=size == 1, unique_name=name,
                                 device_group=process_group, cpu_group=process_group, use_custom_op_call=False,
                                 device_communicator=None)


def set_groups(serving: dict) -> None:
    """vLLM's groups for rank 0: EP spans TP x DP with expert parallelism, else 1 (vllm/distributed/parallel_state.py
    initialize_model_parallel)."""
    import vllm.distributed.parallel_state as ps

    tp, dp, pp = serving["tensor_parallel_size"], serving["data_parallel_size"], serving["pipeline_parallel_size"]
    ep = tp * dp if serving["enable_expert_parallel"] else 1
    for name, size in (("_TP", tp), ("_PP", pp), ("_DP", dp), ("_EP", ep), ("_DCP", 1), ("_PCP", 1)):
        setattr(ps, name, group(size, name[1:].lower()))


def engine_config(case: dict):
    """The release's VllmConfig for the case, as `vllm serve` builds it from the arguments (on the CPU platform: what
    it changes there, the cache dtype and the batch limits, is set back to the arguments)."""
    from vllm.engine.arg_utils import EngineArgs

    serving = case["serving"]
    folder = Path(tempfile.mkdtemp(prefix="weights-"))  # the release reads a model folder's config.json
    (folder / "config.json").write_text(json.dumps(case["config"]))
    # DSpark runs on Model Runner V2 only (VllmConfig refuses V1, which a CPU without Triton would pick)
    dspark = serving["speculative"] and serving["speculative"]["method"] == "dspark"
    if dspark:
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    else:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    kwargs = dict(model=str(folder), skip_tokenizer_init=True, load_format="dummy",
                  tensor_parallel_size=serving["tensor_parallel_size"],
                  data_parallel_size=serving["data_parallel_size"],
                  pipeline_parallel_size=serving["pipeline_parallel_size"],
                  enable_expert_parallel=serving["enable_expert_parallel"], max_model_len=serving["max_model_len"],
                  max_num_batched_tokens=serving["max_num_batched_tokens"], max_num_seqs=serving["max_num_seqs"])
    if serving["speculative"]:
        kwargs["speculative_config"] = dict(serving["speculative"])
    with stub_harness.quiet():
        config = EngineArgs(**kwargs).create_engine_config()
    config.cache_config.cache_dtype = serving["kv_cache_dtype"]
    config.scheduler_config.max_num_batched_tokens = serving["max_num_batched_tokens"]
    config.scheduler_config.max_num_seqs = serving["max_num_seqs"]
    config.kernel_config.enable_jit_warmup = False  # registers kernels to compile at start-up; allocates nothing
    return config


@contextlib.contextmanager
def as_gpu(arch: str, total_memory_bytes: int):
    """current_platform becomes the release's CUDA platform answering as this GPU; compiled ops and CUDA calls get
    stand-ins; kernel packages answer as installed."""
    import torch
    from vllm.platforms import current_platform

    platform_cuda.install_stand_ins()
    if not any(isinstance(finder, KernelPackages) for finder in sys.meta_path):
        sys.meta_path.insert(0, KernelPackages())
    cuda = platform_cuda.cuda_platform(arch)
    cuda.get_device_total_memory = classmethod(lambda cls, device_id=0: total_memory_bytes)
    cuda.is_pin_memory_available = classmethod(lambda cls: False)
    capability = platform_cuda.capability(arch)
    saved_class = current_platform.__class__
    properties = types.SimpleNamespace(multi_processor_count=SM_COUNTS[arch], total_memory=total_memory_bytes,
                                       major=capability.major, minor=capability.minor, name=f"emulated {arch}")
    patches = [mock.patch.object(torch.cuda, "current_device", lambda: 0),
               mock.patch.object(torch.cuda, "get_device_properties", lambda *a, **k: properties),
               mock.patch.object(torch.cuda, "Event", mock.MagicMock),
               mock.patch.object(torch.cuda, "Stream", mock.MagicMock),
               mock.patch.object(torch.cuda, "empty_cache", lambda: None),
               mock.patch.object(torch.accelerator, "empty_cache", lambda: None),
               mock.patch.object(torch.accelerator, "current_device_index", lambda: 0),
               mock.patch.object(torch.cuda, "get_device_capability",
                                 lambda *a, **k: (capability.major, capability.minor))]
    saved_ops = {name: torch.ops.__dict__.get(name) for name in COMPILED_OP_NAMESPACES}
    for name in COMPILED_OP_NAMESPACES:
        torch.ops.__dict__[name] = OpNamespace(name)
    probes = dict(platform_cuda.KERNEL_PROBES, **{name: (lambda *a, **k: True) for name in INSTALLED})
    current_platform.__class__ = cuda
    for name in [name for name in sys.modules if re.fullmatch(r"vllm\.models\.\w+", name)]:
        del sys.modules[name]  # a model package picks its platform's code when imported (vllm/models/deepseek_v4)
    try:
        with contextlib.ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patch)
            stack.enter_context(mock.patch.dict(platform_cuda.KERNEL_PROBES, probes))
            stack.enter_context(meta_mode())
            # the attention backends, imported as vLLM imports them to pick one, before their kernel probes answer
            platform_cuda.import_backends()
            stack.enter_context(platform_cuda.kernels_built())
            yield
    finally:
        current_platform.__class__ = saved_class
        for name, ns in saved_ops.items():
            if ns is None:
                torch.ops.__dict__.pop(name, None)
            else:
                torch.ops.__dict__[name] = ns


def resolve_quantization(config) -> None:
    """The checkpoint's quantization as the CUDA platform resolves it (ModelConfig._verify_quantization picks among
    platform-specific classes: DeepSeek-V4.1's FP8 config on CUDA, vllm==0.33.0
    vllm/model_executor/layers/quantization/__init__.py:120-132), and the VllmConfig's quant_config from it."""
    from vllm.config import VllmConfig

    model_config = config.model_config
    model_config.quantization = None  # no --quantization given: the checkpoint's config decides
    model_config._verify_quantization()
    config.quant_config = VllmConfig._get_quantization_config(model_config, config.load_config)


def build(config):
    """The target model and the drafter's model with what the proposer shares (or None), on the meta device."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.worker.workspace import init_workspace_manager

    spec = config.speculative_config
    dspark = spec is not None and spec.method == "dspark"
    lanes = 2 if getattr(config, "use_v2_model_runner", False) and dspark else 1
    # vllm==0.33.0 vllm/v1/worker/gpu_worker.py:122-128, 556-563 (lanes from 0.31.0)
    stub_harness.call_with(init_workspace_manager, device=torch.device("meta"), num_ubatches=1, num_lanes=lanes)
    with set_current_vllm_config(config), torch.device("meta"), set_default_torch_dtype(config.model_config.dtype), \
            engram_tokenizer(config.model_config.hf_config):
        target = initialize_model(vllm_config=config)
    if spec is None or spec.draft_model_config is None:
        return target, None
    draft_config = dataclasses.replace(config, attention_config=dataclasses.replace(
        config.attention_config, backend=spec.attention_backend))
    with set_current_vllm_config(draft_config), torch.device("meta"), \
            set_default_torch_dtype(spec.draft_model_config.dtype):
        draft = initialize_model(vllm_config=draft_config, model_config=spec.draft_model_config)
    proposer = types.SimpleNamespace(model=draft, vllm_config=config, speculative_config=spec,
                                     use_local_argmax_reduction=False)
    # the proposer shares with the target's language model (llm_base_proposer.py:1343-1400 load_model)
    language_model = target.get_language_model() if getattr(target, "supports_multimodal", False) else target
    for method in sharing_methods():
        method(proposer, language_model)
    return target, proposer.model


@contextlib.contextmanager
def engram_tokenizer(hf_config):
    """DeepSeek-V4.1's n-gram hashing maps the tokenizer's vocabulary to compressed ids when built
    (vllm/models/deepseek_v41/common/engram.py NgramHashState): no tokenizer here, so the map is vocab_size ids onto
    the config's engram_compressed_vocab_size, the sizes the real map has (an int32 buffer of 0.5 MiB)."""
    if not hasattr(hf_config, "engram_compressed_vocab_size"):
        yield
        return
    import vllm.models.deepseek_v41.common.engram as engram

    token_map = ([0] * hf_config.vocab_size, hf_config.engram_compressed_vocab_size)
    with mock.patch("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: None), \
            mock.patch.object(engram, "build_compressed_token_map", lambda tokenizer: token_map):
        yield


SHARING = ("_maybe_share_embeddings", "_maybe_share_lm_head")


def sharing_methods() -> list:
    """The proposer's own _maybe_share_embeddings and _maybe_share_lm_head, compiled from the release's source
    (vllm/v1/spec_decode/llm_base_proposer.py; importing that module pulls in Triton kernels a CPU cannot build).
    Releases before the proposer base class keep them on EagleProposer (vllm/v1/spec_decode/eagle.py)."""
    import ast

    import torch
    import vllm
    from vllm.distributed.parallel_state import get_pp_group

    root = Path(vllm.__file__).parent / "v1" / "spec_decode"
    for path in (root / "llm_base_proposer.py", root / "eagle.py"):
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        functions = [node for cls in tree.body if isinstance(cls, ast.ClassDef) for node in cls.body
                     if isinstance(node, ast.FunctionDef) and node.name in SHARING]
        if len(functions) == len(SHARING):
            module = ast.Module(body=functions, type_ignores=[])
            namespace = {"torch": torch, "nn": torch.nn, "get_pp_group": get_pp_group,
                         "logger": logging.getLogger("vllm.weights")}
            exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the release's own source
            return [namespace[name] for name in SHARING]
    raise RuntimeError("no proposer with _maybe_share_embeddings and _maybe_share_lm_head in this release")


LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def kind_of(name: str, module, experts_class) -> str:
    if isinstance(module, experts_class):
        return "experts"
    if "engram" in name.lower():
        return "engram"  # DeepSeek-V4.1's Engram tables: in host memory when offloaded (vllm/config/engram.py)
    return "dense"


def place_of(name: str) -> str:
    """A decoder layer's index, or the embedding (the first pipeline stage's) or the final norm and LM head (the
    last stage's)."""
    if found := LAYER.search(name):
        return found.group(1)
    return "embedding" if "embed" in name else "head"


def meta_storages() -> set[int]:
    import torch

    gc.collect()
    return {obj.untyped_storage()._cdata for obj in gc.get_objects()
            if isinstance(obj, torch.Tensor) and obj.device.type == "meta"}


def count(target, draft, before: set[int]) -> dict:
    """Bytes alive on the meta device that were not before the build, each storage once: the target's parameters and
    buffers by place (decoder layer, embedding, head) and kind (routed experts, Engram tables, the rest), the
    drafter's by kind (what it shares with the target is the target's), and the tensors no module holds."""
    import torch
    import vllm.model_executor.layers.fused_moe as fused_moe

    experts_class = getattr(fused_moe, "RoutedExperts", None) or fused_moe.FusedMoE  # RoutedExperts from 0.33.0
    target_bytes: dict[str, dict[str, int]] = {}
    draft_bytes: dict[str, int] = {}
    filed: set[int] = set(before)
    for model, is_draft in ((target, False), (draft, True)):
        for module_name, module in model.named_modules() if model is not None else ():
            for tensor_name, tensor in list(module.named_parameters(recurse=False)) + list(
                    module.named_buffers(recurse=False)):
                storage = tensor.untyped_storage() if tensor is not None and tensor.device.type == "meta" else None
                if storage is None or storage._cdata in filed:
                    continue
                filed.add(storage._cdata)
                name = f"{module_name}.{tensor_name}"
                kind = kind_of(name, module, experts_class)
                bytes_by_kind = draft_bytes if is_draft else target_bytes.setdefault(place_of(name), {})
                bytes_by_kind[kind] = bytes_by_kind.get(kind, 0) + storage.nbytes()
    gc.collect()
    unowned = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type == "meta":
            storage = obj.untyped_storage()
            if storage._cdata not in filed:
                unowned[storage._cdata] = (storage.nbytes(), list(obj.shape), str(obj.dtype))
    owned = sum(sum(kinds.values()) for kinds in target_bytes.values()) + sum(draft_bytes.values())
    unowned_bytes = sum(o[0] for o in unowned.values())
    return {"target": target_bytes, "draft": draft_bytes, "unowned_bytes": unowned_bytes,
            "unowned_largest": sorted(unowned.values(), key=lambda o: -o[0])[:8], "total_bytes": owned + unowned_bytes}


PARALLEL = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "enable_expert_parallel")


def config_key(case: dict) -> str:
    """Cases that differ only in their parallel sizes share one VllmConfig (creating it takes most of a case's time)."""
    return json.dumps([case["config"], {k: v for k, v in case["serving"].items() if k not in PARALLEL}],
                      sort_keys=True)


def run(case: dict, config) -> dict:
    """The case's build on a VllmConfig of the same model and serving shape: its parallel sizes set as EngineArgs sets
    them (ParallelConfig), its groups as rank 0 sees them."""
    started = time.perf_counter()
    try:
        for name in PARALLEL:
            setattr(config.parallel_config, name, case["serving"][name])
        set_groups(case["serving"])
        with as_gpu(case["serving"]["arch"], case["serving"]["gpu_memory_bytes"]), stub_harness.quiet():
            resolve_quantization(config)
            before = meta_storages()
            target, draft = build(config)
            result = count(target, draft, before)
        result["cache_dtype"] = config.cache_config.cache_dtype
    except Exception as error:  # noqa: BLE001 - a case that fails is reported, the others still run
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-4000:]}
    result["name"] = case["name"]
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def run_apart(case: dict, config) -> dict:
    """run() in a forked child: a build leaves module state behind (the workspace manager, backend caches, the
    platform), so each case starts from the imported release and its VllmConfig alone."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        with os.fdopen(write_end, "w") as out:
            json.dump(run(case, config), out)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        text = answer.read()
    os.waitpid(child, 0)
    return json.loads(text) if text else {"name": case["name"], "error": "the build's process died"}


def main() -> int:
    release_dir = Path(sys.argv[1])
    os.environ["PYTHONPATH"] = str(release_dir)  # the release inspects model classes in a subprocess
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    release = stub_harness.activate(release_dir)
    results, configs = [], {}
    for case in json.load(sys.stdin):
        key = config_key(case)
        if key not in configs:
            configs = {key: None}
            try:
                configs[key] = engine_config(case)
            except Exception as error:  # noqa: BLE001 - the release refuses the arguments: every such case says so
                configs[key] = f"{type(error).__name__}: {error}"
        config = configs[key]
        results.append({"name": case["name"], "error": config} if isinstance(config, str) else run_apart(case, config))
    json.dump({"release": release, "results": results}, real_stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
