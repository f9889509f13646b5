"""The per-layer KV-cache specs of a model, built with the active release's own model code.

The model's layers that own caches are made in the order and under the names the release's model gives them; each is
asked for its spec as the release's GPU model runner asks (gpu_model_runner.get_kv_cache_spec: layers whose spec is
None are skipped, then `customize_attention_spec(layer.get_attn_backend(), spec)` where the release has it, 0.32.0+),
and the proposer's draft layers are marked is_draft. Before that, the release itself decides what the recipe leaves
to it: the model's default cache dtype (vllm/model_executor/models/config.py verify_and_update_config), the
sparse-MLA backend by its CUDA priorities (platform_cuda.py), the cache dtype that backend stores
(_canonicalize_sparse_mla_kv_cache_dtype) and the block size every backend takes (Platform.update_block_size_for_backend).

A layer is made one of two ways: the small cache modules (indexer K caches, sliding-window caches, compressor states)
run their own __init__; the attention layers, whose __init__ builds weights and kernels, are made with __new__ and
given the attributes their get_kv_cache_spec reads, each set as that release's __init__ sets it (cited). What a
family writes itself is the wiring of its model: which layer owns which cache, read off the model's __init__.
"""

import contextlib
import dataclasses
import importlib
import inspect
import math

from packaging.version import Version

import stub_harness
import platform_cuda


def build(case: dict, log: dict) -> dict:
    """{"vllm_config", "specs": {layer: spec}, "backends": [classes], "info": {...}} for one case."""
    serving, model = case["serving"], case["model"]
    classes = platform_cuda.import_backends()
    builder = FAMILIES[case["family"]]
    vllm_config = stub_harness.build_vllm_config({**serving, "cache_dtype": serving["kv_cache_dtype"]},
                                            model, log)
    with current_config(vllm_config), stub_harness.captured_logs() as records:
        model_default_cache_dtype(vllm_config, model, serving["arch"])
        layers, info = builder(vllm_config, serving, model["hf_config"], classes)
        if "block_size" not in info:  # a hybrid model's family sizes its own attention block
            info["block_size"] = choose_block_size(vllm_config, layers, serving["arch"])
        specs, backends = runner_specs(vllm_config, layers, serving["arch"])
    info["cache_dtype"] = vllm_config.cache_config.cache_dtype
    info["stride_alignments"] = sorted({str(getattr(s, "block_stride_alignment", None)) for s in specs.values()})
    info["log"] = [stub_harness.message(r) for r in records if "cache" in stub_harness.message(r).lower()][:8]
    return {"vllm_config": vllm_config, "specs": specs, "backends": backends, "info": info}


@contextlib.contextmanager
def current_config(vllm_config):
    import vllm.config as C

    setter = getattr(C, "set_current_vllm_config", None)
    if setter is None:
        from vllm.config.vllm import set_current_vllm_config as setter
    with setter(vllm_config):
        yield


def model_default_cache_dtype(vllm_config, model: dict, arch: str) -> None:
    """The model's own hook on the config (GlmMoeDsaForCausalLM: auto -> fp8_e4m3 on SM10x from 0.32.0)."""
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    hook = MODELS_CONFIG_MAP.get(model["architectures"][0])
    if hook is not None:
        with platform_cuda.emulate(arch):
            hook.verify_and_update_config(vllm_config)


def choose_block_size(vllm_config, layers: list, arch: str) -> int:
    """The release's Platform.update_block_size_for_backend over the model's layers (static_forward_context, in the
    order the model registered them), as the worker runs it."""
    platform = platform_cuda.cuda_platform(arch)
    with platform_cuda.emulate(arch), stub_harness.quiet():
        platform.update_block_size_for_backend(vllm_config)
    return vllm_config.cache_config.block_size


