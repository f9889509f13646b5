"""A GPU machine as a vLLM release sees it, on this CPU: what a CUDA install of the release has (its compiled
extensions and the kernel packages it ships), and, while `emulate(gpu)` runs, the platform, torch.cuda and the
parallel groups of one worker on a node of such GPUs. Tensors the release makes for the GPU are made on torch's meta
device: shapes and dtypes, no memory.

Everything here is the machine, none of it vLLM's decisions: those run as the release wrote them. The rules:
- vllm.platforms.current_platform keeps its identity (modules hold it) but takes the class of the release's own
  CudaPlatformBase while a case runs, answering capability, name, memory and device count as the GPU (gpus.json);
- a kernel that a CUDA install of the release compiles or ships (its _C extensions, FlashMLA, FlashAttention's
  extensions, FlashInfer, DeepGEMM, Triton, humming) is there; packages a CUDA install does not have by default
  (DeepEP, NIXL, AITER, ...) are not, as on a GPU machine without them;
- the node holds as many GPUs as the case asks for (world size): multi-node launches are not modelled;
- modules are imported before emulation starts (some take CUDA-only paths on import when the platform says CUDA);
  `preload` imports those a case needs.
"""

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import inspect
import math
import json
import pkgutil
import re
import sys
import types
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
GPUS = json.loads((HERE / "gpus.json").read_text())["gpus"]

# Packages a CUDA install of vLLM has and this CPU does not: importable stand-ins whose attributes are mocks
# (nothing of them is called while a model is built and its KV cache planned).
GPU_PACKAGES = ("flashinfer", "deep_gemm", "humming", "cutlass", "cuda", "quack", "tilelang", "torchvision",
                # a dependency of every vLLM install that the oracle's venv leaves out (it pins an older numpy):
                # vLLM's parsers import it, the Mistral ones use it
                "mistral_common")
# The release's own compiled extensions (vllm._C, vllm._moe_C, vllm._flashmla_C, vllm._flashkda_C, FlashAttention's
# vllm.vllm_flash_attn._vllm_fa2_C, ...)
COMPILED_EXTENSION = re.compile(r"vllm(\.\w+)*\._\w*C(_stable_libtorch)?")
# torch.ops namespaces those extensions register (_C, _C_cache_ops, _moe_C, _flashmla_C, _flashkda_C, ...): their
# ops exist on a GPU install
OP_NAMESPACE = re.compile(r"_\w*C(_\w+)?")
# Module-level flags the release sets on import from whether an extension loaded (False on this CPU)
BUILT_FLAGS = ("_flashmla_C_AVAILABLE", "_flashmla_extension_C_AVAILABLE", "FA2_AVAILABLE", "FA3_AVAILABLE",
               "FA4_AVAILABLE", "HAS_TRITON")
# Probe functions that ask whether a shipped kernel package is there (vllm/utils/flashinfer.py, import_utils.py,
# deep_gemm.py; FA4's CuTe MLA), and whether host memory can be pinned for the GPU (UVA): yes on a CUDA machine
PROBE_PREFIXES = ("has_flashinfer", "has_deep_gemm")
PROBES = {"flash_attn_supports_mla": True, "_fa4_cute_mla_available": None, "is_pin_memory_available": True,
          "is_uva_available": True}
# Packages vLLM imports that inspect torch.cuda on import: imported as they are, before emulation
CPU_PACKAGES = ("transformers", "xgrammar", "llguidance")
# Modules imported under emulation, as on the GPU machine (a hardware-isolated model package, vllm/models/<name>,
# picks its NVIDIA implementation on import): the worker, the model runners, the planner, the quantization methods
# (the config picks one), the attention layers and backends
GPU_IMPORTS = ("vllm.engine.arg_utils", "vllm.v1.engine.core", "vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner",
               "vllm.v1.worker.gpu.attn_utils", "vllm.v1.worker.workspace", "vllm.model_executor.model_loader",
               "vllm.model_executor.layers.attention", "vllm.model_executor.layers.fused_moe")
GPU_IMPORT_PACKAGES = ("vllm.model_executor.layers.quantization",)


def one(self, *args):
    return 1


