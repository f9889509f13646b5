"""What vLLM decides for a recipe before it counts any memory, decided once: resolve(recipe) -> Deployment.

The top-k backends its engine offers and which of them run here, the sparse-MLA backend, the model runner, the draft
layers, the batches and tokens in flight, and from them the KV-cache spec (kv_cache/). Every start-up check of vLLM's
that refuses a recipe runs here, and only here: one Refusal type (keys.Refusal, the CLI's exit 4), its key named as
the recipe spells it. recipe.load() validates the input; capacity.py and memory_terms.py read the Deployment; none of
its values is a byte count of memory.

The walk runs one way: recipe -> deployment -> capacity (plan) -> report -> render.
"""

from dataclasses import dataclass, field
from functools import cached_property

from dsa_kvcalc import graphs, kv_cache
from dsa_kvcalc.catalog import (BACKENDS, DRAFTER_NEEDS, NOPE_MLA_HEAD_SIZE, SPARSE_MLA_CACHE_DTYPES,
                                SPARSE_MLA_FAMILIES, SPARSE_MLA_WIDE_ONLY, V4_FLASHMLA_FAMILIES, V41_DSPARK_BLOCK_TOKENS,
                                Backend, Layout, Rows, family_archs)
from dsa_kvcalc.engine import ALL, MTP_METHODS, VLLM_RULES
from dsa_kvcalc.graphs import CudagraphEstimate
from dsa_kvcalc.keys import KEYS, Recipe, Refusal
from dsa_kvcalc.kv_cache import CacheConfig, KvSpec, stage_layers, v41_packed
from dsa_kvcalc.recipe import given_arguments
from dsa_kvcalc.vllm_config import RELEASE_VALUES


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
    """The recipe's KV-cache groups (kv_cache/), with the tokens in flight that windows hold (vLLM 0.26.0+: two
    batches under async scheduling) and the draft tokens multi-layer MTP keeps (0.28.0+). A sweep passes `specs`,
    the specs it has built so far under their arguments (a CacheConfig holds all the spec reads of the recipe): most
    of a sweep's points share one."""
    engine, k = recipe.engine, recipe.num_speculative_tokens
    in_flight = recipe.max_num_batched_tokens * concurrent_batches(recipe)
    multi_layer_mtp = recipe.speculative_method != "dspark" and draft_layers(recipe) > 1 and k > 1
    extra = k - 1 if engine.retains_draft_tokens and multi_layer_mtp else 0
    arguments = (CacheConfig.of(recipe), backend, draft_layers(recipe), in_flight, extra)
    if specs is None:
        return kv_cache.spec(*arguments)
    if arguments not in specs:
        specs[arguments] = kv_cache.spec(*arguments)
    return specs[arguments]


# vLLM's start-up checks that refuse a recipe -------------------------------------------------------------------------

def refusal(recipe: Recipe, key: str, rule: str, reason: str) -> Refusal:
    """A refusal of the release, in its own words and with its source (engine.VLLM_RULES)."""
    return Refusal(key, f"{reason}: {recipe.engine.label} refuses to start ({recipe.engine.sources[rule]})")


def check_attention_heads(recipe: Recipe) -> None:
    """TP divides the attention heads (vllm==0.33.0 vllm/config/model.py:1557-1564; vllm==0.19.0 :1111-1116), and a
    hybrid model's KDA heads (vllm==0.30.0 vllm/model_executor/layers/mamba/mamba_utils.py:317-320, divide())."""
    model, tp = recipe.model, recipe.tensor_parallel_size
    if model.num_attention_heads % tp:
        raise Refusal("tensor-parallel-size", f"{tp} does not divide {model.name}'s {model.num_attention_heads} "
                                              f"attention heads (vLLM would refuse to start)")
    if model.linear_layers and recipe.engine.name == "vllm" and model.linear_heads % tp:
        raise Refusal("tensor-parallel-size", f"{tp} does not divide {model.name}'s {model.linear_heads} KDA heads "
                                              f"(vLLM would refuse to start)")