def runner_specs(vllm_config, layers: list, arch: str) -> tuple[dict, list]:
    """gpu_model_runner.get_kv_cache_spec over (name, module, is_draft), and the layers' backends."""
    from vllm.v1.kv_cache_interface import AttentionSpec

    customize = None
    with contextlib.suppress(ImportError):
        from vllm.v1.worker.utils import customize_attention_spec as customize
    specs, backends = {}, []
    with platform_cuda.emulate(arch):
        for name, module, is_draft in layers:
            spec = module.get_kv_cache_spec(vllm_config)
            if not spec:
                continue
            backend = module.get_attn_backend()
            if backend not in backends:
                backends.append(backend)
            if customize is not None and isinstance(spec, AttentionSpec):
                spec = customize(backend, spec)
            if is_draft and any(f.name == "is_draft" for f in dataclasses.fields(spec)):
                spec = dataclasses.replace(spec, is_draft=True)
            specs[name] = spec
    return specs, backends


def construct(cls, **kwargs):
    """cls's own __init__, with the keyword arguments this release's signature takes."""
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    return cls(**{k: v for k, v in kwargs.items() if takes_any or k in params})


def inject(cls, **attrs):
    """An instance of cls made without its __init__, holding attrs."""
    import torch

    obj = cls.__new__(cls)
    if isinstance(obj, torch.nn.Module):
        torch.nn.Module.__init__(obj)
    for name, value in attrs.items():
        object.__setattr__(obj, name, value)
    return obj


def registered(vllm_config, name: str, module):
    """An injected layer put in static_forward_context where its __init__ would have put itself, so that the
    layers keep the model's order (the first layer's backend picks the block size in 0.19.0-0.30.0)."""
    vllm_config.compilation_config.static_forward_context[name] = module
    return module


def first_module(*names):
    for name in names:
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    raise ImportError(f"none of {names}")


def real_cache_config(vllm_config):
    return object.__getattribute__(vllm_config.cache_config, "stub_target")


def draft_layer_count(serving: dict, hf: dict, dspark_default: int) -> int:
    """The layers the release's proposer builds: MTP's num_nextn_predict_layers; DSpark's n_mtp_layers or its
    default (vllm==0.33.0 vllm/models/deepseek_v4/nvidia/dspark.py:106, deepseek_v41/nvidia/dspark.py:85-89)."""
    spec = serving["speculative"]
    if not spec or not spec["num_speculative_tokens"]:
        return 0
    if spec["method"] == "dspark":
        return hf.get("n_mtp_layers") or dspark_default
    return hf["num_nextn_predict_layers"] if "mtp" in spec["method"] else 0


# DeepSeek-V3.2 and GLM-5.x --------------------------------------------------------------------------------------

def owns_indexer(release: str, layer: int, hf: dict) -> bool:
    """Whether a layer builds an Indexer (and so an indexer K cache). 0.19.0-0.23.0: every layer
    (vllm==0.23.0 vllm/model_executor/models/deepseek_v2.py:1009); from 0.24.0 a layer whose top-k is skipped,
    max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0, builds none, MTP layers always do
    (vllm==0.24.0 vllm/model_executor/models/deepseek_v2.py:1000-1050; vllm==0.33.0
    vllm/models/deepseek_v32/attention.py:166-200)."""
    if Version(release) < Version("0.24.0") or layer >= hf["num_hidden_layers"]:
        return True
    skipped = max(layer - hf.get("index_skip_topk_offset", 2) + 1, 0) % hf.get("index_topk_freq", 1) != 0
    return not skipped


def stored_mla_cache_dtype(backend, cache_dtype: str) -> str:
    """What MLAAttention.__init__ stores for this backend: the release's _canonicalize_sparse_mla_kv_cache_dtype
    (0.24.0+), before it FLASHMLA_SPARSE turned any fp8 into fp8_ds_mla (vllm==0.19.0
    vllm/model_executor/layers/attention/mla_attention.py:341-350)."""
    import vllm.model_executor.layers.attention.mla_attention as mla

    canonical = getattr(mla, "_canonicalize_sparse_mla_kv_cache_dtype", None)
    if canonical is not None:
        return canonical(backend, cache_dtype)
    if backend.get_name() == "FLASHMLA_SPARSE" and cache_dtype.startswith("fp8") and cache_dtype != "fp8_ds_mla":
        return "fp8_ds_mla"
    return cache_dtype


