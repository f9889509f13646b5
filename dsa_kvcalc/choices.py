"""What vLLM picks for a recipe before it counts any memory: the top-k backends its engine offers and which of them
run here, the sparse-MLA backend, the model runner, the draft layers, the batches in flight, and from them the KV-cache
spec (kv_cache.py). capacity.py and memory_terms.py read these choices; none of them is a byte count."""

from dsa_kvcalc import kv_cache
from dsa_kvcalc.catalog import (BACKENDS, NOPE_MLA_HEAD_SIZE, SPARSE_MLA_CACHE_DTYPES, SPARSE_MLA_FAMILIES,
                                SPARSE_MLA_WIDE_ONLY, Backend, family_archs)
from dsa_kvcalc.engine import ALL, MTP_METHODS
from dsa_kvcalc.kv_cache import KvSpec
from dsa_kvcalc.keys import Recipe, Refusal


def engine_backends(recipe: Recipe) -> list[Backend]:
    return [b for b in BACKENDS if recipe.engine.name in b.engines]


def availability(recipe: Recipe, backend: Backend) -> str | None:
    """None when the backend runs on this recipe's engine, GPU and model, else why not."""
    if recipe.engine.name not in backend.engines:
        return f"a {'/'.join(backend.engines)} backend; this recipe runs {recipe.engine.label}"
    if not recipe.engine.topk_backend_flag and backend.name != "auto":
        return f"{recipe.engine.label} has no --sparse-indexer-topk-backend (vLLM 0.30.0+): its built-in chain runs"
    if recipe.gpu.family not in backend.families:
        return f"needs {'/'.join(family_archs(backend.families))}; {recipe.gpu.name} is {recipe.gpu.arch}"
    if backend.topk is not None and recipe.model.index_topk not in backend.topk:
        supported = f"<= {backend.topk[-1]}" if len(backend.topk) > 8 else "/".join(map(str, backend.topk))
        return f"index_topk {recipe.model.index_topk} not supported ({supported})"
    return None


