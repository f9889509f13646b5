"""The recipe's JSON Schema (draft 2020-12), for editors, from the key declarations. Names take dashes or underscores at
the top level. Every closed set is an enum of exactly what the loader takes. GPU names are not one: find_gpu takes them
as torch, nvidia-smi and people write them (counts, notes in brackets), so the schema gives examples."""

import math
import re

from dsa_kvcalc.catalog import BACKENDS, DEEPGEMM_RELEASES, GPUS
from dsa_kvcalc.keys import KEYS, MEMORY_TERMS, MEMORY_UNITS, NESTED, Key
from dsa_kvcalc.values import RELEASE_PATTERN
from dsa_kvcalc.vllm_cli import IGNORED_KEYS, IGNORED_NESTED

GPU_NAMES = {"type": "string", "examples": [g.name for g in GPUS]}
NUMBER = {"type": "number", "minimum": 0}
PER_BACKEND = {"anyOf": [NUMBER, {"type": "object", "propertyNames": {"enum": [b.name for b in BACKENDS]},
                                  "additionalProperties": NUMBER}]}


def release_schema() -> dict:
    """A DeepGEMM release of a known family, as text (2.8.2) or as the number YAML reads (2.8)."""
    releases = list(DEEPGEMM_RELEASES)
    text = RELEASE_PATTERN.replace(r"(\d+\.\d+)", "(?:" + "|".join(re.escape(r) for r in releases) + ")")
    return {"anyOf": [{"type": "string", "pattern": rf"^\s*{text}\s*$"}, {"enum": [float(r) for r in releases]}]}


RELEASE = release_schema()


def value_schema(k: Key) -> dict:
    """What a key's check takes (values.py), by its kind."""
    bounds = {"minimum": k.minimum} | ({} if k.maximum == math.inf else {"maximum": k.maximum})
    default = [{"enum": list(k.means_default)}] if k.means_default else []  # -1 or auto
    by_kind = {
        "int": {"type": "integer"} | bounds,
        "size": {"anyOf": [{"type": "integer"} | bounds,
                           {"type": "string", "pattern": r"^\s*(\d+(\.\d+)?[kmgt]|\d+[KMGT]|\d+)\s*$"}, *default]},
        "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "bool": {"type": "boolean"},
        "choice": {"enum": list(k.choices)},
        "release": RELEASE,
        "gpu": GPU_NAMES,
        "sizes": {"type": "array", "items": {"type": "integer"} | bounds},
        "version": {"type": ["string", "number"]},
    }
    return by_kind.get(k.kind, {"enum": list(k.choices)} if k.choices else GPU_NAMES if k.name == "memory.gpu"
                       else {"type": "string"})


def described(k: Key) -> dict:
    entry = value_schema(k) | {"description": k.help + (f" ({', '.join(k.choices)})" if k.kind == "choice" else "")}
    return entry | ({"default": list(k.default) if isinstance(k.default, tuple) else k.default}
                    if k.default not in (None, ()) else {})


def nested_properties() -> dict:
    """Each nested mapping's keys; a memory term under each of its units."""
    nested = {top: {} for top in NESTED}
    for k in KEYS.values():
        top, _, inner = k.name.partition(".")
        if k.kind == "memory":
            for unit in MEMORY_UNITS:
                nested[top][f"{inner}_{unit}"] = PER_BACKEND if k.per_backend else NUMBER if k.minimum >= 0 else {
                    "type": "number"}
        elif inner:
            nested[top][inner] = described(k)
    return nested


def nested_schemas() -> dict:
    """Each nested mapping, or the same as a JSON string (as vLLM's CLI takes it)."""
    exclusive = {"memory": {"allOf": [{"not": {"required": [f"{term}_{unit}" for unit in MEMORY_UNITS]}}
                                      for term in MEMORY_TERMS],
                            "description": "Each term once: NAME_gib or NAME_bytes, never both"},
                 "env": {"propertyNames": {"pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}}}
    schemas = {}
    for top, inner in nested_properties().items():
        open_ = bool(IGNORED_NESTED.get(top)) or top == "env"
        mapping = {"type": "object", "properties": inner, "additionalProperties": open_} | exclusive.get(top, {})
        schemas[top] = {"anyOf": [mapping, {"type": "string", "description": "the same mapping as JSON"}]}
    return schemas


def json_schema() -> dict:
    properties = {k.name: described(k) for k in KEYS.values() if "." not in k.name} | nested_schemas()
    for name in IGNORED_KEYS:
        properties[name] = {"description": "vLLM argument; accepted and ignored (does not change memory)"}
    underscored = {name.replace("-", "_"): entry for name, entry in properties.items() if "-" in name}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "dsa-kvcalc recipe",
            "type": "object", "required": ["model", "gpu"], "properties": properties | underscored,
            "additionalProperties": False}