# What a stand-in gives as a number (the constants a kernel's class body computes from its package's types)
NUMBER = {name: one for name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
                                 "__rfloordiv__", "__truediv__", "__rtruediv__", "__mod__", "__rmod__", "__pow__",
                                 "__rpow__", "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__and__",
                                 "__rand__", "__neg__", "__int__", "__index__")} | {"__float__": lambda self: 1.0}


class AnyType(type):
    """The type of a stand-in's names: any attribute is another stand-in class; a class called with one function
    (a decorator) gives it back, else an instance; as a number, 1."""

    locals().update(NUMBER)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], type):
            return args[0]
        return super().__call__(*args, **kwargs)

    def __getitem__(cls, item):
        return cls

    def __iter__(cls):
        return iter(())

    def __or__(cls, other):
        return cls

    __ror__ = __or__


class Anything(metaclass=AnyType):
    """A name of a package this CPU lacks: usable as a base class, a decorator, a type hint, a value or a number."""

    locals().update(NUMBER)

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"{type(self).__qualname__}.{name}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return Anything()

    def __getitem__(self, item):
        return Anything()

    def __iter__(self):
        return iter(())

    def __fspath__(self):
        return f"/nonexistent/{type(self).__qualname__}"


def stand_in(name: str) -> type:
    return AnyType(name, (Anything,), {})


def module_attribute(module: str, attr: str) -> type:
    if attr.startswith("__"):
        raise AttributeError(attr)
    return stand_in(f"{module}.{attr}")


class StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Importable stand-ins for the GPU packages and compiled extensions; any attribute is a stand-in."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in GPU_PACKAGES or COMPILED_EXTENSION.fullmatch(name):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        module.__getattr__ = lambda attr: module_attribute(spec.name, attr)
        return module

    def exec_module(self, module):
        pass


class Ops:
    """torch.ops with the release's compiled namespaces present; every other namespace is torch's own."""

    def __init__(self, ops):
        self.ops = ops

    def __getattr__(self, name):
        if OP_NAMESPACE.fullmatch(name):
            return CompiledOps(name)
        return getattr(self.ops, name)


