"""vLLM's defaults that depend on the GPU, the model or the vLLM release, where a line does not hold them: functions of
the recipe's values as they resolve (a mapping of field name to value, with the catalog's Gpu and Model and the Engine
whose rules apply), which keys.py declares on the key they default (default_from) or the field they derive (derive)."""

from dsa_kvcalc import engine as engines
from dsa_kvcalc.catalog import BF16_CACHE_AS_AUTO
from dsa_kvcalc.units import GIB

BATCHED_DP_ALL2ALL = ("deepep_low_latency", "nixl_ep")  # vllm==0.33.0 vllm/config/parallel.py:796-805


def engine(values) -> engines.Engine:
    """The rules that apply: DeepInfer's, or the vLLM release's."""
    return engines.DEEPINFER if values["engine_name"] == "deepinfer" else engines.vllm(values["vllm_version"])


def batch_tier(values) -> tuple[int, int]:
    """max-num-seqs and max-num-batched-tokens of vLLM's defaults before they meet (vllm==0.33.0
    vllm/engine/arg_utils.py:3151-3240, the same steps since 0.19.0): the GPU's tier, 256 tokens for batched DP MoE,
    doubled by performance-mode throughput."""
    engine, gpu = values["engine"], values["gpu"]
    seqs, tokens = next((s, t) for floor, s, t, left_out in engine.batch_defaults
                        if gpu.total_memory_bytes >= floor * GIB and gpu.arch not in left_out)
    batched_dp = (engine.batched_dp_moe_max_num_batched_tokens and values["enable_expert_parallel"]
                  and values["data_parallel_size"] > 1 and values["all2all_backend"] in BATCHED_DP_ALL2ALL)
    scale = 2 if values["performance_mode"] == "throughput" else 1
    return seqs * scale, (engine.batched_dp_moe_max_num_batched_tokens if batched_dp else tokens) * scale


def max_num_batched_tokens(values) -> int:
    """The tier's tokens, at most max-num-seqs (as given, else the tier's) x max-model-len."""
    tier_seqs, tier_tokens = batch_tier(values)
    seqs = values["max_num_seqs"] if "max_num_seqs" in values["given"] else tier_seqs
    return min(seqs * values["max_model_len"], tier_tokens)


def max_num_seqs(values) -> int:
    """The tier's sequences, at most max-num-batched-tokens."""
    return min(batch_tier(values)[0], values["max_num_batched_tokens"])


def cache_dtype(values) -> str:
    """The KV-cache dtype vLLM runs: the one written (bfloat16 as auto where the architecture's config hook says so,
    catalog.BF16_CACHE_AS_AUTO), or for auto the model's own default where its rule holds."""
    written, engine, gpu = values["kv_cache_dtype"], values["engine"], values["gpu"]
    as_auto = written == "bfloat16" and engine.name == "vllm" and values["model"].architecture in BF16_CACHE_AS_AUTO
    if written != "auto" and not as_auto:
        return written
    checkpoint = next((dtype for families, dtype, _ in values["model"].auto_kv_cache_dtype if gpu.family in families),
                      None)
    sm10x = engine.sm10x_auto_kv_cache_dtypes if gpu.family == "sm100" else {}
    by_architecture = sm10x.get(values["model"].architecture)
    return checkpoint or by_architecture or "auto"