def check_decode_context_parallel(recipe: Recipe) -> None:
    """DCP reuses the TP ranks, so it divides the TP size (vllm==0.33.0 vllm/config/parallel.py:596-600; the same
    since vllm==0.19.0 :391-395); and vLLM's planner asserts that no window cache is split by decode context
    parallelism (engine.py sliding_window_refuses_dcp): DeepSeek-V4 and V4.1 keep a sliding window on every layer."""
    dcp, model, tp = recipe.decode_context_parallel_size, recipe.model, recipe.tensor_parallel_size
    if tp % dcp and recipe.engine.name == "vllm":
        raise Refusal("decode-context-parallel-size", f"{dcp}: vLLM refuses to start: tp_size={tp} must be divisible "
                                                      f"by dcp_size={dcp} (vllm==0.33.0 vllm/config/parallel.py:596-600)")
    if dcp > 1 and model.sliding_window and recipe.engine.name == "vllm" and recipe.engine.sliding_window_refuses_dcp:
        source = recipe.engine.sources["sliding_window_refuses_dcp"]
        raise Refusal("decode-context-parallel-size", f"{dcp}: vLLM refuses to start: {model.name} keeps a "
                                                      f"{model.sliding_window}-token sliding window on every layer, "
                                                      f"and its KV-cache planner asserts 'DCP not support sliding "
                                                      f"window.' ({source})")


def check_capture_sizes(recipe: Recipe) -> None:
    """With CUDA graphs on, vLLM needs a largest capture size of at least 1 token, and one given beside the sizes must
    be their largest within max_num_batched_tokens (vllm==0.33.0 vllm/config/vllm.py:2551-2626; the same since
    vllm==0.19.0 :1402-1473)."""
    given = recipe.max_cudagraph_capture_size
    if recipe.engine.name != "vllm" or recipe.cudagraph_mode == "NONE" or given is None:
        return
    name = KEYS["max_cudagraph_capture_size"].name
    if given == 0:
        raise Refusal(name, "0 captures no CUDA graph, which vLLM refuses to start with: set "
                                "compilation-config.cudagraph_mode NONE (or enforce-eager) instead")
    largest = max(recipe.kept_capture_sizes, default=0)
    if recipe.cudagraph_capture_sizes and given != largest:
        raise Refusal(name, f"{given} is not {largest}, the largest of cudagraph_capture_sizes within "
                                f"max-num-batched-tokens: vLLM refuses to start; give one of the two only")


def check_release_values(recipe: Recipe) -> None:
    """A value a release's config type does not have yet (vllm_config.RELEASE_VALUES): vLLM's parser refuses it."""
    for name, value in given_arguments(recipe).items():
        rule = RELEASE_VALUES.get(name, {}).get(value) if isinstance(value, str) else None
        if rule and not getattr(recipe.engine, rule):
            first = VLLM_RULES[rule].changes[0]
            raise Refusal(name, f"{value}: {recipe.engine.label} refuses to start: its parser takes this value "
                                f"from vLLM {first.release} on ({first.source})")


def check_indexer_cache_dtype(recipe: Recipe) -> None:
    """An MXFP4 indexer cache runs on the SM10x family only: from 0.22.0 where use_fp4_indexer_cache is set, from 0.28.0
    however the dtype is spelt (engine.py mxfp4_indexer_needs_sm10x). ROCm's own MXFP4 rules are not modelled."""
    checked = recipe.engine.mxfp4_indexer_needs_sm10x
    arch = recipe.gpu.arch
    if checked is None or recipe.gpu.family in ("rocm", "sm100") or recipe.indexer_kv_dtype != "mxfp4":
        return
    if checked == "use_fp4_indexer_cache" and "use_fp4_indexer_cache" not in recipe.given:
        return
    key = "attention-config." + checked
    raise refusal(recipe, key, "mxfp4_indexer_needs_sm10x", f"mxfp4 on {recipe.gpu.name} ({arch}): vLLM's MXFP4 "
                                                            f"indexer cache needs Blackwell datacenter GPUs (sm_10x)")