def build_mla(vllm_config, serving: dict, hf: dict, classes: dict) -> tuple[list, dict]:
    """DeepseekV2MLAAttention / DeepseekV32Attention per layer: its Indexer's K cache (DeepseekV32IndexerCache,
    head_dim = index_head_dim + index_head_dim // 128 * 4, uint8, prefix ...self_attn.indexer.k_cache) where the layer
    builds an Indexer, then its MLAAttention (prefix ...self_attn.attn, head_size kv_lora_rank + qk_rope_head_dim);
    the MTP layers follow as model.layers.{num_hidden_layers + i}."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    release = serving["release"]
    v2 = importlib.import_module("vllm.model_executor.models.deepseek_v2")
    cache_cls = v2.DeepseekV32IndexerCache
    with contextlib.suppress(ImportError, AttributeError):
        cache_cls = importlib.import_module("vllm.models.deepseek_v32.attention").DeepseekV32Indexer.indexer_cache_cls
    head_size = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    cache_config = real_cache_config(vllm_config)
    backend_name, passed_over = platform_cuda.select_sparse_mla(
        serving["arch"], hf["num_attention_heads"] // serving["tensor_parallel_size"], cache_config.cache_dtype,
        head_size, cache_config.block_size, serving["attention_backend"], classes)
    backend = classes[backend_name]
    stored = stored_mla_cache_dtype(backend, cache_config.cache_dtype)
    cache_config.cache_dtype = stored
    k_head = hf["index_head_dim"] + hf["index_head_dim"] // 128 * 4
    drafts = draft_layer_count(serving, hf, 0)
    layers = []
    with platform_cuda.emulate(serving["arch"]):
        for layer in range(hf["num_hidden_layers"] + drafts):
            draft = layer >= hf["num_hidden_layers"]
            prefix = f"model.layers.{layer}.self_attn"
            indexer = None
            if owns_indexer(release, layer, hf):
                indexer = construct(cache_cls, head_dim=k_head, dtype=torch.uint8, prefix=f"{prefix}.indexer.k_cache",
                                    cache_config=cache_config)
                layers.append((f"{prefix}.indexer.k_cache", indexer, draft))
            attention = registered(vllm_config, f"{prefix}.attn", inject(
                MLAAttention, kv_cache_dtype=stored, head_size=head_size, sliding_window=None,
                non_causal_multi_token_decode=False, indexer=indexer, topk_buffer_width=hf["index_topk"],
                attn_backend=backend, kv_sharing_target_layer_name=None, layer_name=f"{prefix}.attn", num_kv_heads=1,
                dtype=torch.bfloat16, use_sparse=True))
            layers.append((f"{prefix}.attn", attention, draft))
    info = {"backend": backend_name, "passed_over": [f"{n}: {r}" for n, r in passed_over], "draft_layers": drafts,
            "indexers": sum(1 for name, _, _ in layers if name.endswith("k_cache"))}
    return layers, info


# DeepSeek-V4 ----------------------------------------------------------------------------------------------------

def v4_attention_class(vllm_config, arch: str, a4):
    """The attention class the release's NVIDIA model picks (nvidia/model.py _select_dsv4_attn_cls, 0.23.0+), else
    its FlashMLA class (nvidia/flashmla.py, 0.23.0+), else the generic one (0.20.0-0.22.1)."""
    with contextlib.suppress(ImportError, AttributeError):
        select = importlib.import_module("vllm.models.deepseek_v4.nvidia.model")._select_dsv4_attn_cls
        with platform_cuda.emulate(arch):
            return select(vllm_config)
    with contextlib.suppress(ImportError, AttributeError):
        return importlib.import_module("vllm.models.deepseek_v4.nvidia.flashmla").DeepseekV4FlashMLAAttention
    return getattr(a4, "DeepseekV4Attention", None) or a4.DeepseekV4MLAAttention


def check_runs_on(attention_cls, arch: str) -> None:
    """The attention layer's backend must take this GPU (AttentionBackend.supports_compute_capability), or vLLM
    fails at start."""
    backend = getattr(attention_cls, "backend_cls", None)
    if backend is not None and not backend.supports_compute_capability(platform_cuda.capability(arch)):
        raise platform_cuda.Unsupported(f"{attention_cls.__name__}'s backend {backend.get_name()} does not run on "
                                        f"{arch}")


def v4_cache_dtype(a4, attention_cls, cache_config):
    """(cache dtype string, torch dtype) as DeepseekV4Attention.__init__ resolves them: the release's
    _resolve_dsv4_kv_cache_dtype(layout, --kv-cache-dtype, cache_config) (vllm==0.33.0
    vllm/models/deepseek_v4/attention.py:345-347; 0.23.0 :284-286, the layout flag then use_flashmla_fp8_layout),
    before it fp8* -> fp8_ds_mla in uint8 (vllm==0.20.0 vllm/model_executor/layers/deepseek_v4_attention.py)."""
    import torch

    resolve = getattr(a4, "_resolve_dsv4_kv_cache_dtype", None)
    if resolve is not None:
        if hasattr(attention_cls, "_uses_fp8_ds_mla_layout"):
            layout = inject(attention_cls)._uses_fp8_ds_mla_layout()
        else:
            layout = attention_cls.use_flashmla_fp8_layout
        return resolve(layout, cache_config.cache_dtype, cache_config)
    if cache_config.cache_dtype.startswith("fp8"):
        cache_config.cache_dtype = "fp8_ds_mla"
        return "fp8_ds_mla", torch.uint8
    return cache_config.cache_dtype, torch.bfloat16


def build_deepseek_v4(vllm_config, serving: dict, hf: dict, classes: dict) -> tuple[list, dict]:
    """DeepseekV4 attention per layer i, prefix model.layers.{i}.attn, ratio r = compress_ratios[i] (draft layers 1):
    r == 4: the indexer's K cache (DeepseekV4IndexerCache: 132 B, or MXFP4's 68 B) and its compressor's FP32 state
    (CompressorStateCache, 2 x 2 x index_head_dim, ratio 4); every layer its sliding-window cache (DeepseekV4SWACache);
    the attention layer itself (its compressed cache, None when r <= 1); r > 1 its compressor's FP32 state
    (2 x coff x head_dim, coff 2 for ratio 4 else 1)."""
    import torch

    a4 = first_module("vllm.models.deepseek_v4.attention", "vllm.model_executor.layers.deepseek_v4_attention")
    c4 = first_module("vllm.models.deepseek_v4.compressor", "vllm.model_executor.layers.deepseek_compressor")
    from vllm.v1.attention.backends.mla import sparse_swa

    attention_cls = v4_attention_class(vllm_config, serving["arch"], a4)
    check_runs_on(attention_cls, serving["arch"])
    cache_config = real_cache_config(vllm_config)
    fp4 = indexer_uses_fp4(vllm_config, serving)
    index_dim = hf["index_head_dim"]
    k_head = index_dim // 2 + index_dim // 32 if fp4 else index_dim + index_dim // 128 * 4
    ratios = list(hf["compress_ratios"])
    drafts = draft_layer_count(serving, hf, 3)
    layers = []
    with platform_cuda.emulate(serving["arch"]):
        kv_dtype, kv_torch = v4_cache_dtype(a4, attention_cls, cache_config)
        for layer in range(len(ratios) + drafts):
            draft = layer >= len(ratios)
            ratio = max(1, ratios[layer]) if not draft else 1
            prefix = f"model.layers.{layer}.attn"
            if ratio == 4:
                layers.append((f"{prefix}.indexer.k_cache", construct(
                    a4.DeepseekV4IndexerCache, head_dim=k_head, dtype=torch.uint8, prefix=f"{prefix}.indexer.k_cache",
                    cache_config=cache_config, compress_ratio=ratio), draft))
                layers.append((f"{prefix}.indexer.compressor.state_cache", construct(
                    c4.CompressorStateCache, state_dim=2 * 2 * index_dim, dtype=torch.float32, compress_ratio=ratio,
                    prefix=f"{prefix}.indexer.compressor.state_cache"), draft))
            layers.append((f"{prefix}.swa_cache", construct(
                sparse_swa.DeepseekV4SWACache, head_dim=hf["head_dim"], window_size=hf["sliding_window"],
                dtype=kv_torch, prefix=f"{prefix}.swa_cache", cache_config=cache_config,
                backend_cls=getattr(attention_cls, "swa_backend_cls", None)), draft))
            layers.append((prefix, registered(vllm_config, prefix, inject(
                attention_cls, compress_ratio=ratio, head_dim=hf["head_dim"], kv_cache_dtype=kv_dtype,
                kv_cache_torch_dtype=kv_torch, prefix=prefix, window_size=hf["sliding_window"],
                backend_cls=getattr(attention_cls, "backend_cls", None))), draft))
            if ratio > 1:
                coff = 1 + (ratio == 4)
                layers.append((f"{prefix}.compressor.state_cache", construct(
                    c4.CompressorStateCache, state_dim=2 * coff * hf["head_dim"], dtype=torch.float32,
                    compress_ratio=ratio, prefix=f"{prefix}.compressor.state_cache"), draft))
    info = {"attention": attention_cls.__name__, "cache_dtype_stored": kv_dtype, "indexer_fp4": fp4,
            "draft_layers": drafts}
    return layers, info


def indexer_uses_fp4(vllm_config, serving: dict) -> bool:
    """The release's own reading of the attention config (dsa_indexer_uses_fp4, 0.30.0+), else its field."""
    with contextlib.suppress(ImportError, AttributeError):
        indexer = importlib.import_module("vllm.v1.attention.backends.mla.indexer")
        return bool(indexer.dsa_indexer_uses_fp4(vllm_config))
    attention = getattr(vllm_config, "attention_config", None)
    return bool(getattr(attention, "use_fp4_indexer_cache", False))