def sparse_mla_candidates(recipe: Recipe) -> list[str]:
    """vLLM's sparse-MLA backends for the GPU in its order of priority (vllm==0.33.0 vllm/platforms/cuda.py:84-160,
    _get_backend_priorities): on SM10x FlashInfer's first for a quantized cache, for BF16 the release's few-heads
    backend first at <= 16 heads a rank, else FlashMLA-sparse; on SM12x the release's SM12x backend; on SM90
    FlashAttention's sparse MLA (0.25.0+), FlashMLA-sparse, and from 0.30.0 FlashInfer's SM90 kernel, first for a
    512-wide latent and last otherwise (engine.py sm90_flashinfer_sparse_mla); ROCm's only one (vllm/platforms/rocm.py
    :537-539)."""
    family, engine = recipe.gpu.family, recipe.engine
    if family == "rocm":
        return ["ROCM_AITER_MLA_SPARSE"]
    if family == "sm120":
        return [engine.sm12x_sparse_mla_backend]
    if family == "sm100":
        if recipe.quantized_cache:
            return ["FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]
        if recipe.model.num_attention_heads // recipe.tensor_parallel_size <= 16:
            few = engine.sm10x_few_heads_unquantized_sparse_mla_backend
            return list(dict.fromkeys([few, "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE"]))
        return ["FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE"]
    tail = list(dict.fromkeys([engine.sm90_unquantized_sparse_mla_backend, "FLASHMLA_SPARSE"]))
    if engine.sm90_flashinfer_sparse_mla:
        nope = recipe.model.mla_head_size == NOPE_MLA_HEAD_SIZE
        tail = ["FLASHINFER_MLA_SPARSE_SM90", *tail] if nope else [*tail, "FLASHINFER_MLA_SPARSE_SM90"]
    return tail


def sparse_mla_refusal(recipe: Recipe, backend: str) -> tuple[str, str] | None:
    """Why vLLM's selector passes over this sparse-MLA backend for the recipe (validate_configuration and the
    backend's supports_combination), as the recipe key to change and the reason, or None: the archs it runs on, the
    cache dtypes it takes (canonicalized later, vllm/model_executor/layers/attention/mla_attention.py
    _canonicalize_sparse_mla_kv_cache_dtype), the latent width, decode context parallelism (engine.py
    sparse_mla_dcp_backends), and FA4's gathered head counts."""
    engine, family, dtype = recipe.engine, recipe.gpu.family, recipe.cache_dtype
    dcp, model = recipe.decode_context_parallel_size, recipe.model
    families, source = SPARSE_MLA_FAMILIES[backend]
    if family not in families:
        return "gpu", f"{backend} runs on {', '.join(family_archs(families))} only ({source})"
    dtypes, source = SPARSE_MLA_CACHE_DTYPES[backend]
    rocm_fp8 = backend == "ROCM_AITER_MLA_SPARSE" and recipe.quantized_cache and not engine.rocm_accepts_fp8
    nvfp4 = dtype == "nvfp4_ds_mla" and (family != "sm100" or not engine.nvfp4_ds_mla)
    if dtype not in dtypes or rocm_fp8 or nvfp4:
        return "kv-cache-dtype", f"{backend} takes {', '.join(dtypes)} ({source})"
    if model.mla_head_size == NOPE_MLA_HEAD_SIZE and backend in SPARSE_MLA_WIDE_ONLY:
        return "model", f"{backend} takes a {model.mla_head_size}-wide latent only ({SPARSE_MLA_WIDE_ONLY[backend]})"
    if model.mla_head_size == NOPE_MLA_HEAD_SIZE and backend == "FLASHMLA_SPARSE":
        nope = engine.flashmla_sparse_nope_cache_dtypes
        if family != "sm90" or dtype not in nope:
            return "kv-cache-dtype", (f"FLASHMLA_SPARSE takes a 512-wide latent on SM90 with {', '.join(nope) or 'no'} "
                                      f"cache only ({engine.sources['flashmla_sparse_nope_cache_dtypes']})")
    if dcp > 1 and backend == "FLASH_ATTN_MLA_SPARSE":
        return "decode-context-parallel-size", ("FlashAttention MLA Sparse does not support DCP for now (vllm==0.25.0 "
                                                "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:97-98; "
                                                "vllm==0.33.0 :117-118)")
    if dcp > 1 and engine.sparse_mla_dcp_backends is not None and backend not in engine.sparse_mla_dcp_backends:
        source = engine.sources["sparse_mla_dcp_backends"]
        return "decode-context-parallel-size", f"{backend}: DCP not supported ({source})"
    if backend == "FLASH_ATTN_MLA_SPARSE_FA4":
        gathered = model.num_attention_heads // recipe.tensor_parallel_size * dcp
        counts = (8, 16, 32, 64) if dcp > 1 else (8, 16, 32, 64, 128)
        if gathered not in counts or model.index_topk % 128:
            return "tensor-parallel-size", (f"FA4 sparse MLA requires {counts} gathered query heads and index_topk % "
                                            f"128 == 0, got {gathered} and {model.index_topk} (vllm==0.33.0 "
                                            f"vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:314-341)")
    return None


def sparse_mla_backend(recipe: Recipe) -> str:
    """vLLM's sparse-MLA backend: the recipe's attention-backend, else the first of vLLM's candidates that takes the
    recipe (sparse_mla_candidates, sparse_mla_refusal); vLLM refuses to start where none does. DeepSeek-V4 and V4.1
    pick their own attention: for them the first candidate stands."""
    if recipe.attention_backend:
        return recipe.attention_backend
    candidates = sparse_mla_candidates(recipe)
    if recipe.model.family not in ("mla", "glm5next"):
        return candidates[0]
    refusals = [sparse_mla_refusal(recipe, backend) for backend in candidates]
    if None in refusals:
        return candidates[refusals.index(None)]
    raise Refusal(refusals[0][0], f"{recipe.engine.label} refuses to start: no valid attention backend found for "
                                  f"cuda (vllm==0.33.0 vllm/platforms/cuda.py:473, get_attn_backend_cls) for "
                                  f"{recipe.cache_dtype} on {recipe.gpu.name} ({recipe.gpu.arch}) with "
                                  f"decode-context-parallel-size {recipe.decode_context_parallel_size}: "
                                  f"{'; '.join(r[1] for r in refusals)}")


def on_model_runner_v2(recipe: Recipe) -> bool:
    """Model Runner V2 runs the model by default where the release lists its architecture (engine.py), on ROCm unless
    the release keeps it on V1, and whenever DSpark drafts (which V1 lacks)."""
    engine, architectures = recipe.engine, {ALL, recipe.model.architecture}
    if recipe.speculative_method == "dspark" and engine.dspark_on_model_runner_v2:
        return True
    if recipe.gpu.family == "rocm" and architectures & engine.rocm_model_runner_v1_architectures:
        return False
    return bool(architectures & engine.model_runner_v2_architectures)


def draft_layers(recipe: Recipe) -> int:
    """The draft layers whose caches join the KV cache: all the checkpoint's MTP layers under MTP, whatever k
    (vllm==0.26.0 vllm/models/deepseek_v4/nvidia/mtp.py:174-200), DeepSeek-V4's DSpark drafts under dspark."""
    method = recipe.speculative_method
    if not recipe.num_speculative_tokens:
        return 0
    if method == "dspark":
        return recipe.model.dspark_layers
    return recipe.model.mtp_layers if method is None or method in MTP_METHODS else 0


def concurrent_batches(recipe: Recipe) -> int:
    """The batches in flight whose new tokens a window holds (vllm==0.26.0 vllm/config/vllm.py:512-533): with async
    scheduling PP + 1 on Model Runner V2, 2 on V1 (PP 1), else PP; one before vLLM 0.26.0."""
    stages = recipe.pipeline_parallel_size
    if not recipe.engine.windows_count_concurrent_batches:
        return 1
    if not recipe.async_scheduling:
        return stages
    if on_model_runner_v2(recipe):
        return stages + 1
    return 2 if stages <= 1 else stages


def kv_spec(recipe: Recipe, backend: str, specs: dict | None = None) -> KvSpec:
    """The recipe's KV-cache groups (kv_cache.py), with the tokens in flight that windows hold (vLLM 0.26.0+: two
    batches under async scheduling) and the draft tokens multi-layer MTP keeps (0.28.0+). A sweep passes `specs`,
    the specs it has built by all that kv_cache.spec reads: most of its points share one."""
    engine, k = recipe.engine, recipe.num_speculative_tokens
    in_flight = recipe.max_num_batched_tokens * concurrent_batches(recipe)
    multi_layer_mtp = recipe.speculative_method != "dspark" and draft_layers(recipe) > 1 and k > 1
    extra = k - 1 if engine.retains_draft_tokens and multi_layer_mtp else 0
    arguments = (backend, draft_layers(recipe), in_flight, extra)
    if specs is None:
        return kv_cache.spec(recipe, *arguments)
    key = (*(getattr(recipe, name) for name in kv_cache.SPEC_FIELDS), *arguments)
    if key not in specs:
        specs[key] = kv_cache.spec(recipe, *arguments)
    return specs[key]