def check_v41_cache_dtype(recipe: Recipe) -> None:
    """DeepSeek-V4.1's attention resolves the cache dtype by its layout: the packed records take the release's dtypes
    (v41_packed_cache_dtypes), plain rows none of the packed names (0.31.0+), and nvfp4_ds_mla needs the SM10x family's
    MXFP8 records (0.31.0+)."""
    engine, dtype = recipe.engine, recipe.cache_dtype
    if v41_packed(CacheConfig.of(recipe)):
        dtypes, reason = engine.v41_packed_cache_dtypes
        if dtype not in dtypes:
            raise refusal(recipe, "kv-cache-dtype", "v41_packed_cache_dtypes", reason.format(dtype=dtype))
        if dtype == "nvfp4_ds_mla" and engine.v41_nvfp4_needs_sm10x and recipe.gpu.family != "sm100":
            raise refusal(recipe, "kv-cache-dtype", "v41_nvfp4_needs_sm10x",
                          f"nvfp4_ds_mla on {recipe.gpu.name}: the V4.1 records it needs FlashMLA decodes only on "
                          f"SM100")
    elif dtype.endswith("_ds_mla") and engine.v41_plain_rows_refuse_packed:
        raise refusal(recipe, "kv-cache-dtype", "v41_plain_rows_refuse_packed",
                      f"{dtype} is a packed FlashMLA DeepSeek V4.1 KV cache format; the selected backend stores plain "
                      f"KV rows")


def check_v41_pipeline_stages(recipe: Recipe) -> None:
    """DeepSeek-V4.1's compressed layers read the compressed KV of the latest kv-source layer at or below them, which
    must be built on the same pipeline stage (vllm==0.33.0 vllm/models/deepseek_v41/attention.py:600-613, the same
    since vllm==0.30.0 :493-506): a stage with a compressed layer whose source lies on an earlier stage is refused."""
    model = recipe.model
    for stage in stage_layers(model.num_layers, recipe.pipeline_parallel_size)[1:]:
        for layer in (layer for layer in stage if model.compress_ratios[layer] > 0):  # sliding window only: no source
            source = max(s for s in model.kv_source_layers if s <= layer)
            if source < stage.start:
                raise Refusal("pipeline-parallel-size", f"{recipe.pipeline_parallel_size}: {recipe.engine.label} "
                              f"refuses to start: the stage of layers {stage.start}-{stage.stop - 1} holds layer "
                              f"{layer}, whose compressed KV is layer {source}'s, on the stage before: 'PP splits "
                              f"inside a v4.1 kv-sharing group are not supported.' (vllm==0.33.0 "
                              f"vllm/models/deepseek_v41/attention.py:600-613)")


def check_cache_dtype(recipe: Recipe, backend: str) -> None:
    """vLLM starts only where the sparse-MLA backend runs on the GPU and takes the KV-cache dtype (DeepSeek-V4's own
    attention resolves its backend and fp8 layout itself, and its FlashMLA layout takes only fp8; V4.1's by its
    layout), and where the indexer's cache dtype runs on the GPU."""
    check_indexer_cache_dtype(recipe)
    if recipe.model.family == "deepseek_v41":
        check_v41_cache_dtype(recipe)
    if recipe.model.family == "deepseek_v4":
        named_flashinfer = recipe.attention_backend == "FLASHINFER_MLA_SPARSE_DSV4"
        flashmla = recipe.gpu.family in V4_FLASHMLA_FAMILIES and not named_flashinfer
        ds_mla_layout = flashmla or recipe.gpu.family == "sm120"  # catalog.V4_FLASHMLA_FAMILIES
        auto_fp8 = recipe.cache_dtype == "auto" and recipe.engine.v4_auto_cache_dtype_fp8
        if ds_mla_layout and not (recipe.cache_dtype.startswith("fp8") or auto_fp8):
            source = recipe.engine.sources["v4_auto_cache_dtype_fp8"]
            raise Refusal("kv-cache-dtype", f"{recipe.kv_cache_dtype}: {recipe.engine.label} refuses to start: "
                                            f"DeepSeek-V4's attention on {recipe.gpu.name} stores fp8_ds_mla and "
                                            f"takes fp8 only ({source}): give kv-cache-dtype: fp8")
    if recipe.model.family not in ("mla", "glm5next"):
        return
    refused = sparse_mla_refusal(recipe, backend)
    if refused is not None:  # a backend named: vLLM's selector refuses it
        key, reason = refused
        key = key if key == "kv-cache-dtype" else "attention-backend"
        raise Refusal(key, f"{recipe.cache_dtype} on {recipe.gpu.name} ({recipe.gpu.arch}): {recipe.engine.label} "
                           f"refuses to start: its sparse-MLA backend {reason}")
    dcp = recipe.decode_context_parallel_size
    if backend == "FLASHMLA_SPARSE" and dcp > 1 and not recipe.quantized_cache and \
            recipe.engine.flashmla_sparse_dcp_needs_quantized:
        raise refusal(recipe, "decode-context-parallel-size", "flashmla_sparse_dcp_needs_quantized",
                      f"{dcp} with a {recipe.cache_dtype} cache on FLASHMLA_SPARSE: DCP for FlashMLA sparse requires an "
                      f"fp8_ds_mla kv-cache; the bf16 sparse path is not supported under DCP")