# DeepSeek-V4.1 ---------------------------------------------------------------------------------------------------

def v41_attention_class(vllm_config, arch: str):
    """The release's own pick (vllm/models/deepseek_v41/nvidia/model.py _select_dsv4_attn_cls). Mega attention asks
    whether its kernel was built (flash_mla_mega_attn.py is_flashmla_mega_attn_supported): a GPU build has it, this
    CPU does not, so it is told yes on the SM10x family, where that function's own capability check passes
    (vllm==0.31.0 flash_mla_mega_attn.py:93-94), and no elsewhere; its topology checks (heads per wo_a group after
    TP) are the release's."""
    model = importlib.import_module("vllm.models.deepseek_v41.nvidia.model")
    with contextlib.suppress(ImportError):
        mega = importlib.import_module("vllm.models.deepseek_v41.nvidia.flash_mla_mega_attn")
        sm10x = arch in ("sm100", "sm103")
        mega.is_flashmla_mega_attn_supported = lambda: (sm10x, None if sm10x else "FlashMLA mega attention requires "
                                                                                   "sm_10x GPUs.")
    with platform_cuda.emulate(arch):
        return model._select_dsv4_attn_cls(vllm_config)


def v41_records(a41, attention, cache_config) -> dict:
    """The attributes DeepseekV4Attention.__init__ sets for its caches (vllm==0.33.0
    vllm/models/deepseek_v41/attention.py:506-537; 0.32.0 :500-527; 0.31.0 :490-517; 0.30.0 :455-461): the cache dtype
    from the release's _resolve_dsv4_kv_cache_dtype, MXFP8 records on the SM10x family (_use_v41_mxfp8_kv_record):
    a 528 B window record, else V4's 584 B; the compressed record 288 B under nvfp4_ds_mla (0.31.0+), else the window
    record; pages aligned to 512 B (SM10x) or 576 B."""
    layout = attention._uses_fp8_ds_mla_layout()
    packed = getattr(attention, "packed_kv_cache_dtype", "fp8_ds_mla")
    kv_dtype, kv_torch = stub_harness.call_with(
        a41._resolve_dsv4_kv_cache_dtype, use_fp8_ds_mla_layout=layout, kv_cache_dtype=cache_config.cache_dtype,
        cache_config=cache_config, packed_kv_cache_dtype=packed)
    mxfp8 = a41._use_v41_mxfp8_kv_record()
    window = 528 if mxfp8 else 584
    return {"kv_cache_dtype": kv_dtype, "kv_cache_torch_dtype": kv_torch, "kv_mxfp8": mxfp8,
            "swa_bytes_per_token": window, "kv_bytes_per_token": window,
            "compressed_bytes_per_token": 288 if kv_dtype == "nvfp4_ds_mla" else window,
            "kv_page_alignment": 512 if mxfp8 else 576}


