"""The inputs of oracle/kv_init_buffers.py (issue 24's KV-init buffers): a recipe as plan resolves it, as the model
dimensions and serving values oracle/stub_harness.py and oracle/families.py build layers from. This is plan's side
of that comparison: unlike oracle/harness.py (the KV-cache oracle, which reads the model's config.json and resolves
every default with the release's own code), the KV-init-buffer oracle is still given plan's catalog shapes and
resolved values here."""

import sys

from dsa_kvcalc import planning
from dsa_kvcalc.deployment import kv_spec, sparse_mla_backend
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load
from dsa_kvcalc.units import GIB
from conftest import ROOT

sys.path.insert(0, str(ROOT / "oracle"))

from cases import Point  # noqa: E402

# Config fields vLLM's model code reads that the tool's catalog does not carry, from the config copies the catalog
# cites (every checkpoint of an architecture has the same; V4-Pro has 128 heads).
ARCHITECTURE_CONFIG = {
    "DeepseekV32ForCausalLM": {"model_type": "deepseek_v32", "num_attention_heads": 128, "q_lora_rank": 1536,
                               "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
    "GlmMoeDsaForCausalLM": {"model_type": "glm_moe_dsa", "num_attention_heads": 64, "q_lora_rank": 2048,
                             "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256},
    "DeepseekV4ForCausalLM": {"model_type": "deepseek_v4", "num_attention_heads": 64, "head_dim": 512},
    "DeepseekV41ForCausalLM": {"model_type": "deepseek_v41", "head_dim": 512},
    "Glm5NextForConditionalGeneration": {"model_type": "glm5_next", "kv_lora_rank": 512, "qk_rope_head_dim": 0,
                                         "qk_nope_head_dim": 256, "q_lora_rank": 1536, "gate_lower_bound": -5.0},
}
HEADS = {"deepseek-ai/DeepSeek-V4-Pro": 128}
FAMILY = {"mla": "mla", "deepseek_v4": "deepseek_v4", "deepseek_v41": "deepseek_v41", "glm5next": "glm5next"}



def model_config(recipe) -> dict:
    model = recipe.model
    extra = dict(ARCHITECTURE_CONFIG[model.architecture])
    model_type = extra.pop("model_type")
    hf = {"num_hidden_layers": model.num_layers, "num_nextn_predict_layers": model.mtp_layers,
          "hidden_size": model.hidden_size, "index_n_heads": model.index_n_heads,
          "index_head_dim": model.index_head_dim, "index_topk": model.index_topk,
          "max_position_embeddings": model.max_position_embeddings, **extra}
    if model.num_attention_heads:
        hf["num_attention_heads"] = model.num_attention_heads
    hf["num_attention_heads"] = HEADS.get(model.name, hf["num_attention_heads"])
    if model.index_topk_freq != 1:
        hf |= {"index_topk_freq": model.index_topk_freq, "index_skip_topk_offset": model.index_skip_topk_offset}
    if model.compress_ratios:
        hf |= {"compress_ratios": list(model.compress_ratios), "sliding_window": model.sliding_window}
    if getattr(model, "linear_layers", ()):  # GLM-5.3-Flash, where the tool models it
        hf |= {"layer_types": ["linear_attention" if i in model.linear_layers else "deepseek_sparse_attention"
                               for i in range(model.num_layers)], "linear_num_heads": model.linear_heads,
               "linear_head_dim": model.linear_head_dim, "linear_conv_kernel_dim": model.linear_conv_kernel,
               "index_kpool": model.index_kpool}
    if model.kv_source_layers:
        hf |= {"kv_source_layer_ids": list(model.kv_source_layers),
               "index_source_layer_ids": list(model.index_source_layers), "o_groups": model.o_groups}
    return {"architectures": [model.architecture], "model_type": model_type, "hf_config": hf}


def serving(recipe, release: str) -> dict:
    attention = {}
    if recipe.indexer_kv_dtype != "auto":
        attention["indexer_kv_dtype"] = recipe.indexer_kv_dtype
        attention["use_fp4_indexer_cache"] = recipe.indexer_kv_dtype == "mxfp4"
    if recipe.indexer_sparse_logits:
        attention["indexer_sparse_logits"] = True
    speculative = None
    if recipe.num_speculative_tokens:
        speculative = {"method": recipe.speculative_method or "mtp",
                       "num_speculative_tokens": recipe.num_speculative_tokens}
    return {"release": release, "arch": recipe.gpu.arch, "kv_cache_dtype": recipe.kv_cache_dtype,
            "attention_backend": recipe.attention_backend, "max_model_len": recipe.max_model_len,
            "max_num_batched_tokens": recipe.max_num_batched_tokens, "max_num_seqs": recipe.max_num_seqs,
            "async_scheduling": recipe.async_scheduling, "enable_prefix_caching": recipe.enable_prefix_caching,
            "tensor_parallel_size": recipe.tensor_parallel_size,
            "pipeline_parallel_size": recipe.pipeline_parallel_size, "data_parallel_size": recipe.data_parallel_size,
            "decode_context_parallel_size": recipe.decode_context_parallel_size, "speculative": speculative,
            "attention_config": attention, "use_v2_model_runner": False}


def plan_figures(recipe, kv_bytes: int) -> dict:
    backend = sparse_mla_backend(recipe)
    kv = kv_spec(recipe, backend)
    return {"tokens": kv.tokens(kv_bytes), "block_bytes": kv.block_bytes, "blocks_per_request": kv.pages_per_request,
            "groups": len(kv.groups), "kv_bytes": kv_bytes, "backend": backend,
            "refuses": kv_bytes < kv.request_bytes}  # report.refusal: one request of max-model-len does not fit


def kv_bytes_of(recipe, available_gib: float | None) -> int:
    """A record's logged KV memory; a bundled recipe's, what plan sizes it at on that release. Either way plan's
    checks run (RecipeError where plan says vLLM would refuse)."""
    planned = planning.plan(recipe)
    if available_gib is not None:
        return round(available_gib * GIB)
    return planned.backend(recipe.topk_backend).kv_cache_bytes


def point(release: str, name: str, raw: dict, available_gib: float | None) -> Point:
    try:
        recipe = load({**raw, "vllm-version": release})
    except RecipeError as error:
        if "predates" in error.problem:
            return Point(release, name, None, None, "no model code in this release")
        return Point(release, name, None, None, f"plan refuses it: {error}")
    try:
        kv_bytes = kv_bytes_of(recipe, available_gib)
        refusal = None
    except RecipeError as error:  # what plan's checks say vLLM would refuse (a backend for another GPU, a dtype)
        if available_gib is None:
            return Point(release, name, None, None, f"plan refuses it: {error}")
        kv_bytes, refusal = round(available_gib * GIB), str(error)
    case = {"name": name, "family": FAMILY[recipe.model.family], "model": model_config(recipe),
            "serving": serving(recipe, release), "available_bytes": kv_bytes}
    return Point(release, name, case, plan_figures(recipe, kv_bytes) | {"refusal": refusal})