def check_drafter(recipe: Recipe) -> None:
    """A drafter the model has (catalog.DRAFTER_NEEDS: V4.1 has no MTP layers; DSpark drafts V4-Flash-0731 and V4.1,
    whose configs give its token), V4.1's DSpark drafting whole blocks, and no draft model over pipeline stages where
    the release refuses them."""
    method = recipe.speculative_method
    if method is None or recipe.engine.name != "vllm":
        return
    drafter = "mtp" if method in MTP_METHODS else method
    if drafter not in DRAFTER_NEEDS:
        return
    if drafter not in recipe.model.drafters:  # with a draft model named, recipe.load refused it as not modelled
        raise Refusal("speculative-config.method", f"{recipe.model.name} has no {drafter} drafter of its own in vLLM; "
                                                   f"its drafters: {', '.join(recipe.model.drafters)}; vLLM refuses "
                                                   f"to start: its {drafter} needs {DRAFTER_NEEDS[drafter]}")
    k, block = recipe.num_speculative_tokens, V41_DSPARK_BLOCK_TOKENS
    if drafter == "dspark" and recipe.model.family == "deepseek_v41" and recipe.engine.v41_dspark_tokens_in_blocks \
            and k > block and k % block:
        raise Refusal("speculative-config.num_speculative_tokens",
                      f"{k}: {recipe.engine.label} refuses to start: num_speculative_tokens:{k} must be divisible by "
                      f"n_predict={block}, V4.1's DSpark block ({recipe.engine.sources['v41_dspark_tokens_in_blocks']})")
    stages = recipe.pipeline_parallel_size
    if stages > 1 and recipe.engine.drafts_take_target_stages:
        source = recipe.engine.sources["drafts_take_target_stages"]
        raise Refusal("pipeline-parallel-size", f"{stages}: {recipe.engine.label}'s {drafter} draft model runs on "
                                                f"the target's {stages} pipeline stages and does not support "
                                                f"pipeline parallelism; vLLM refuses to start ({source})")


# resolve(recipe) -> Deployment ---------------------------------------------------------------------------------------

def rows_rule(recipe: Recipe) -> Rows:
    """The indexer's own rule (catalog.Indexer), or DeepInfer's, whose profile run takes max_num_seqs x (1 + nextn)."""
    return recipe.model.indexer.rows if recipe.engine.rows_capped_by_batched_tokens else Rows.UNCAPPED


def reads_bf16(recipe: Recipe, backend: Backend) -> bool:
    """Does the top-k read DeepGEMM's BF16 logits directly (no FP32 copy, catalog.Backend.reads_bf16)? DeepSelect (and
    DeepInfer's own top-k) do, except under decode context parallelism (DCP merges need FP32) and under an indexer that
    upcasts whatever top-k runs (the kpool indexer's as_fp32_logits, catalog.KPOOL_INDEXER). The runtime upcast and the
    profile's reservation share this one predicate."""
    return backend.reads_bf16 and recipe.decode_context_parallel_size == 1 and not recipe.model.indexer.upcasts_always


@dataclass(frozen=True)
class LogitsShape:
    """What the decode logits' size reads of a recipe: the batch, the draft tokens, the length, DeepGEMM's layout, and
    how the profile counts the rows (capacity.py's steps 1-3)."""
    max_num_seqs: int
    max_num_batched_tokens: int
    num_speculative_tokens: int
    max_model_len: int
    indexer_width_ratio: int  # the logits' columns are max_model_len // this (compressed keys, kpool)
    layout: Layout
    rows_rule: Rows  # how the profile counts the decode logits' rows (rows_rule)
    bf16_readers: frozenset[str]  # the top-k backends that read the BF16 logits directly (reads_bf16)