def build_deepseek_v41(vllm_config, serving: dict, hf: dict, classes: dict) -> tuple[list, dict]:
    """DeepseekV4Attention of vllm/models/deepseek_v41/attention.py per layer i (prefix model.layers.{i}.attn;
    vllm==0.33.0 :320-360 and :430-620): the kv sources (kv_source_layer_ids among the backbone layers) build the
    indexer's K cache where they are also index sources (DeepseekV4IndexerCache, head_dim from the release's
    _indexer_k_cache_head_dim and dsa_indexer_uses_fp4), every layer its 32-token sliding-window cache
    (DeepseekV4SWACache), the attention layer its compressed cache (None unless a kv source), and a kv source's
    compressor an FP32 ring where its ratio > 1 (compressor.py CompressorStateCache, state_dim 2 x head_dim). DSpark's
    draft layers (nvidia/dspark.py) are past the backbone: ratio 0, window cache only."""
    import torch

    a41 = importlib.import_module("vllm.models.deepseek_v41.attention")
    c41 = importlib.import_module("vllm.models.deepseek_v41.compressor")
    attention_cls = v41_attention_class(vllm_config, serving["arch"])
    check_runs_on(attention_cls, serving["arch"])
    cache_config = real_cache_config(vllm_config)
    backbone, ratios = hf["num_hidden_layers"], list(hf["compress_ratios"])
    drafts = draft_layer_count(serving, hf, 3)
    layers = []
    with platform_cuda.emulate(serving["arch"]):
        records = v41_records(a41, inject(attention_cls), cache_config)
        fp4 = indexer_uses_fp4(vllm_config, serving)
        k_head = a41._indexer_k_cache_head_dim(hf["index_head_dim"], fp4)
        for layer in range(backbone + drafts):
            ratio = ratios[layer] if layer < len(ratios) else 0
            kv_source = layer < backbone and layer in hf["kv_source_layer_ids"]
            index_source = layer < backbone and layer in hf["index_source_layer_ids"]
            prefix, draft = f"model.layers.{layer}.attn", layer >= backbone
            layers.append((prefix, registered(vllm_config, prefix, inject(
                attention_cls, compress_ratio=ratio, is_kv_source=kv_source, is_index_source=index_source,
                head_dim=hf["head_dim"], prefix=prefix, **records)), draft))
            if index_source and kv_source:
                layers.append((f"{prefix}.indexer.k_cache", construct(
                    a41.DeepseekV4IndexerCache, head_dim=k_head, dtype=torch.uint8, prefix=f"{prefix}.indexer.k_cache",
                    cache_config=cache_config, compress_ratio=ratio), draft))
            stride = math.lcm(records["swa_bytes_per_token"], records["compressed_bytes_per_token"])
            layers.append((f"{prefix}.swa_cache", construct(
                a41.DeepseekV4SWACache, head_dim=hf["head_dim"], window_size=hf["sliding_window"],
                dtype=records["kv_cache_torch_dtype"], prefix=f"{prefix}.swa_cache", cache_config=cache_config,
                backend_cls=attention_cls.swa_backend_cls, block_size=32,
                packed_bytes_per_token=records["swa_bytes_per_token"],
                packed_page_alignment=records["kv_page_alignment"],
                packed_block_stride_alignment=stride if records["kv_mxfp8"] else None, bounded_replay=False), draft))
            if kv_source and ratio > 1:
                layers.append((f"{prefix}.compressor.state_cache", construct(
                    c41.CompressorStateCache, state_dim=2 * hf["head_dim"], dtype=torch.float32,
                    prefix=f"{prefix}.compressor.state_cache"), draft))
    info = {"attention": attention_cls.__name__, "cache_dtype_stored": records["kv_cache_dtype"],
            "indexer_fp4": fp4, "draft_layers": drafts}
    return layers, info


