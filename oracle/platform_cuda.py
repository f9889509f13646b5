"""The CUDA platform as a release sees it, on a CPU: its device capability, its attention-backend priorities and its
block-size choice.

vllm.platforms.current_platform stays the CPU platform (modules hold references to it); while specs are built its
capability questions answer as the GPU's (emulate), and the backend and block size are chosen by the release's own
CUDA platform code (vllm/platforms/cuda.py, interface.py), imported with stand-ins for the compiled extensions it
imports at the top and for packages that only exist on a GPU machine (flashinfer), so that every backend class can
be imported and asked what it supports.
"""

import contextlib
import importlib.abc
import importlib.machinery
import inspect
import sys
import types
from unittest import mock

GPU_ONLY_PACKAGES = ("flashinfer", "torchvision")


class Unsupported(Exception):
    """The release has no backend for this GPU and configuration: vLLM would not start."""
COMPILED_EXTENSIONS = ("vllm._C", "vllm._C_stable_libtorch")


class GpuOnlyPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for packages a GPU install has: any attribute is a mock, so that `from flashinfer... import x` in a
    backend's module works; nothing of them is called while specs are built."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in GPU_ONLY_PACKAGES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        module.__getattr__ = lambda attr: mock.MagicMock(name=f"{spec.name}.{attr}")
        return module

    def exec_module(self, module):
        pass


def install_stand_ins() -> None:
    if not any(isinstance(f, GpuOnlyPackages) for f in sys.meta_path):
        sys.meta_path.insert(0, GpuOnlyPackages())
    for name in COMPILED_EXTENSIONS:
        sys.modules.setdefault(name, types.ModuleType(name))


def capability(arch: str):
    from vllm.platforms.interface import DeviceCapability

    number = int(arch[2:])
    return DeviceCapability(number // 10, number % 10)


def cuda_platform(arch: str):
    """The release's CUDA platform class, answering as a GPU of this arch."""
    install_stand_ins()
    import vllm.platforms.cuda as cuda

    cap = capability(arch)
    return type("EmulatedCuda", (cuda.CudaPlatformBase,), {
        "get_device_capability": classmethod(lambda cls, device_id=0: cap),
        "get_device_name": classmethod(lambda cls, device_id=0: f"emulated {arch}"),
    })


@contextlib.contextmanager
def emulate(arch: str):
    """current_platform answers capability questions as this GPU while the block runs."""
    from vllm.platforms import current_platform as cpu

    cap = capability(arch)
    value = cap.major * 10 + cap.minor

    def as_int(c):
        return c if isinstance(c, int) else c[0] * 10 + c[1] if isinstance(c, tuple) else c.to_int()

    platform = cuda_platform(arch)
    answers = {
        "is_cuda": lambda *a, **k: True, "is_cuda_alike": lambda *a, **k: True, "is_rocm": lambda *a, **k: False,
        "is_cpu": lambda *a, **k: False, "is_xpu": lambda *a, **k: False, "is_tpu": lambda *a, **k: False,
        "get_device_capability": lambda *a, **k: cap,
        "has_device_capability": lambda c, *a, **k: value >= as_int(c),
        "is_device_capability": lambda c, *a, **k: value == as_int(c),
        "is_device_capability_family": lambda c, *a, **k: value // 10 == as_int(c) // 10,
        "get_attn_backend_cls": platform.get_attn_backend_cls,
        "device_name": "cuda", "device_type": "cuda",
    }
    saved = {k: vars(cpu)[k] for k in answers if k in vars(cpu)}
    for name, answer in answers.items():
        object.__setattr__(cpu, name, answer)
    try:
        yield platform
    finally:
        for name in answers:
            if name in saved:
                object.__setattr__(cpu, name, saved[name])
            else:
                with contextlib.suppress(AttributeError):
                    object.__delattr__(cpu, name)


# What a backend asks of the kernels its release ships (FlashAttention's MLA, FlashInfer and its SM90 / SM120 sparse
# MLA, FA4's CuTe MLA): a GPU install of the release has them all, so they answer yes while a backend is picked.
KERNEL_PROBES = {"flash_attn_supports_mla": lambda *a, **k: True, "has_flashinfer": lambda *a, **k: True,
                 "has_flashinfer_sm90_nope_mla": lambda *a, **k: True,
                 "has_flashinfer_sparse_mla_sm120": lambda *a, **k: True,
                 "_fa4_cute_mla_available": lambda *a, **k: None}


@contextlib.contextmanager
def kernels_built():
    """The kernel probes answer as on a GPU install, in every vLLM module that holds one."""
    saved = []
    for module in [m for name, m in sys.modules.items() if name.startswith("vllm") and m is not None]:
        for probe, answer in KERNEL_PROBES.items():
            if probe in vars(module):
                saved.append((module, probe, vars(module)[probe]))
                setattr(module, probe, answer)
    try:
        yield
    finally:
        for module, probe, original in saved:
            setattr(module, probe, original)


def import_backends() -> dict:
    """Every attention backend class the release registers that imports on this machine (before emulation: some
    modules take CUDA-only paths on import when the platform says CUDA)."""
    install_stand_ins()
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    classes = {}
    for member in AttentionBackendEnum:
        with contextlib.suppress(Exception):
            classes[member.name] = member.get_class()
    return classes


def priorities(arch: str, num_heads: int, cache_dtype: str, head_size: int) -> list[str]:
    """The release's own order of MLA backends for this GPU (vllm/platforms/cuda.py _get_backend_priorities)."""
    install_stand_ins()
    import vllm.platforms.cuda as cuda

    order = cuda._get_backend_priorities
    order = getattr(order, "__wrapped__", order)
    return [b.name for b in call_with(order, use_mla=True, device_capability=capability(arch), num_heads=num_heads,
                                      kv_cache_dtype=cache_dtype, head_size=head_size)]


def call_with(fn, **available):
    params = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in available.items() if k in params})


def select_sparse_mla(arch: str, num_heads: int, cache_dtype: str, head_size: int, block_size: int, named: str | None,
                      classes: dict) -> tuple[str, list]:
    """The sparse-MLA backend the release picks: the recipe's, else the first in its priority order whose class
    accepts this configuration (AttentionBackend.validate_configuration). A class that does not import here, ahead of
    the one picked, is an error: the pick would then be the CPU's, not the GPU's."""
    order = [named] if named else [n for n in priorities(arch, num_heads, cache_dtype, head_size) if "SPARSE" in n]
    reasons = []
    for name in order:
        cls = classes.get(name)
        if cls is None:
            reasons.append((name, "does not import on this machine"))
            continue
        with emulate(arch), kernels_built():
            invalid = call_with(cls.validate_configuration, head_size=head_size, dtype=bf16(),
                                kv_cache_dtype=cache_dtype, block_size=None, use_mla=True, has_sink=False,
                                use_sparse=True, use_mm_prefix=False, use_per_head_quant_scales=False,
                                device_capability=capability(arch), attn_type=decoder())
        if not invalid:
            if any(r[1] == "does not import on this machine" for r in reasons):
                raise RuntimeError(f"{name} picked, but a sparse backend ahead of it did not import: {reasons}")
            return name, reasons
        reasons.append((name, invalid))
    raise Unsupported(f"no sparse-MLA backend takes this configuration on {arch}: {reasons}")


def bf16():
    import torch

    return torch.bfloat16


def decoder():
    from vllm.v1.attention.backend import AttentionType

    return AttentionType.DECODER