def logits_shape(recipe: Recipe) -> LogitsShape:
    return LogitsShape(recipe.max_num_seqs, recipe.max_num_batched_tokens, recipe.num_speculative_tokens,
                 recipe.max_model_len, recipe.indexer_width_ratio, recipe.layout, rows_rule(recipe),
                 frozenset(b.name for b in engine_backends(recipe) if reads_bf16(recipe, b)))


@dataclass(frozen=True)
class Measured:
    """What vLLM decides at the shape a memory block was measured at, that carrying its figures re-derives."""
    logits_shape: LogitsShape
    cudagraph_logits_rows: int
    cudagraph_floor_bytes: int


def rocm_workspace_rows(recipe: Recipe) -> int:
    """ROCm's AITER indexer locks an FP32 buffer for the decode logits while profiling (engine.py
    rocm_indexer_workspace): max_num_batched_tokens rows from vLLM 0.23.0, min(max_num_batched_tokens,
    max_num_seqs x (1 + k)) from 0.30.0; none on CUDA."""
    rule = recipe.engine.rocm_indexer_workspace
    if recipe.gpu.family != "rocm" or rule == "none":
        return 0
    rows = recipe.max_num_batched_tokens
    if rule == "decode rows":
        rows = min(rows, recipe.max_num_seqs * (1 + recipe.num_speculative_tokens))
    return rows


@dataclass(frozen=True)
class Deployment:
    """What vLLM decides for a recipe before it counts memory, and the recipe's own figures the arithmetic takes as
    they are: plain values, each decided once. capacity.py reads these, never the recipe (kept here for the report)."""
    recipe: Recipe
    # vLLM's scheduler refuses max-num-seqs above max-num-batched-tokens (vllm==0.33.0
    # vllm/config/scheduler.py:331-336); told after the plan, beside the refusals that depend on memory (report.refusal)
    scheduler_refusal: str | None
    backends: tuple[Backend, ...]  # the top-k backends the recipe's engine offers, in the catalog's order
    reasons: dict[str, str]  # backend -> why it does not run here (availability), or its note where it runs
    available: frozenset[str]  # the backends that run here
    topk_backend: str  # the recipe's sparse-indexer-topk-backend
    sparse_mla_backend: str
    model_runner_v2: bool
    draft_layers: int
    concurrent_batches: int
    kv: KvSpec
    logits_shape: LogitsShape
    reserves_decode_logits: bool  # the profile reserves the decode logits (vLLM #62860, engine.py)
    reserves_unpadded_fp32: bool  # the indexer reserves rows x width x 4 B itself (the kpool indexer's)
    rocm_workspace_rows: int  # the rows of ROCm's locked indexer workspace; 0 where none (rocm_workspace_rows)
    profile_holds_decode_logits: bool  # DeepInfer's profile run holds the decode logits themselves
    captures_graphs: bool  # cudagraph_mode is not NONE
    cudagraph_estimate: CudagraphEstimate
    cudagraph_logits_rows: int  # the largest FULL decode graph's tokens: the indexer logits rows the graph pool holds
    measured: Measured  # the same at the shape the recipe's memory block was measured at (recipe.measured_on)
    # The recipe's own figures: the prefill logits budget, the KV memory or blocks it pins, and its memory block's
    # graph pools and indexer headroom (by top-k backend; "*", every backend, stands for the recipe's)
    prefill_budget_bytes: int
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None
    cudagraph_pool_bytes: dict[str, int]
    indexer_headroom_bytes: dict[str, int]

    @cached_property
    def measured_shape_change(self) -> str:
        """Where the memory block was measured, against here (a note on figures carried over)."""
        return self.recipe.measured_on.shape_change(self.recipe)


@dataclass
class Known:
    """What a sweep has resolved so far, for its later points: the KV-cache specs (kv_spec), and what vLLM decides at
    the shape its memory block was measured at, by that recipe (held here, so that its id names it)."""
    specs: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)  # id(recipe) -> (recipe, Measured)


