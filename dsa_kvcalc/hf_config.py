"""A Hugging Face config.json of a DSA model, read into a catalog Model (for checkpoints the catalog lacks)."""

import json
from pathlib import Path

from dsa_kvcalc import inputs
from dsa_kvcalc.catalog import Model
from dsa_kvcalc.estimates import Figure

CONFIG_MAX_BYTES = 4 << 20  # config.json files are kilobytes
# (config key, largest plausible value): bounds keep a broken file from sizing loops or lists by its numbers
NEEDED = {"num_hidden_layers": 1024, "hidden_size": 1 << 17, "index_n_heads": 1024, "index_head_dim": 4096,
          "index_topk": 1 << 20}
OPTIONAL = {"num_nextn_predict_layers": 16, "n_routed_experts": 1 << 14, "moe_intermediate_size": 1 << 18,
            "first_k_dense_replace": 1024, "vocab_size": 1 << 22, "max_position_embeddings": 1 << 31,
            "index_topk_freq": 1024, "index_skip_topk_offset": 1024, "sliding_window": 1 << 20}


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


def whole(config: dict, name: str, largest: int, path: Path, default: int | None = None) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= largest:
        raise ConfigError(f"{path}: {name} must be a whole number from 0 to {largest:,}, got {value!r}")
    return value


def read_model(path: Path) -> Model:
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
    missing = [name for name in NEEDED if not config.get(name)]
    if missing:
        raise ConfigError(f"{path} is not a DSA model config: no {', '.join(missing)}")
    name = config.get("_name_or_path") or str(path)
    if not isinstance(name, str) or not name.isprintable() or not name.encode(errors="ignore").decode() == name:
        raise ConfigError(f"{path}: _name_or_path must be a printable name, got {name!r}")
    if config.get("kv_source_layer_ids"):
        raise ConfigError(f"{path} is a DeepSeek-V4.1 config (kv_source_layer_ids): vLLM's grouping of V4.1's caches "
                          f"is not modelled")
    n = {name: whole(config, name, largest, path) for name, largest in NEEDED.items()}
    n |= {name: whole(config, name, largest, path, 0) for name, largest in OPTIONAL.items()}
    layers, hidden = n["num_hidden_layers"], n["hidden_size"]
    ratios = compress_ratios(config, layers, path)
    v4 = {"compress_ratios": ratios[:layers], "sliding_window": n["sliding_window"] or 128, "indexer_logits_ratio": 4,
          "kv_compress_ratio": 4} if ratios else {}
    shared = {"index_topk_freq": n["index_topk_freq"] or 1, "index_skip_topk_offset": n["index_skip_topk_offset"] or 2}
    expert_bytes = ((layers - n["first_k_dense_replace"]) * n["n_routed_experts"] * 3 * hidden
                    * n["moe_intermediate_size"])
    dense_bytes = layers * 40 * hidden * hidden // 16 + 2 * n["vocab_size"] * hidden * 2
    checkpoint = Figure(expert_bytes + dense_bytes, "estimated", "from the config's shape: routed experts at 1 B a "
                        "weight, 2.5 hidden^2 of attention and shared weights a layer, BF16 embeddings")
    architecture = (config.get("architectures") or ["?"])[0]
    return Model(name=name, config_source=f"local {path}", config_path=path, architecture=str(architecture),
                 num_layers=layers,
                 mtp_layers=n["num_nextn_predict_layers"], hidden_size=hidden, index_n_heads=n["index_n_heads"],
                 index_head_dim=n["index_head_dim"], index_topk=n["index_topk"],
                 max_position_embeddings=n["max_position_embeddings"] or 163840, checkpoint=checkpoint,
                 routed_expert_bytes=expert_bytes, **shared, **v4)


def compress_ratios(config: dict, layers: int, path: Path) -> tuple[int, ...]:
    ratios = config.get("compress_ratios") or []
    if not isinstance(ratios, list) or (ratios and len(ratios) < layers) or len(ratios) > 2 * layers or not all(
            r in (0, 4, 128) and not isinstance(r, bool) for r in ratios):
        raise ConfigError(f"{path}: compress_ratios must list 0, 4 or 128 for each of the {layers} layers")
    if ratios and not any(ratios[:layers]):
        raise ConfigError(f"{path}: compress_ratios compresses none of the {layers} layers (4 or 128): a DeepSeek-V4 "
                          f"model keeps at least one compressed cache")
    return tuple(ratios)
