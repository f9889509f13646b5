"""A Hugging Face config.json of a DSA model, read into a catalog Model (for checkpoints the catalog lacks).

Every architecture the catalog derives is derived from its config too: V3.2 and GLM-5.x (MLA), DeepSeek-V4
(compress_ratios), DeepSeek-V4.1 (kv_source_layer_ids) and GLM-5.3-Flash (Glm5Next: layer_types). A multimodal
config's text_config is read as vLLM flattens it. Before anything is derived the file is checked for what the
derivation needs: layer counts that agree, dense layers within the layers, ratios and layer indices in range and of
the kinds each family keeps, KDA and DSA layers both present. A broken file is one ConfigError line naming the key;
no figure derived past this point can come out negative.
"""

import json
from pathlib import Path

from dsa_kvcalc import inputs
from dsa_kvcalc.catalog import CHECKPOINT_FP8_KV, NOPE_MLA_HEAD_SIZE, Model
from dsa_kvcalc.estimates import Figure

CONFIG_MAX_BYTES = 4 << 20  # config.json files are kilobytes
# (config key, largest plausible value): bounds keep a broken file from sizing loops or lists by its numbers
NEEDED = {"num_hidden_layers": 1024, "hidden_size": 1 << 17, "index_n_heads": 1024, "index_head_dim": 4096,
          "index_topk": 1 << 20}
OPTIONAL = {"num_nextn_predict_layers": 16, "n_routed_experts": 1 << 14, "moe_intermediate_size": 1 << 18,
            "first_k_dense_replace": 1024, "vocab_size": 1 << 22, "max_position_embeddings": 1 << 31,
            "index_topk_freq": 1024, "index_skip_topk_offset": 1024, "sliding_window": 1 << 20,
            "num_attention_heads": 1 << 14, "o_groups": 1 << 14}
# The text fields vLLM reads, which a multimodal config's top level may not give otherwise than its text_config
TEXT_FIELDS = (*NEEDED, *OPTIONAL, "compress_ratios", "kv_source_layer_ids", "index_source_layer_ids", "layer_types",
               "linear_attn_config", "index_kpool", "kv_lora_rank", "qk_rope_head_dim", "linear_num_heads",
               "linear_head_dim", "linear_conv_kernel_dim")
V4_RATIOS = (0, 4, 128)  # sliding window only, compressed with an indexer, heavily compressed
V41_RATIOS = (0, 1, 2)
GLM5NEXT_ARCHITECTURES = ("Glm5NextForConditionalGeneration", "Glm5NextForCausalLM")
# the layer_types entry of a KDA layer (vllm==0.33.0 vllm/models/glm5next/common/model.py:142-147)
LINEAR_ATTENTION = "linear_attention"
# linear_attn_config key -> (the flat key vLLM folds it into, vLLM's default, largest plausible value)
# (vllm==0.30.0 vllm/transformers_utils/configs/glm5_next.py: Glm5NextTextConfig)
KDA_FIELDS = {"num_heads": ("linear_num_heads", 64, 1024), "head_dim": ("linear_head_dim", 128, 4096),
              "short_conv_kernel_size": ("linear_conv_kernel_dim", 4, 64)}


class ConfigError(ValueError):
    pass


class DuplicateKey(ValueError):
    """A JSON object gives a key twice (json.loads would keep the last)."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """json.loads's object_pairs_hook: a key given twice is an error, not a silent choice."""
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(key)
        found[key] = value
    return found


def whole(config: dict, name: str, largest: int, path: Path, default: int | None = None, least: int = 0) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= largest:
        raise ConfigError(f"{path}: {name} must be a whole number from {least} to {largest:,}, got {value!r}")
    return value


def read_config(path: Path) -> dict:
    try:
        config = json.loads(inputs.read_bytes(path, CONFIG_MAX_BYTES, "config.json"), object_pairs_hook=unique_keys)
    except inputs.Unreadable as error:
        raise ConfigError(str(error)) from None
    except DuplicateKey as error:
        raise ConfigError(f"{path}: {error} is given twice (JSON would keep the last)") from None
    except (ValueError, RecursionError) as error:  # ValueError: bad JSON, or a number too long to read
        raise ConfigError(f"cannot read {path}: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} is not a config.json object")
    return config