class CompiledOps:
    """A torch.ops namespace of the release's extensions: any op is a mock."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return mock.MagicMock(name=f"torch.ops.{self.name}.{attr}")


def install_stand_ins() -> None:
    if not any(isinstance(finder, StandIns) for finder in sys.meta_path):
        sys.meta_path.insert(0, StandIns())


def install_triton() -> None:
    """A CUDA install runs Triton. On this CPU, Triton (installed, without a CPU backend) is disabled by vLLM
    (vllm/triton_utils/importing.py), which hands its modules placeholders; they get the real package instead, before
    any imports it: its decorators wrap the kernels, none of which is compiled or launched here."""
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice
    import vllm.triton_utils as triton_utils
    import vllm.triton_utils.importing as importing

    real = {"triton": triton, "tl": tl, "tldevice": tldevice}
    with contextlib.suppress(ImportError):
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.language.core import _aggregate as aggregate

        real |= {"gluon": gluon, "gl": gl, "aggregate": aggregate}
    for name, value in real.items():
        if hasattr(triton_utils, name):
            setattr(triton_utils, name, value)
    triton_utils.HAS_TRITON = importing.HAS_TRITON = True


def preload(architectures: set[str], gpu: dict) -> None:
    """The modules the cases need, imported under emulation of a GPU: the models' own (by the release's registry), the
    worker and planner, every quantization method and every attention backend the release registers."""
    for name in CPU_PACKAGES:  # before the stand-ins: they probe for the packages stood in for
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    install_stand_ins()
    install_triton()
    import vllm.model_executor.models.registry as registry

    registry._run_in_subprocess = lambda fn: fn()  # vLLM inspects the model class in a child to keep CUDA unused
    with emulate(gpu):
        for architecture in architectures:
            importlib.import_module(registry.ModelRegistry.models[architecture].module_name)
        gpu_imports()


def gpu_imports() -> None:
    for name in GPU_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for package in GPU_IMPORT_PACKAGES:
        root = importlib.import_module(package)
        for found in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            with contextlib.suppress(ImportError):
                importlib.import_module(found.name)
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    for member in AttentionBackendEnum:
        with contextlib.suppress(Exception):
            member.get_class()


def capability(gpu: dict):
    from vllm.platforms.interface import DeviceCapability

    major, minor = (int(part) for part in gpu["capability"].split("."))
    return DeviceCapability(major, minor)


def capability_int(value) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, tuple):
        return value[0] * 10 + value[1]
    return value.to_int()


def cuda_platform(gpu: dict, devices: int):
    """The release's CUDA platform class, answering as a node of `devices` of this GPU."""
    import vllm.platforms.cuda as cuda

    cap = capability(gpu)
    return type("EmulatedCuda", (cuda.CudaPlatformBase,), {
        "get_device_capability": classmethod(lambda cls, device_id=0: cap),
        "has_device_capability": classmethod(lambda cls, c, device_id=0: cap.to_int() >= capability_int(c)),
        "is_device_capability": classmethod(lambda cls, c, device_id=0: cap.to_int() == capability_int(c)),
        "is_device_capability_family": classmethod(
            lambda cls, c, device_id=0: cap.to_int() // 10 == capability_int(c) // 10),
        "get_device_name": classmethod(lambda cls, device_id=0: gpu["name"]),
        "get_device_total_memory": classmethod(lambda cls, device_id=0: gpu["total_memory_bytes"]),
        "device_count": classmethod(lambda cls: devices),
        "is_fully_connected": classmethod(lambda cls, ids: True),
        "get_current_memory_usage": classmethod(lambda cls, device=None: 0),
        "is_pin_memory_available": classmethod(lambda cls: True),
    })


def torch_cuda(gpu: dict, devices: int) -> dict:
    """torch.cuda as on the GPU machine: what the release asks of the device, and streams and events that do
    nothing."""
    cap = capability(gpu)
    properties = types.SimpleNamespace(name=gpu["name"], major=cap.major, minor=cap.minor,
                                       total_memory=gpu["total_memory_bytes"],
                                       multi_processor_count=gpu["multi_processor_count"], uuid="emulated")
    return {"is_available": lambda: True, "device_count": lambda: devices, "current_device": lambda: 0,
            "set_device": lambda *a: None, "synchronize": lambda *a: None,
            "get_device_properties": lambda *a, **k: properties, "get_device_name": lambda *a, **k: gpu["name"],
            "get_device_capability": lambda *a, **k: (cap.major, cap.minor),
            "mem_get_info": lambda *a, **k: (gpu["total_memory_bytes"], gpu["total_memory_bytes"]),
            "Stream": mock.MagicMock(name="torch.cuda.Stream"), "Event": mock.MagicMock(name="torch.cuda.Event"),
            "current_stream": mock.MagicMock(name="torch.cuda.current_stream"),
            "stream": mock.MagicMock(name="torch.cuda.stream")}


def torch_accelerator(gpu: dict, devices: int) -> dict:
    """torch.accelerator (torch 2.6+) as on the GPU machine: one CUDA device current, no memory in use."""
    import torch

    nothing = lambda *a, **k: None  # noqa: E731
    zero = lambda *a, **k: 0  # noqa: E731
    return {"current_accelerator": lambda *a, **k: torch.device("cuda"), "is_available": lambda: True,
            "device_count": lambda: devices, "current_device_index": zero, "synchronize": nothing,
            "empty_cache": nothing, "empty_host_cache": nothing, "set_device_index": nothing,
            "device_index": lambda *a, **k: contextlib.nullcontext(),
            "current_stream": mock.MagicMock(name="torch.accelerator.current_stream"), "set_stream": nothing,
            "get_memory_info": lambda *a, **k: (gpu["total_memory_bytes"], gpu["total_memory_bytes"]),
            "memory_reserved": zero, "memory_allocated": zero, "max_memory_allocated": zero,
            "reset_peak_memory_stats": nothing, "memory_stats": lambda *a, **k: {}}


class TritonDriver:
    """Triton's active driver as on the GPU: its target is the GPU's arch; nothing is launched here."""

    def __init__(self, gpu: dict):
        self.capability = capability(gpu).to_int()

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.capability, 32)

    def get_current_device(self):
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cuda", 0)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return mock.MagicMock(name=f"triton driver.{attr}")


