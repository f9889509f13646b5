"""What vLLM picks for a recipe before it counts any memory: the top-k backends its engine offers and which of them
run here, the sparse-MLA backend, the model runner, the draft layers, the batches in flight, and from them the KV-cache
spec (kv_cache.py). capacity.py and memory_terms.py read these choices; none of them is a byte count."""

from dsa_kvcalc import kv_cache
from dsa_kvcalc.catalog import BACKENDS, NOPE_MLA_HEAD_SIZE, NOPE_SPARSE_MLA_BACKENDS, Backend
from dsa_kvcalc.engine import ALL, MTP_METHODS
from dsa_kvcalc.kv_cache import KvSpec
from dsa_kvcalc.keys import Recipe


def engine_backends(recipe: Recipe) -> list[Backend]:
    return [b for b in BACKENDS if recipe.engine.name in b.engines]


def availability(recipe: Recipe, backend: Backend) -> str | None:
    """None when the backend runs on this recipe's engine, GPU and model, else why not."""
    if recipe.engine.name not in backend.engines:
        return f"a {'/'.join(backend.engines)} backend; this recipe runs {recipe.engine.label}"
    if not recipe.engine.topk_backend_flag and backend.name != "auto":
        return f"{recipe.engine.label} has no --sparse-indexer-topk-backend (vLLM 0.30.0+): its built-in chain runs"
    if recipe.gpu.arch not in backend.archs:
        return f"needs {'/'.join(backend.archs)}; {recipe.gpu.name} is {recipe.gpu.arch}"
    if backend.topk is not None and recipe.model.index_topk not in backend.topk:
        supported = f"<= {backend.topk[-1]}" if len(backend.topk) > 8 else "/".join(map(str, backend.topk))
        return f"index_topk {recipe.model.index_topk} not supported ({supported})"
    return None


def sparse_mla_backend(recipe: Recipe) -> str:
    """vLLM's sparse-MLA backend (vllm==0.33.0 vllm/platforms/cuda.py:84-160): the recipe's attention-backend, else
    FlashInfer's for a 512-wide latent (catalog.NOPE_SPARSE_MLA_BACKENDS), on SM12x the release's SM12x backend;
    on SM10x FLASHINFER_MLA_SPARSE for a quantized cache it takes (not the DS-MLA formats), for BF16 the release's
    few-heads backend at <= 16 heads a rank, else FLASHMLA_SPARSE; on SM90 the release's BF16 backend without DCP,
    else FLASHMLA_SPARSE; ROCM_AITER_MLA_SPARSE on ROCm (vllm/platforms/rocm.py:537-539)."""
    arch, engine = recipe.gpu.arch, recipe.engine
    if recipe.attention_backend:
        return recipe.attention_backend
    if recipe.model.mla_head_size == NOPE_MLA_HEAD_SIZE:
        return NOPE_SPARSE_MLA_BACKENDS[arch]
    if arch in ("sm120", "sm121"):
        return engine.sm12x_sparse_mla_backend
    if arch.startswith("gfx"):
        return "ROCM_AITER_MLA_SPARSE"
    heads_per_rank = recipe.model.num_attention_heads // recipe.tensor_parallel_size
    if arch in ("sm100", "sm103"):
        if recipe.quantized_cache:
            return "FLASHMLA_SPARSE" if recipe.cache_dtype.endswith("_ds_mla") else "FLASHINFER_MLA_SPARSE"
        return engine.sm10x_few_heads_unquantized_sparse_mla_backend if heads_per_rank <= 16 else "FLASHMLA_SPARSE"
    if not recipe.quantized_cache and recipe.decode_context_parallel_size == 1:
        return engine.sm90_unquantized_sparse_mla_backend
    return "FLASHMLA_SPARSE"


def on_model_runner_v2(recipe: Recipe) -> bool:
    """Model Runner V2 runs the model by default where the release lists its architecture (engine.py), on ROCm unless
    the release keeps it on V1, and whenever DSpark drafts (which V1 lacks)."""
    engine, architectures = recipe.engine, {ALL, recipe.model.architecture}
    if recipe.speculative_method == "dspark" and engine.dspark_on_model_runner_v2:
        return True
    if recipe.gpu.arch.startswith("gfx") and architectures & engine.rocm_model_runner_v1_architectures:
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
