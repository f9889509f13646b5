"""vLLM's own KV-init buffers, built on a CPU: the GPU tensors a release's model runner allocates in
initialize_kv_cache besides the KV cache itself, one release per process, inside the oracle's venv (oracle/setup.sh).

    VENV/bin/python oracle/kv_init_buffers.py RELEASE_DIR < cases.json > results.json

A case is an oracle case (oracle/cases.py) with "runner": "v1" or "v2". The layers and their KV-cache groups are built
and planned as oracle/stub_harness.py does. Then the release's own runner code runs on the "meta" device, where a tensor has
a shape and no storage, so that a GPU tensor is any tensor left on that device:

- Model Runner V2 (vllm/v1/worker/gpu/model_runner.py): GPUModelRunner.initialize_kv_cache on an instance that holds
  only what that method reads, up to the BlockTables it builds (its attention groups, and their metadata builders,
  are built before it); then the attention groups a draft-model speculator builds for its own layers in set_attn
  (init_attn_backend with active_layer_names, vllm/v1/worker/gpu/spec_decode/speculator.py).
- Model Runner V1 (vllm/v1/worker/gpu_model_runner.py): GPUModelRunner.initialize_kv_cache up to the KV tensors
  (initialize_kv_cache_tensors): its attention groups and builders, and the input batch it re-creates when the KV
  cache's block sizes differ from the placeholder its __init__ used; the input batch's block table is built by the
  release's MultiGroupBlockTable, and the placeholder's (freed at the re-creation) is built the same way.

Each result lists every GPU tensor reachable from what was built, with its owner and bytes. A case with decode context
parallelism is answered "unsupported": its process groups are not emulated here.
"""

import importlib
import json
import sys
import time
import traceback
import types
from pathlib import Path

from packaging.version import Version

HERE = Path(__file__).resolve().parent


class Captured(Exception):
    """Raised by a stand-in to stop the runner's method once what is counted has been built."""


# Kernels a GPU install of the release has: asked by the builders' __init__, answered as on the GPU.
KERNEL_ANSWERS = {"has_deep_gemm_sparse_mqa": True, "has_deep_select": True, "_supports_varlen_paged_mqa_logits": True,
                  "has_deep_gemm": True, "is_deep_gemm_supported": True}
SM_COUNT = {"sm90": 132, "sm100": 148, "sm103": 148, "sm120": 188, "sm121": 48}
# Config fields the builders read that the oracle's cases do not carry. DeepSeek-V4.1-Flash's candidate blocks (its
# config.json, the copy catalog.py cites: SyFI-ServingStudio/ServingStudioSim model/config/deepseek_v41_flash.json):
V41_CONFIG = {"candidate_block_size": 8, "candidate_topk_blocks": 2048, "candidate_source_layer_id": 20}
# GLM-5.3-Flash's value head (the masked-MHA dims vLLM lists for it: vllm==0.33.0
# vllm/model_executor/layers/attention/sparse_mla_attention.py:118-119)
GLM5NEXT_CONFIG = {"v_head_dim": 256}
# DeepSeek-V4's RoPE width and query rank (xiaowanCN/aiconfigurator@5f2e6bb
# aic-core/src/aiconfigurator_core/model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json; V4-Pro's q_lora_rank is
# 1536, which sizes no buffer counted here)
V4_CONFIG = {"qk_rope_head_dim": 64, "q_lora_rank": 1024}
MODEL_CONFIG = {"deepseek_v41": V41_CONFIG, "deepseek_v4": V4_CONFIG, "glm5_next": GLM5NEXT_CONFIG}


def as_on_gpu(arch: str):
    """The release's kernel probes answer as on a GPU of this arch, in every vLLM module that holds one."""
    saved = []
    answers = {name: (lambda value: lambda *a, **k: value)(value) for name, value in KERNEL_ANSWERS.items()}
    answers["num_compute_units"] = lambda *a, **k: SM_COUNT[arch]
    answers["check_deep_select_layout"] = lambda *a, **k: None
    for module in [m for name, m in list(sys.modules.items()) if name.startswith("vllm") and m is not None]:
        for probe, answer in answers.items():
            if probe in vars(module):
                saved.append((module, probe, vars(module)[probe]))
                setattr(module, probe, answer)
    return saved


def restore(saved) -> None:
    for module, probe, original in saved:
        setattr(module, probe, original)