def module_answers(devices: int) -> list[tuple[str, object]]:
    """(name, what a GPU machine answers) for the probes the release binds in its modules: the node's GPUs, and every
    rank of a group on one node (parallel_state.in_the_same_node_as probes shared memory)."""
    return [("cuda_device_count_stateless", lambda *a, **k: devices),
            ("in_the_same_node_as", lambda group, *a, **k: [True] * group.world_size)]


@contextlib.contextmanager
def replaced(replacements: list[tuple[object, str, object]]):
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in replacements]
    for owner, name, value in replacements:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def vllm_modules() -> list:
    return [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and isinstance(m, types.ModuleType)]


def gpu_install(devices: int) -> list[tuple[object, str, object]]:
    """The replacements that make the loaded vLLM modules see a CUDA install: built flags, kernel probes, the
    node's device count."""
    replacements = []
    named = dict(module_answers(devices))
    for module in vllm_modules():
        for name, value in list(vars(module).items()):
            if name in BUILT_FLAGS and value is False:
                replacements.append((module, name, True))
            elif name in PROBES and callable(value):
                replacements.append((module, name, lambda *a, answer=PROBES[name], **k: answer))
            elif name.startswith(PROBE_PREFIXES) and callable(value):
                replacements.append((module, name, lambda *a, **k: True))
            elif name in named and callable(value):
                replacements.append((module, name, named[name]))
    return replacements


def clear_caches() -> None:
    """Empty the caches the release keeps on functions (functools.cache, lru_cache), at module and class level: on a
    GPU machine one process sees one GPU, here each case its own (the attention backend the selector cached for an
    SM90 case is not an SM100 case's)."""
    import functools

    for module in vllm_modules():
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if isinstance(value, type) else []
            for member in [value] + members:
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if isinstance(member, functools._lru_cache_wrapper):
                    member.cache_clear()


class SymmetricHandle:
    """A rendezvous handle of torch's symmetric memory (NVLink peers' buffers): meta buffers, no peers."""

    multicast_ptr = 1

    def __init__(self, tensor):
        self.tensor = tensor

    def barrier(self, *args, **kwargs):
        pass

    def get_buffer(self, peer, shape, dtype, offset=0):
        import torch

        return torch.empty(tuple(shape), dtype=dtype, device="meta")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"symmetric memory handle.{name}")()


def symmetric_memory() -> list[tuple[object, str, object]]:
    """torch's symmetric memory (the direct DCP exchange's buffers) on the meta device."""
    import torch
    import torch.distributed._symmetric_memory as symm

    def empty(*size, dtype=None, device=None, **kwargs):
        shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return torch.empty(tuple(shape), dtype=dtype, device="meta")

    return [(symm, "empty", empty), (symm, "rendezvous", lambda tensor, *a, **k: SymmetricHandle(tensor))]


@contextlib.contextmanager
def emulate(gpu: dict, devices: int = 1):
    """While the block runs, vLLM's platform, torch.cuda, the compiled ops and the kernel probes are those of a node
    of `devices` of this GPU."""
    import torch
    from vllm.platforms import current_platform

    install_stand_ins()
    clear_caches()
    platform = cuda_platform(gpu, devices)
    cpu_class = current_platform.__class__
    replacements = [(torch.cuda, name, value) for name, value in torch_cuda(gpu, devices).items()]
    replacements += [(torch.accelerator, name, value) for name, value in torch_accelerator(gpu, devices).items()
                     if hasattr(torch.accelerator, name)]
    replacements.append((torch, "ops", Ops(torch.ops)))
    # fake (meta) kernels the release registers for its compiled ops, for torch.compile: those ops are stand-ins here
    replacements += [(torch.library, name, lambda *a, **k: (lambda fn: fn)) for name in ("register_fake", "impl_abstract")
                     if hasattr(torch.library, name)]
    replacements += gpu_install(devices) + symmetric_memory()
    from triton.runtime.driver import driver as triton_driver
    import torch.fx.experimental._config as fx_config

    # torch.nonzero on a meta tensor (the expert map a MoE layer logs): every element taken as non-zero
    replacements.append((fx_config, "meta_nonzero_assume_all_nonzero", True))

    replacements.append((triton_driver, "_active", TritonDriver(gpu)))
    current_platform.__class__ = platform
    try:
        with replaced(replacements):
            yield platform
    finally:
        current_platform.__class__ = cpu_class