# GLM-5.3-Flash (Glm5Next) -----------------------------------------------------------------------------------------

def glm5next_block_size(cache_config, hf: dict, tp: int, k: int) -> tuple[int, int, int]:
    """(attention block B, one token's MLA bytes, the KDA state's bytes) as Platform._align_hybrid_block_size sizes
    them (vllm==0.30.0 vllm/platforms/interface.py:778-958; 0.33.0 :940-1135), with the release's own spec classes
    and state calculators: B = 128 x cdiv(KDA page, 128 x MLA bytes a token), 128 being the MLA decode kernels'
    multiple (:895-907), already a multiple of the indexer's 4 x 32 (0.30/0.31, cuda.py:430-447) and of every
    backend's smallest kernel block (0.32+). SM90 and SM10x: SM12x's indexer rounds to 256, not modelled here."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
    from vllm.v1.kv_cache_interface import MambaSpec, MLAAttentionSpec

    dtype = torch.bfloat16 if cache_config.cache_dtype == "auto" else torch.uint8
    token = MLAAttentionSpec(block_size=1, num_kv_heads=1, head_size=hf["kv_lora_rank"] + hf["qk_rope_head_dim"],
                             dtype=dtype).page_size_bytes
    shapes = kda_shapes(MambaStateShapeCalculator, hf, tp, k)
    dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", "auto")
    state = MambaSpec(shapes=shapes, dtypes=dtypes, block_size=1).page_size_bytes
    return 128 * -(-state // (128 * token)), token, state


def kda_shapes(calculator, hf: dict, tp: int, k: int):
    return stub_harness.call_with(calculator.kda_state_shape, tp_world_size=tp, num_heads=hf["linear_num_heads"],
                             head_dim=hf["linear_head_dim"], conv_kernel_size=hf["linear_conv_kernel_dim"],
                             num_spec=k)


def build_glm5next(vllm_config, serving: dict, hf: dict, classes: dict) -> tuple[list, dict]:
    """GLM-5.3-Flash (vllm/models/glm5next: nvidia/ in 0.30.0, common/ from 0.31.0), layer by layer in the model's
    order (docs/design.md, KV-cache groups): a layer whose layer_types entry is linear_attention is a KDA
    layer (Glm5NextLinearAttention, prefix model.layers.{i}.self_attn: its MambaSpec from the release's
    MambaBase.get_kv_cache_spec); the others, and the MTP layer model.layers.{45}.mtp_block, are DSA layers: the
    indexer's kpool K cache (Glm5NextIndexerCache, 132 B, index_kpool tokens an entry), its tail ring
    (Glm5NextTailCache) and the MLA latent (MLAAttention, head_size kv_lora_rank + qk_rope_head_dim = 512).
    The hybrid config vLLM sets before the layers give their specs is written here as the release sets it
    (MambaModelConfig.verify_and_update_config, vllm==0.31.0 vllm/model_executor/models/config.py:627-675): with
    prefix caching (vLLM's default) mamba_cache_mode 'align' and mamba blocks of the attention block B, without it
    'none' and mamba blocks of max_model_len; the KDA page padded to B x an MLA token (glm5next_block_size)."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    base = "vllm.models.glm5next.nvidia" if Version(serving["release"]) < Version("0.31.0") else "vllm.models.glm5next.common"
    attention_module = importlib.import_module(f"{base}.attention")
    kda_module = importlib.import_module(f"{base}.kda")
    cache_config = real_cache_config(vllm_config)
    tp = serving["tensor_parallel_size"]
    spec = serving["speculative"]
    k = spec["num_speculative_tokens"] if spec else 0
    head_size = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    backend_name, passed_over = platform_cuda.select_sparse_mla(
        serving["arch"], hf["num_attention_heads"] // tp, cache_config.cache_dtype, head_size, None,
        serving["attention_backend"], classes)
    backend = classes[backend_name]
    stored = stored_mla_cache_dtype(backend, cache_config.cache_dtype)
    cache_config.cache_dtype = stored
    block, token, state = glm5next_block_size(cache_config, hf, tp, k)
    cache_config.block_size = block
    prefix_caching = serving.get("enable_prefix_caching", True)
    cache_config.mamba_cache_mode = "align" if prefix_caching else "none"
    cache_config.mamba_block_size = block if prefix_caching else serving["max_model_len"]
    cache_config.mamba_page_size_padded = block * token if block * token != state else None
    drafts = draft_layer_count(serving, hf, 0)
    k_head = hf["index_head_dim"] + hf["index_head_dim"] // 128 * 4
    layers = []
    with platform_cuda.emulate(serving["arch"]):
        prefill = kda_prefill_backend(kda_module, hf)
        for layer in range(hf["num_hidden_layers"] + drafts):
            draft = layer >= hf["num_hidden_layers"]
            if not draft and hf["layer_types"][layer] == "linear_attention":
                name = f"model.layers.{layer}.self_attn"
                layers.append((name, registered(vllm_config, name, inject(
                    kda_module.Glm5NextLinearAttention, tp_size=tp, num_heads=hf["linear_num_heads"],
                    head_dim=hf["linear_head_dim"], conv_size=hf["linear_conv_kernel_dim"], num_spec=k,
                    model_config=vllm_config.model_config, cache_config=cache_config, kda_prefill_backend=prefill,
                    speculative_config=vllm_config.speculative_config)), draft))
                continue
            prefix = f"model.layers.{layer}.mtp_block.self_attn" if draft else f"model.layers.{layer}.self_attn"
            k_cache = construct(attention_module.Glm5NextIndexerCache, head_dim=k_head, dtype=torch.uint8,
                                prefix=f"{prefix}.indexer.k_cache", cache_config=cache_config,
                                index_kpool=hf["index_kpool"])
            layers.append((f"{prefix}.indexer.k_cache", k_cache, draft))
            layers.append((f"{prefix}.indexer.tail_cache", construct(
                attention_module.Glm5NextTailCache, head_dim=hf["index_head_dim"], dtype=torch.bfloat16,
                prefix=f"{prefix}.indexer.tail_cache", cache_config=cache_config,
                index_kpool=hf["index_kpool"]), draft))
            layers.append((f"{prefix}.attn", registered(vllm_config, f"{prefix}.attn", inject(
                MLAAttention, kv_cache_dtype=stored, head_size=head_size, sliding_window=None,
                non_causal_multi_token_decode=False, indexer=k_cache,
                topk_buffer_width=-(-(hf["index_topk"] + hf["index_kpool"] - 1) // 128) * 128,
                attn_backend=backend, kv_sharing_target_layer_name=None, layer_name=f"{prefix}.attn",
                num_kv_heads=1, dtype=torch.bfloat16, use_sparse=True)), draft))
    info = {"backend": backend_name, "passed_over": [f"{n}: {r}" for n, r in passed_over], "draft_layers": drafts,
            "block_size": block, "kda_state_bytes": state, "kda_prefill": prefill}
    return layers, info


def kda_prefill_backend(kda_module, hf: dict) -> str:
    """FlashKDA or Triton, by the release's own pick (common/kda.py _resolve_kda_prefill_backend, 0.32.0+)."""
    import torch

    resolve = getattr(kda_module, "_resolve_kda_prefill_backend", None)
    if resolve is None:
        return "triton"
    return resolve("auto", hf["linear_head_dim"], torch.bfloat16, hf.get("gate_lower_bound"))


FAMILIES = {"mla": build_mla, "deepseek_v4": build_deepseek_v4, "deepseek_v41": build_deepseek_v41,
            "glm5next": build_glm5next}