def complete_config(vllm_config, case: dict) -> None:
    """The config fields the metadata builders read that the planner does not: the model's heads and MODEL_CONFIG, the
    sparse-MLA prefill workspace factor VllmConfig.__post_init__ sets (vllm==0.33.0 vllm/config/vllm.py:1790-1798: 5 up
    to 262,144 tokens, else 2; 5 before 0.32.0), the top-k backend, speculation flags at their defaults; and what the
    injected layers lack (families.py builds them without __init__)."""
    import platform_cuda

    hf = case["model"]["hf_config"]
    serving = case["serving"]
    model_config = vllm_config.model_config
    set_attr(model_config, "model_arch_config",
             types.SimpleNamespace(total_num_attention_heads=hf.get("num_attention_heads", 64)))
    for name, value in MODEL_CONFIG.get(case["model"]["model_type"], {}).items():
        set_attr(model_config.hf_config, name, value)
    factor = 5 if Version(serving["release"]) < Version("0.32.0") or serving["max_model_len"] <= 262_144 else 2
    attention = getattr(vllm_config, "attention_config", None)
    if attention is not None and hasattr(object.__getattribute__(attention, "stub_target"),
                                         "sparse_mla_prefill_workspace_factor"):
        attention.sparse_mla_prefill_workspace_factor = factor
    set_attr(model_config, "get_vocab_size", lambda: 129280)  # sizes the input batch's sampling state, not counted
    set_attr(vllm_config, "reasoning_config", None)
    set_attr(vllm_config, "additional_config", {})
    set_attr(vllm_config, "mamba_config", None)  # read only to pick a Mamba kernel (patched out)
    from vllm.config import CUDAGraphMode

    # The KDA builders size small graph vectors by these: vLLM's defaults (not counted: below 1 MiB)
    set_attr(vllm_config.compilation_config, "cudagraph_mode", CUDAGraphMode.FULL_AND_PIECEWISE)
    set_attr(vllm_config.compilation_config, "max_cudagraph_capture_size", None)
    set_attr(vllm_config, "kernel_config", types.SimpleNamespace(sparse_indexer_topk_backend="auto"))
    speculative = vllm_config.speculative_config
    if speculative is not None:
        for name, value in (("parallel_drafting", False), ("enable_adaptive_verification", False),
                            ("disable_lookahead_block_hashes", True)):
            set_attr(speculative, name, value)
    for layer in vllm_config.compilation_config.static_forward_context.values():
        if type(layer).__name__ == "MLAAttention" and "prefill_backend" not in vars(layer):
            set_attr(layer, "prefill_backend", None)  # its clone() allocates nothing (a shared workspace's view)
        select = getattr(sys.modules[type(layer).__module__], "_select_v4_sparse_impl", None)
        if vars(layer).get("backend_cls", 0) is None and select is not None:  # V4's attention, 0.20.0-0.22.1
            with platform_cuda.emulate(serving["arch"]):
                set_attr(layer, "backend_cls", select().backend_cls)  # its __init__ (vllm==0.22.0 attention.py:631-632)


def set_attr(obj, name, value) -> None:
    object.__setattr__(obj, name, value)


# What was built -----------------------------------------------------------------------------------------------

def gpu_tensors(obj, path: str, seen: set, depth: int = 0):
    """(path, tensor) for every tensor on the meta device reachable from obj through vLLM objects, lists and dicts."""
    import torch

    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.device.type == "meta":
            yield path, obj
        return
    if isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            yield from gpu_tensors(item, f"{path}[{i}]", seen, depth + 1)
        return
    if isinstance(obj, dict):
        for key, item in obj.items():
            yield from gpu_tensors(item, f"{path}[{key}]", seen, depth + 1)
        return
    if isinstance(obj, type) or not type(obj).__module__.startswith("vllm"):
        return
    if isinstance(obj, torch.nn.Module):  # a layer: its KV cache is not counted here
        return
    for name, item in vars(obj).items() if hasattr(obj, "__dict__") else ():
        yield from gpu_tensors(item, f"{path}.{name}", seen, depth + 1)


def listing(owner: str, obj, seen: set) -> list[dict]:
    rows = []
    for path, tensor in gpu_tensors(obj, owner, seen):
        if tensor._base is not None:  # a view: its base is counted where it is held
            continue
        rows.append({"path": path, "shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", ""),
                     "bytes": tensor.untyped_storage().nbytes()})
    return rows