def text_fields(config: dict, path: Path) -> dict:
    """The config as vLLM's model code reads it: a text_config lifted to the top level (vllm==0.33.0
    vllm/transformers_utils/configs/deepseek_v41.py:20-45 DeepSeek-V4.1; vllm==0.30.0
    vllm/transformers_utils/configs/glm5_next.py:359-366 Glm5Next). The two releases' classes disagree on which level
    wins, so a text field given at both with two values is refused."""
    text = config.get("text_config")
    if text is None:
        return config
    if not isinstance(text, dict):
        raise ConfigError(f"{path}: text_config must be a mapping, got {text!r}")
    clash = next((name for name in TEXT_FIELDS if name in text and name in config and text[name] != config[name]), None)
    if clash is not None:
        raise ConfigError(f"{path}: {clash} is {config[clash]!r} at the top level but {text[clash]!r} in text_config")
    return text | {name: value for name, value in config.items() if name != "text_config"}


def layer_list(config: dict, name: str, layers: int, path: Path) -> tuple[int, ...]:
    """A list of distinct layer indices, each inside the layer range."""
    value = config.get(name)
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value) \
            or len(set(value)) != len(value) or not all(0 <= i < layers for i in value):
        raise ConfigError(f"{path}: {name} must list distinct layers from 0 to {layers - 1}, got {shown(value)}")
    return tuple(value)


def shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def compress_ratios(config: dict, layers: int, draft_layers: int, kinds: tuple[int, ...],
                    path: Path) -> tuple[int, ...]:
    """One ratio of the family's kinds for each layer, and for each draft layer or none."""
    ratios = config.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) not in (layers, layers + draft_layers) or not all(
            r in kinds and not isinstance(r, bool) for r in ratios):
        counts = f"{layers}" if not draft_layers else f"{layers} (or {layers + draft_layers}, with the draft layers)"
        raise ConfigError(f"{path}: compress_ratios must list {', '.join(map(str, kinds))} for each of the {counts} "
                          f"layers")
    return tuple(ratios[:layers])


def mla_fields(config: dict, n: dict, path: Path) -> dict:
    """V3.2 and GLM-5.x: shared indexers where index_topk_freq says (GLM-5.2, GLM-5.3)."""
    return {"index_topk_freq": n["index_topk_freq"] or 1, "index_skip_topk_offset": n["index_skip_topk_offset"] or 2,
            "num_attention_heads": n["num_attention_heads"]}


def v4_fields(config: dict, n: dict, path: Path) -> dict:
    """DeepSeek-V4: a ratio for each layer; the indexer lives on the ratio-4 layers, so one at least."""
    ratios = compress_ratios(config, n["num_hidden_layers"], n["num_nextn_predict_layers"], V4_RATIOS, path)
    if 4 not in ratios:
        raise ConfigError(f"{path}: compress_ratios has no ratio-4 layer: a DeepSeek-V4 model keeps its indexer on "
                          f"those")
    return {"compress_ratios": ratios, "sliding_window": n["sliding_window"] or 128, "indexer_logits_ratio": 4,
            "kv_compress_ratio": 4}