def on_gpu(device) -> bool:
    if device is None or isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.startswith("cuda")
    return getattr(device, "type", None) == "cuda"


HOST_BYTES_MADE = 1 << 30  # host tensors larger than this are made on the meta device (this machine has no room)


def host_bytes(func, args, kwargs) -> int:
    """The bytes a factory call would take on the host (0 where its shape cannot be read)."""
    import torch

    shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    if not shape or not all(isinstance(n, int) for n in shape):
        shape = kwargs.get("size", ())
    if not shape or not all(isinstance(n, int) for n in shape):
        return 0
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    return math.prod(shape) * torch.empty((), dtype=dtype, device="meta").element_size()


def numpy_view(tensor):
    """A host array for a meta tensor, as the runner's staging buffers take one: every element is one element in
    memory (zero strides), so that no memory is taken."""
    import numpy as np

    dtype = np.dtype(str(tensor.dtype).removeprefix("torch."))
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=tuple(tensor.shape), strides=(0,) * tensor.dim())


class MetaDevice:
    """A torch function mode: tensors made for the GPU, or with no device, are made on the meta device, and so are
    host tensors of more than HOST_BYTES_MADE (pinned host tables such as V4.1's offloaded Engram embeddings). A meta
    tensor's values, where the release reads them back (an expert map it logs, a staging buffer's host view), are
    zeros."""

    def __new__(cls):
        from torch.overrides import TorchFunctionMode
        from torch.utils._device import _device_constructors

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types_, args=(), kwargs=None):
                import torch

                kwargs = dict(kwargs or {})
                if kwargs.get("pin_memory"):  # host memory the GPU maps: plain host memory here
                    kwargs["pin_memory"] = False
                if func is torch.Tensor.pin_memory:
                    return args[0]
                if func is torch.Tensor.numpy and args[0].is_meta:
                    return numpy_view(args[0])
                if func in (torch.Tensor.item, torch.Tensor.tolist) and args[0].is_meta:
                    return numpy_view(args[0]).tolist()
                if on_gpu(kwargs.get("device")):
                    kwargs["device"] = "meta"
                if func in _device_constructors() and (
                        kwargs.get("device") is None or host_bytes(func, args, kwargs) > HOST_BYTES_MADE):
                    kwargs["device"] = "meta"
                elif func is torch.Tensor.to:
                    args = tuple("meta" if on_gpu(a) else a for a in args)
                elif func is torch.Tensor.cuda:
                    return args[0].to("meta")
                return func(*args, **kwargs)

        return Mode()


# The checkpoint's other files -------------------------------------------------------------------------------------

class Vocabulary(dict):
    """A tokenizer's vocabulary that holds every token asked for (the special tokens a parser looks up)."""

    def __missing__(self, key):
        return 1

    def get(self, key, default=None):
        return 1

    def __contains__(self, key):
        return True


class Tokenizer:
    """The checkpoint's tokenizer, which is not here: every token a reasoning or tool parser asks for is in it, and
    every text encodes to one token. No KV-cache size reads it."""

    def __init__(self, *args, **kwargs):
        self.vocab = Vocabulary()

    def get_vocab(self):
        return self.vocab

    def encode(self, text, *args, **kwargs):
        return [1]

    def convert_tokens_to_ids(self, tokens):
        return [1] * len(tokens) if isinstance(tokens, list) else 1

    def __len__(self):
        return 1

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return stand_in(f"tokenizer.{name}")()


TOKENIZER_LOADERS = ("cached_tokenizer_from_config", "get_tokenizer", "cached_get_tokenizer",
                     "init_tokenizer_from_configs", "init_tokenizer_from_config")