def group_rows(kind: str, attn_groups, seen: set) -> list[dict]:
    rows = []
    for group_id, groups in enumerate(attn_groups):
        for group in groups:
            owner = f"{kind} group {group_id} {group.backend.get_name()} ({len(group.layer_names)} layers)"
            rows += listing(owner, group, seen)
    return rows


def initialize_until_captured(runner, kv_cache_config, module, stand_ins: dict) -> None:
    """runner.initialize_kv_cache with the module's names that it has replaced by the stand-ins, until a stand-in
    raises Captured."""
    saved = {name: getattr(module, name) for name in stand_ins if hasattr(module, name)}
    for name in saved:
        setattr(module, name, stand_ins[name])
    try:
        stub_harness.call_with(runner.initialize_kv_cache, kv_cache_config=kv_cache_config, is_profiling=False)
    except Captured:
        pass
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


# Model Runner V2 -----------------------------------------------------------------------------------------------

class Anything:
    """A stand-in for runner parts that hold no GPU buffer the KV init builds (model state, request state, input
    buffers): any attribute, call or iteration answers harmlessly."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()

    def __call__(self, *args, **kwargs):
        return Anything()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class ModelStateStandIn(Anything):
    """The default model state's answer to the runner (vllm/v1/worker/gpu/model_states/interface.py): no attention
    groups of its own."""

    def get_additional_cg_support(self):
        from vllm.v1.attention.backend import AttentionCGSupport

        return AttentionCGSupport.ALWAYS, None


def host_buffer(uva_buffer):
    """A stand-in for the release's UvaBuffer (pinned host memory a GPU reads): a CPU tensor, read as the release
    reads it (an attribute `uva` to 0.32.0, a method uva(n) after)."""
    import torch

    class Host:
        def __init__(self, size, dtype):
            self.cpu = torch.zeros(size, dtype=dtype)
            self.np = self.cpu.numpy()
            self._uva = self.cpu
            if not callable(vars(uva_buffer).get("uva")):
                self.uva = self.cpu

    class HostWithMethod(Host):
        def uva(self, n=None):
            return self._uva[:n] if n is not None else self._uva

    return HostWithMethod if callable(vars(uva_buffer).get("uva")) else Host


def runner_v2(vllm_config, case: dict, kv_cache_config, draft_layers: set, device) -> list[dict]:
    """GPUModelRunner.initialize_kv_cache of Model Runner V2 up to its BlockTables, then the draft speculator's
    init_attn_backend over its own layers."""
    import vllm.v1.worker.gpu.attn_utils as attn_utils
    import vllm.v1.worker.gpu.model_runner as mr

    serving = case["serving"]
    runner = object.__new__(mr.GPUModelRunner)
    runner_fields = dict(
        vllm_config=vllm_config, model_config=vllm_config.model_config, cache_config=vllm_config.cache_config,
        scheduler_config=vllm_config.scheduler_config, parallel_config=vllm_config.parallel_config,
        compilation_config=vllm_config.compilation_config, speculative_config=vllm_config.speculative_config,
        device=device, max_model_len=serving["max_model_len"], max_num_reqs=serving["max_num_seqs"],
        max_num_tokens=serving["max_num_batched_tokens"], dcp_size=serving["decode_context_parallel_size"],
        dcp_rank=0, cp_interleave=1, is_encoder_decoder=False, speculator=None, model_state=ModelStateStandIn(),
        jit_warmup_registry=Anything(), req_states=Anything(), input_buffers=Anything(), pcp_manager=None,
        lora_capture_cases=None, decode_query_len=1, batch_sharder=None, vocab_size=129280)
    for name, value in runner_fields.items():
        set_attr(runner, name, value)
    built = {}

    def block_tables(*args, **kwargs):
        """The release's BlockTables; its UVA buffers are pinned host memory on a GPU machine: plain CPU tensors
        here."""
        import vllm.v1.worker.gpu.buffer_utils as buffer_utils

        saved = {name: getattr(buffer_utils, name) for name in ("UvaBuffer", "is_uva_available")
                 if hasattr(buffer_utils, name)}
        buffer_utils.UvaBuffer = host_buffer(buffer_utils.UvaBuffer)
        buffer_utils.is_uva_available = lambda: True
        try:
            built["block_tables"] = original(*args, **kwargs)
        finally:
            for name, value in saved.items():
                setattr(buffer_utils, name, value)
        raise Captured

    original = mr.BlockTables
    initialize_until_captured(runner, kv_cache_config, mr, {
        "BlockTables": block_tables, "maybe_create_adaptive_verification_manager": lambda *a, **k: None})
    seen: set = set()
    rows = listing("block tables", built["block_tables"], seen)
    rows += group_rows("target", runner.attn_groups, seen)
    if draft_layers:
        draft_groups, _, _ = stub_harness.call_with(attn_utils.init_attn_backend, kv_cache_config=kv_cache_config,
                                               vllm_config=vllm_config, device=device,
                                               active_layer_names=draft_layers)
        rows += group_rows("draft", draft_groups, seen)
    return rows


# Model Runner V1 -----------------------------------------------------------------------------------------------

def proposer(vllm_config, draft_layers: set, device):
    """Model Runner V1's drafter for MTP, EagleProposer (vllm==0.33.0 vllm/v1/spec_decode/eagle.py), holding what its
    initialize_attn_backend reads: it builds the draft layers' own attention groups (vllm==0.33.0
    vllm/v1/spec_decode/llm_base_proposer.py:1711-1767; vllm==0.19.0 vllm/v1/spec_decode/eagle.py:1578-1634)."""
    from vllm.v1.spec_decode.eagle import EagleProposer

    drafter = object.__new__(EagleProposer)
    for name, value in dict(vllm_config=vllm_config, device=device, _draft_attn_layer_names=set(draft_layers)).items():
        set_attr(drafter, name, value)
    return drafter


def runner_v1(vllm_config, case: dict, kv_cache_config, draft_layers: set, device) -> list[dict]:
    """GPUModelRunner.initialize_kv_cache of Model Runner V1 up to the KV tensors; the input batch it re-creates is
    counted by its block table, less the placeholder's that its __init__ built (freed by the re-creation)."""
    import vllm.v1.worker.block_table as bt
    import vllm.v1.worker.gpu_model_runner as gmr

    serving = case["serving"]
    cache_config = vllm_config.cache_config
    placeholder = cache_config.block_size if getattr(cache_config, "user_specified_block_size", False) else 16

    class InputBatchStandIn:
        """The release's InputBatch as far as the KV cache shapes it: its MultiGroupBlockTable, built from the
        arguments InputBatch passes it (vllm==0.33.0 vllm/v1/worker/gpu_input_batch.py:183-192)."""

        def __init__(self, **kwargs):
            arguments = dict(kwargs, max_num_blocks=kwargs.get("max_num_blocks_per_req"), pin_memory=False)
            self.block_table = stub_harness.call_with(bt.MultiGroupBlockTable, **arguments)
            self.logitsprocs = None
            self.logitsprocs_need_output_token_ids = False

    length = serving["max_model_len"]
    common = dict(max_num_reqs=serving["max_num_seqs"], max_model_len=length,
                  max_num_batched_tokens=serving["max_num_batched_tokens"], device=device,
                  cp_kv_cache_interleave_size=1)
    old = InputBatchStandIn(**common, block_sizes=[placeholder], kernel_block_sizes=[placeholder],
                            max_num_blocks_per_req=[-(-length // placeholder)])
    runner = object.__new__(gmr.GPUModelRunner)
    runner_fields = dict(
        vllm_config=vllm_config, model_config=vllm_config.model_config, cache_config=cache_config,
        scheduler_config=vllm_config.scheduler_config, parallel_config=vllm_config.parallel_config,
        compilation_config=vllm_config.compilation_config, speculative_config=vllm_config.speculative_config,
        device=device, max_model_len=length, max_encoder_len=0, max_num_reqs=serving["max_num_seqs"],
        max_num_tokens=serving["max_num_batched_tokens"], attn_groups=[], input_batch=old,
        _init_block_sizes=[placeholder], _init_kernel_block_sizes=[placeholder],
        _init_max_num_blocks=[-(-length // placeholder)],
        kv_sharing_fast_prefill_eligible_layers=set(), runner_only_attn_layers=set(), shared_kv_cache_layers={},
        jit_warmup_registry=Anything(), pin_memory=False, is_pooling_model=False, num_spec_tokens=0,
        offload_config=types.SimpleNamespace(uva=types.SimpleNamespace(cpu_offload_gb=0)),
        dcp_world_size=serving["decode_context_parallel_size"],
        drafter=proposer(vllm_config, draft_layers, device) if draft_layers else None)
    for name, value in runner_fields.items():
        set_attr(runner, name, value)

    def stop(*args, **kwargs):
        raise Captured

    set_attr(runner, "initialize_kv_cache_tensors", stop)
    set_attr(runner, "_check_and_update_cudagraph_mode", lambda *a, **k: None)  # graph modes: no buffer
    initialize_until_captured(runner, kv_cache_config, gmr, {
        "InputBatch": InputBatchStandIn, "initialize_mamba_ssu_backend": lambda *a, **k: None})
    seen: set = set()
    rows = []
    if runner.input_batch is not old:
        rows += listing("block tables", runner.input_batch.block_table, seen)
        rows += [dict(row, bytes=-row["bytes"]) for row in listing("placeholder block tables (freed)",
                                                                   old.block_table, seen)]
    rows += group_rows("target", runner.attn_groups, seen)
    if draft_layers:
        rows += group_rows("draft", [runner.drafter.draft_attn_groups], seen)
    return rows


# Cases ------------------------------------------------------------------------------------------------------------

def planned(built: dict, case: dict):
    """The KV-cache config the release's engine core hands the worker for these specs and this memory."""
    from vllm.v1.engine.core import EngineCore

    executor = stub_harness.Executor([built["specs"]], case["available_bytes"],
                                     stub_harness.supported_layouts(built["backends"]))
    engine = types.SimpleNamespace(model_executor=executor, available_gpu_memory_for_kv_cache=-1,
                                   collective_rpc=executor.collective_rpc)
    with stub_harness.quiet():
        EngineCore._initialize_kv_caches(engine, built["vllm_config"])
    return executor.worker_configs[0]


def run(case: dict) -> dict:
    import torch

    import families
    import platform_cuda

    started = time.perf_counter()
    log: dict = {}
    if case["serving"]["decode_context_parallel_size"] > 1:  # its process groups are not emulated here
        return {"name": case["name"], "runner": case["runner"], "unsupported": "decode context parallelism"}
    try:
        layers: list = []
        runner_specs = families.runner_specs

        def recording(vllm_config, built_layers, arch):
            layers.extend(built_layers)
            return runner_specs(vllm_config, built_layers, arch)

        families.runner_specs = recording
        try:
            built = families.build(case, log)
        finally:
            families.runner_specs = runner_specs
        kv_cache_config = planned(built, case)
        vllm_config = built["vllm_config"]
        complete_config(vllm_config, case)
        cached = {name for group in kv_cache_config.kv_cache_groups for name in group.layer_names}
        draft_layers = {name for name, _, draft in layers if draft and name in cached}  # layers with a KV spec
        arch = case["serving"]["arch"]
        runner = "vllm.v1.worker.gpu.model_runner" if case["runner"] == "v2" else "vllm.v1.worker.gpu_model_runner"
        importlib.import_module(runner)  # before the emulation: some modules take CUDA-only paths on import
        saved = as_on_gpu(arch)
        try:
            with families.current_config(vllm_config), platform_cuda.emulate(arch), stub_harness.quiet():
                if case["runner"] == "v2":
                    rows = runner_v2(vllm_config, case, kv_cache_config, draft_layers, torch.device("meta"))
                else:
                    rows = runner_v1(vllm_config, case, kv_cache_config, draft_layers, torch.device("meta"))
        finally:
            restore(saved)
        result = {"total_bytes": sum(row["bytes"] for row in rows), "rows": rows,
                  "groups": [(type(g.kv_cache_spec).__name__, g.kv_cache_spec.block_size, len(g.layer_names))
                             for g in kv_cache_config.kv_cache_groups]}
    except Exception as error:  # noqa: BLE001 - a case that fails is reported, the others still run
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
    result["name"] = case["name"]
    result["runner"] = case["runner"]
    result["config_missing"] = sorted(log.get("missing", ()))
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def main() -> int:
    release_dir = Path(sys.argv[1])
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    release = stub_harness.activate(release_dir)
    results = [run(case) for case in json.load(sys.stdin)]
    json.dump({"release": release, "results": results}, real_stdout, default=str)
    return 0


sys.path.insert(0, str(HERE))
import stub_harness  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