def v41_fields(config: dict, n: dict, path: Path) -> dict:
    """DeepSeek-V4.1 (vllm==0.33.0 vllm/models/deepseek_v41/attention.py): only the kv sources keep a compressed
    cache, so each compresses (ratio 1 or 2); the index sources among them keep the indexer caches the other index
    layers read, so one at least is a kv source. Its attention heads and wo_a groups pick the attention class."""
    layers = n["num_hidden_layers"]
    ratios = compress_ratios(config, layers, n["num_nextn_predict_layers"], V41_RATIOS, path)
    kv_sources = layer_list(config, "kv_source_layer_ids", layers, path)
    index_sources = layer_list(config, "index_source_layer_ids", layers, path)
    flat = next((layer for layer in kv_sources if not ratios[layer]), None)
    if not kv_sources or flat is not None:
        raise ConfigError(f"{path}: kv_source_layer_ids must name compressed layers (ratio 1 or 2); "
                          f"{'none given' if flat is None else f'layer {flat} has ratio 0'}")
    if not set(index_sources) & set(kv_sources):
        raise ConfigError(f"{path}: index_source_layer_ids names no kv source, so no layer keeps an indexer cache")
    for name in ("num_attention_heads", "o_groups"):
        whole(config, name, OPTIONAL[name], path, least=1)
    return {"compress_ratios": ratios, "sliding_window": n["sliding_window"] or 128, "kv_source_layers": kv_sources,
            "index_source_layers": index_sources, "kv_compress_ratio": 4, "num_attention_heads":
                n["num_attention_heads"], "o_groups": n["o_groups"], "drafters": ("dspark",),
            "dspark_layers": n["num_nextn_predict_layers"] or 3}


def kda_shape(config: dict, path: Path) -> dict:
    """linear_attn_config over the flat linear_* keys over vLLM's defaults, as Glm5NextTextConfig folds them."""
    nested = config.get("linear_attn_config") or {}
    if not isinstance(nested, dict):
        raise ConfigError(f"{path}: linear_attn_config must be a mapping, got {shown(nested)}")
    shape = {}
    for name, (flat, default, largest) in KDA_FIELDS.items():
        key = f"linear_attn_config.{name}" if name in nested else flat
        value = nested[name] if name in nested else config.get(flat, default)
        shape[name] = whole({key: value}, key, largest, path, least=1)
    return shape


def glm5next_fields(config: dict, n: dict, path: Path) -> dict:
    """GLM-5.3-Flash: layer_types names each layer KDA (linear_attention) or DSA, and linear_attn_config's kda_layers
    and full_attn_layers, where given, agree; KDA and DSA layers both present. index_kpool is required, a power of two:
    its default moved (vLLM's config class 4, transformers' from vLLM 0.32.0 16). The latent is kv_lora_rank +
    qk_rope_head_dim = 512 wide, the one width FlashInfer's NoPE sparse MLA serves for it."""
    layers = n["num_hidden_layers"]
    types = config.get("layer_types")
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{path}: layer_types must name each of the {layers} layers (linear_attention or an "
                          f"attention type), got {shown(types)}")
    linear = tuple(layer for layer, kind in enumerate(types) if kind == LINEAR_ATTENTION)
    if not linear or len(linear) == layers:
        raise ConfigError(f"{path}: layer_types must hold both KDA (linear_attention) and DSA layers, got "
                          f"{len(linear)} KDA of {layers}")
    nested = config.get("linear_attn_config") or {}
    listed = {"kda_layers": linear, "full_attn_layers": tuple(i for i in range(layers) if i not in linear)}
    for name, expected in listed.items():
        if isinstance(nested, dict) and name in nested and layer_list(nested, name, layers, path) != expected:
            raise ConfigError(f"{path}: linear_attn_config.{name} disagrees with layer_types")
    shape = kda_shape(config, path)
    if "index_kpool" not in config:
        raise ConfigError(f"{path}: no index_kpool (vLLM's default for it moved from 4 to 16 in 0.32.0)")
    kpool = whole(config, "index_kpool", 1024, path, least=2)
    if kpool & (kpool - 1):
        raise ConfigError(f"{path}: index_kpool must be a power of two (the block alignment is derived for those), "
                          f"got {kpool}")
    head_size = whole(config, "kv_lora_rank", 1 << 14, path, 512) + whole(config, "qk_rope_head_dim", 1 << 14, path, 0)
    if head_size != NOPE_MLA_HEAD_SIZE:
        raise ConfigError(f"{path}: kv_lora_rank + qk_rope_head_dim must be {NOPE_MLA_HEAD_SIZE} (the NoPE latent "
                          f"vLLM serves for Glm5Next), got {head_size}")
    return {"linear_layers": linear, "linear_heads": shape["num_heads"], "linear_head_dim": shape["head_dim"],
            "linear_conv_kernel": shape["short_conv_kernel_size"],
            "index_kpool": kpool, "mla_head_size": head_size,
            "num_attention_heads": n["num_attention_heads"] or 64}


