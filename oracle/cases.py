"""What the oracle is asked: every bundled recipe and every development record (tests/test_records.py RECORDS), on every
modelled vLLM release that has the model, as oracle inputs; and plan's answer to the same question.

Runs with the project's Python (dsa_kvcalc importable). From the tool's resolved Recipe it reads only what a serving
command gives vLLM: the model's config fields, the GPU's arch, the cache dtype and attention backend as written,
speculation, max-model-len, the batch limits, async scheduling and the parallel sizes. Everything vLLM derives from
those (the model's default cache dtype, the sparse-MLA backend, what that backend stores, the block size, the layers
and their groups) the oracle derives with the release's own code; plan's KV-cache groups are never read.
"""

from dataclasses import dataclass
from pathlib import Path

from dsa_kvcalc import capacity
from dsa_kvcalc.catalog import MODELS
from dsa_kvcalc.choices import kv_spec, sparse_mla_backend
from dsa_kvcalc.engine import RELEASES
from dsa_kvcalc.keys import RecipeError
from dsa_kvcalc.recipe import load, read_recipe
from dsa_kvcalc.units import GIB

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"

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


@dataclass(frozen=True)
class Point:
    """One recipe on one release: the oracle's case and plan's figures, or why there is none."""
    release: str
    name: str
    case: dict | None
    plan: dict | None
    skip: str = ""


def bundled() -> list[tuple[str, dict]]:
    return [(path.stem, read_recipe(path)) for path in sorted(RECIPES.glob("*.yaml"))]


def records() -> list[tuple[str, dict]]:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_records import RECORDS

    return [(record.name, record.recipe, record.available_gib) for record in RECORDS]


def probes() -> list[tuple[str, dict, None]]:
    """Every catalog model on H200 and B200 at TP8 (with expert parallelism for V4 and V4.1, and fp8 for V4), without
    speculation and with each drafter it runs (MTP k=3, DSpark k=5); GLM-5.3-Flash also without prefix caching, and the
    1M-token GLM-5.2 and GLM-5.3 also at 131,072 tokens (at 1M one request does not fit on TP8)."""
    cases = []
    for model in MODELS:
        for gpu in ("H200", "B200"):
            raw = {"model": model.name, "gpu": gpu, "tensor-parallel-size": 8}
            if model.family in ("deepseek_v4", "deepseek_v41"):
                raw["enable-expert-parallel"] = True
            if model.family == "deepseek_v4":
                raw["kv-cache-dtype"] = "fp8"  # V4's FlashMLA attention refuses auto before 0.30.0
            variants = {"": {}} | {f" {drafter} k={k}": {"speculative-config": {"method": drafter,
                                                                              "num_speculative_tokens": k}}
                                   for drafter, k in (("mtp", 3), ("dspark", 5)) if drafter in model.drafters}
            if model.family == "glm5next":
                variants[" no prefix caching"] = {"enable-prefix-caching": False}
            if model.family == "mla" and model.max_position_embeddings > 1 << 18:  # 1M: one request needs ~90 GiB
                variants[" L=131072"] = {"max-model-len": 131072}
            cases += [(f"probe {model.name} {gpu}{label}", raw | extra, None) for label, extra in variants.items()]
    return cases


def everything() -> list[tuple[str, dict, float | None]]:
    """(name, raw recipe, logged available KV GiB or None) for every bundled recipe, development record and catalog
    probe."""
    return [(name, raw, None) for name, raw in bundled()] + records() + probes()


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
    planned = capacity.plan(recipe)
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


def points(releases: list[str] | None = None, names: list[str] | None = None) -> list[Point]:
    chosen = [entry for entry in everything() if names is None or entry[0] in names]
    return [point(release, *entry) for release in (releases or list(RELEASES)) for entry in chosen]