def tokenizer_files() -> list[tuple[object, str, object]]:
    """The checkpoint's tokenizer, wherever the release loads it (its tokenizer loaders and transformers'
    AutoTokenizer): the stand-in Tokenizer."""
    import transformers

    loader = types.SimpleNamespace(from_pretrained=lambda *a, **k: Tokenizer())
    replacements = [(transformers, "AutoTokenizer", loader)]
    for module in vllm_modules():
        for name in TOKENIZER_LOADERS:
            if callable(vars(module).get(name)):
                replacements.append((module, name, lambda *a, **k: Tokenizer()))
        if vars(module).get("AutoTokenizer") is not None:
            replacements.append((module, "AutoTokenizer", loader))
    return replacements


def checkpoint_files(hf_text_config) -> list[tuple[object, str, object]]:
    """What the release reads of the checkpoint's files besides config.json and its tokenizer while it builds the
    model, answered as that checkpoint answers it; none of it sizes a cache. DeepSeek-V4.1's Engram hash state maps
    the tokenizer's ids into the compressed vocabulary its config names (build_compressed_token_map,
    vllm==0.33.0 vllm/models/deepseek_v41/common/engram.py:136, 450-461): the ids map to themselves, the compressed
    vocabulary is engram_compressed_vocab_size."""
    compressed = getattr(hf_text_config, "engram_compressed_vocab_size", None)
    if compressed is None:
        return []
    token_map = list(range(hf_text_config.vocab_size))
    answer = lambda tokenizer: (token_map, compressed)  # noqa: E731
    return [(module, "build_compressed_token_map", answer) for module in vllm_modules()
            if callable(vars(module).get("build_compressed_token_map"))]


# Parallel groups -------------------------------------------------------------------------------------------------

def group(size: int, rank: int, name: str):
    """A GroupCoordinator of `size` ranks as seen from `rank`, without processes: the model code reads its sizes and
    ranks while it builds its layers."""
    import vllm.distributed.parallel_state as ps

    handle = types.SimpleNamespace(size=lambda: size, rank=lambda: rank, world_size=size, group_name=name)
    communicator = types.SimpleNamespace(all2all_manager=mock.MagicMock(name=f"{name} all2all manager"),
                                         world_size=size, rank=rank, rank_in_group=rank)
    emulated = type("EmulatedGroup", (ps.GroupCoordinator,), {"make_sibling_device_group": lambda self, *a, **k: handle})
    coordinator = emulated.__new__(emulated)
    for attribute, value in dict(world_size=size, rank_in_group=rank, ranks=list(range(size)), rank=rank,
                                 group_ranks=[list(range(size))],
                                 local_rank=rank, unique_name=name, device_group=handle, cpu_group=handle,
                                 device_communicator=communicator, mq_broadcaster=None,
                                 use_device_communicator=False,
                                 use_custom_op_call=False).items():
        setattr(coordinator, attribute, value)
    return coordinator


@contextlib.contextmanager
def worker_groups(parallel_config, stage: int):
    """The parallel groups of the worker of TP rank 0 and DP rank 0 on pipeline stage `stage`: each group the
    release declares (parallel_state's module-level _TP, _PP, ...) holds its size, from the release's own
    ParallelConfig."""
    import vllm.distributed.parallel_state as ps

    tp = parallel_config.tensor_parallel_size
    pp = parallel_config.pipeline_parallel_size
    dp = parallel_config.data_parallel_size
    sizes = {"_WORLD": tp * pp, "_TP": tp, "_PP": pp, "_DP": dp, "_EP": tp * dp, "_EPLB": tp * dp,
             "_DCP": getattr(parallel_config, "decode_context_parallel_size", 1),
             "_PCP": getattr(parallel_config, "prefill_context_parallel_size", 1), "_ETP": tp}
    ranks = {"_PP": stage, "_WORLD": stage * tp}
    declared = [name for name in sizes if name in vars(ps)]
    with replaced([(ps, name, group(sizes[name], ranks.get(name, 0), name.strip("_").lower()))
                   for name in declared]):
        yield


def call_with(fn, **available):
    """fn with the arguments its signature names (they differ between releases)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn(**available)
    return fn(**{k: v for k, v in available.items() if k in params})