def captured(recipe: Recipe) -> tuple[CudagraphEstimate, int]:
    """vLLM's CUDA-graph estimate for the recipe, and the rows of indexer logits its largest FULL decode graph holds."""
    sizes = graphs.capture_sizes(recipe)
    estimate = graphs.cudagraph_estimate(recipe, sizes, on_model_runner_v2(recipe))
    return estimate, graphs.decode_graphs(recipe, sizes).top


def measured_at(recipe: Recipe) -> Measured:
    estimate, logits_rows = captured(recipe)
    return Measured(logits_shape(recipe), logits_rows, estimate.floor_bytes)


def measured_then(recipe: Recipe, known: Known | None) -> Measured:
    """What vLLM decides at the shape the recipe's memory block was measured at (recipe.measured_on): built once a
    sweep."""
    then = recipe.measured_on
    if known is None:
        return measured_at(then)
    if id(then) not in known.measured:
        known.measured[id(then)] = (then, measured_at(then))
    return known.measured[id(then)][1]


def by_backend(figures: dict[str, int], recipe: Recipe) -> dict[str, int]:
    """A memory block's figures by top-k backend, "*" (every backend) read as the recipe's."""
    return {recipe.topk_backend if name == "*" else name: value for name, value in figures.items()}


def resolve(recipe: Recipe, known: Known | None = None) -> Deployment:
    """The recipe's Deployment, after every check of vLLM's that refuses it at start-up (a Refusal, its key as the
    recipe spells it); `known`: what a sweep has resolved so far."""
    try:
        check_attention_heads(recipe)
        check_decode_context_parallel(recipe)
        check_drafter(recipe)
        check_capture_sizes(recipe)
        if recipe.engine.name == "vllm":
            check_release_values(recipe)
        mla_backend = sparse_mla_backend(recipe)
        check_cache_dtype(recipe, mla_backend)
        if recipe.model.family == "deepseek_v41" and recipe.engine.name == "vllm":
            check_v41_pipeline_stages(recipe)
    except Refusal as error:
        raise Refusal(dict(recipe.spelled).get(error.key, error.key), error.problem) from None
    backends = engine_backends(recipe)
    why_not = {b.name: availability(recipe, b) for b in backends}
    notes = {b.name: b.note.format(cooperative_rows=recipe.engine.cooperative_topk_max_rows) for b in backends}
    estimate, logits_rows = captured(recipe)
    here = logits_shape(recipe)
    measured = Measured(here, logits_rows, estimate.floor_bytes) if recipe.measured_on is None else \
        measured_then(recipe, known)
    seqs, tokens = recipe.max_num_seqs, recipe.max_num_batched_tokens
    scheduler_refusal = f"max-num-seqs {seqs:,} is above max-num-batched-tokens {tokens:,}" if seqs > tokens else None
    return Deployment(
        recipe=recipe, scheduler_refusal=scheduler_refusal, backends=tuple(backends),
        reasons={name: reason or notes[name] for name, reason in why_not.items()},
        available=frozenset(name for name, reason in why_not.items() if reason is None),
        topk_backend=recipe.topk_backend, sparse_mla_backend=mla_backend, model_runner_v2=on_model_runner_v2(recipe),
        draft_layers=draft_layers(recipe), concurrent_batches=concurrent_batches(recipe),
        kv=kv_spec(recipe, mla_backend, None if known is None else known.specs), logits_shape=here,
        reserves_decode_logits=recipe.reserves_decode_logits,
        reserves_unpadded_fp32=recipe.model.indexer.reserves_unpadded_fp32,
        rocm_workspace_rows=rocm_workspace_rows(recipe),
        profile_holds_decode_logits=recipe.engine.profile_holds_decode_logits,
        captures_graphs=recipe.cudagraph_mode != "NONE",
        cudagraph_estimate=estimate, cudagraph_logits_rows=logits_rows, measured=measured,
        prefill_budget_bytes=recipe.prefill_budget_bytes, kv_cache_memory_bytes=recipe.kv_cache_memory_bytes,
        num_gpu_blocks_override=recipe.num_gpu_blocks_override,
        cudagraph_pool_bytes=by_backend(recipe.cudagraph_bytes, recipe),
        indexer_headroom_bytes=recipe.indexer_headroom_bytes)
