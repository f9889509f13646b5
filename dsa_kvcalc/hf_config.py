"""A Hugging Face config.json of a DSA model, read into a catalog Model (for checkpoints the catalog lacks)."""

import json
from pathlib import Path

from dsa_kvcalc import catalog
from dsa_kvcalc.catalog import Model

CONFIG_MAX_BYTES = 4 << 20  # config.json files are kilobytes
# (config key, largest plausible value): bounds keep a broken file from sizing loops or lists by its numbers
NEEDED = {"num_hidden_layers": 1024, "hidden_size": 1 << 17, "index_n_heads": 1024, "index_head_dim": 4096,
          "index_topk": 1 << 20}
OPTIONAL = {"num_nextn_predict_layers": 16, "n_routed_experts": 1 << 14, "moe_intermediate_size": 1 << 18,
            "first_k_dense_replace": 1024, "vocab_size": 1 << 22, "max_position_embeddings": 1 << 31}


class ConfigError(ValueError):
    pass


def whole(config: dict, name: str, largest: int, path: Path, default: int | None = None) -> int:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= largest:
        raise ConfigError(f"{path}: {name} must be a whole number from 0 to {largest:,}, got {value!r}")
    return value


def read_model(path: Path) -> Model:
    try:
        with path.open("rb") as file:
            data = file.read(CONFIG_MAX_BYTES + 1)
        config = json.loads(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ConfigError(f"cannot read {path}: {getattr(error, 'strerror', None) or error}") from None
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{path} is over {CONFIG_MAX_BYTES >> 20} MiB: not a config.json")
    if not isinstance(config, dict):
        raise ConfigError(f"{path} is not a config.json object")
    missing = [name for name in NEEDED if not config.get(name)]
    if missing:
        raise ConfigError(f"{path} is not a DSA model config: no {', '.join(missing)}")
    n = {name: whole(config, name, largest, path) for name, largest in NEEDED.items()}
    n |= {name: whole(config, name, largest, path, 0) for name, largest in OPTIONAL.items()}
    return catalog.model_from_config(name=str(config.get("_name_or_path") or path), source=f"local {path}",
                                     ratios=compress_ratios(config, n["num_hidden_layers"], path), **n)


def compress_ratios(config: dict, layers: int, path: Path) -> tuple[int, ...]:
    ratios = config.get("compress_ratios") or []
    if not isinstance(ratios, list) or len(ratios) > 2 * layers or not all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= 1 << 16 for r in ratios):
        raise ConfigError(f"{path}: compress_ratios must be a list of whole numbers, one per layer")
    return tuple(ratios)