def checkpoint_cache_dtype(config: dict) -> tuple:
    """kv-cache-dtype auto as a ModelOpt checkpoint's quantization config stores the cache: FP8 where its
    kv_cache_scheme is 8-bit float, or its kv_cache_quant_algo fp8 (catalog.CHECKPOINT_FP8_KV)."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict) or not str(quant.get("quant_method", "")).startswith("modelopt"):
        return ()
    scheme = quant.get("kv_cache_scheme") or quant.get("kv_cache_quant_algo")
    if isinstance(scheme, dict):
        fp8 = scheme.get("dynamic") is False and scheme.get("num_bits") == 8 and scheme.get("type") == "float"
    else:
        fp8 = str(scheme).lower() == "fp8"
    return CHECKPOINT_FP8_KV if fp8 else ()


def family_fields(config: dict, architecture: str, n: dict, path: Path) -> dict:
    """The Model fields of the config's family (catalog.Model.family)."""
    if "kv_source_layer_ids" in config:
        return v41_fields(config, n, path)
    if architecture in GLM5NEXT_ARCHITECTURES:
        return glm5next_fields(config, n, path)
    types = config.get("layer_types")
    if isinstance(types, list) and LINEAR_ATTENTION in types:
        raise ConfigError(f"{path}: layer_types has linear_attention layers, but architectures is {architecture}: "
                          f"only Glm5Next's hybrid layout ({', '.join(GLM5NEXT_ARCHITECTURES)}) is derived")
    if config.get("compress_ratios") is not None:
        return v4_fields(config, n, path)
    return mla_fields(config, n, path)


def read_model(path: Path) -> Model:
    config = text_fields(read_config(path), path)
    missing = [name for name in NEEDED if not config.get(name)]
    if missing:
        raise ConfigError(f"{path} is not a DSA model config: no {', '.join(missing)}")
    name = config.get("_name_or_path") or str(path)
    if not isinstance(name, str) or not name.isprintable() or not name.encode(errors="ignore").decode() == name:
        raise ConfigError(f"{path}: _name_or_path must be a printable name, got {name!r}")
    architectures = config.get("architectures") or ["?"]
    architecture = architectures[0] if isinstance(architectures, list) else "?"
    n = {name: whole(config, name, largest, path) for name, largest in NEEDED.items()}
    n |= {name: whole(config, name, largest, path, 0) for name, largest in OPTIONAL.items()}
    layers, hidden = n["num_hidden_layers"], n["hidden_size"]
    if n["first_k_dense_replace"] > layers:
        raise ConfigError(f"{path}: first_k_dense_replace {n['first_k_dense_replace']} exceeds num_hidden_layers "
                          f"{layers}: more dense layers than layers")
    fields = family_fields(config, str(architecture), n, path)
    fields["auto_kv_cache_dtype"] = checkpoint_cache_dtype(config) + fields.get("auto_kv_cache_dtype", ())
    expert_bytes = ((layers - n["first_k_dense_replace"]) * n["n_routed_experts"] * 3 * hidden
                    * n["moe_intermediate_size"])
    dense_bytes = layers * 40 * hidden * hidden // 16 + 2 * n["vocab_size"] * hidden * 2
    checkpoint = Figure(expert_bytes + dense_bytes, "estimated", "from the config's shape: routed experts at 1 B a "
                        "weight, 2.5 hidden^2 of attention and shared weights a layer, BF16 embeddings")
    return Model(name=name, config_source=f"local {path}", config_path=path, architecture=str(architecture),
                 num_layers=layers, mtp_layers=n["num_nextn_predict_layers"], hidden_size=hidden,
                 index_n_heads=n["index_n_heads"], index_head_dim=n["index_head_dim"], index_topk=n["index_topk"],
                 max_position_embeddings=n["max_position_embeddings"] or 163840, checkpoint=checkpoint,
                 routed_expert_bytes=expert_bytes, **fields)
