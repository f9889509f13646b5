"""A raw recipe's values, each checked on its own against its Key: the recipe's type system. A check takes the value as
YAML, JSON or --set gave it and returns it in the form the Recipe holds (128k as 128000, a release as its family, a
list of sizes as a sorted tuple), or raises a RecipeError naming the key as the user wrote it.
"""

import difflib
import json
import math
import re

from dsa_kvcalc import engine as engines
from dsa_kvcalc import hf_config
from dsa_kvcalc.catalog import BACKENDS, DEEPGEMM_RELEASES
from dsa_kvcalc.keys import BY_NAME, KEYS, MEMORY_TERMS, MEMORY_UNITS, NESTED, Key, RecipeError, canonical, \
    memory_unit, shown, suggestion
from dsa_kvcalc.vllm_cli import FLAG_SPELLINGS, IGNORED_KEYS, IGNORED_NESTED, SHORTHANDS

# The texts pydantic's lax mode reads as a boolean in a vLLM config's field (--attention-config.x True)
LAX_BOOLEANS = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
                "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}

RELEASE_PATTERN = r"v?(\d+\.\d+)(?:\.[0-9A-Za-z.+-]*)?"  # a DeepGEMM release: 2.8, 2.8.2, v2.6.1, 2.8.x
# A vLLM release as written (0.34.0, v0.20.1.dev1+g1234): numbers of at most 6 digits and a tag of at most 64
# characters, so that no part is too long to convert (Python reads no int of over 4,300 digits)
VERSION = r"v?\d{1,6}\.\d{1,6}(\.\d{1,6})?([.+\-]?\w[\w.+\-]{0,63})?"


def parse_size(key: str, value) -> int:
    """vLLM's human_readable_int: 1k = 1000, 1K = 1024 (lower case decimal, upper case binary)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip()
        match = re.fullmatch(r"(\d{1,12}(?:\.\d{1,12})?)([kmgtKMGT])", text)
        if match:
            number, suffix = match.groups()
            if suffix.islower():
                return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
            if "." in number:
                raise RecipeError(key, f"binary suffixes take whole numbers, got {value!r}")
            return int(number) * 1024 ** ("KMGT".index(suffix) + 1)
        if re.fullmatch(r"-?\d{1,20}", text):
            return int(text)
    raise RecipeError(key, f"expected a whole number such as 8192, 128k or 1M, got {value!r}")


def check_bounds(name: str, number, k: Key):
    if not k.minimum <= number <= k.maximum:
        top = "" if k.maximum == math.inf else f" and at most {k.maximum:,}"
        raise RecipeError(name, f"must be at least {k.minimum:,}{top}, got {number:,}")
    return number


def whole_number(name: str, k: Key, value):
    """int and size: a whole number (size: 128k, 1M too) within the key's bounds; None for one that asks for the
    default, as in vLLM (max-model-len -1 or auto: the model's maximum)."""
    if value in k.means_default:
        return None
    if k.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        raise RecipeError(name, f"expected a whole number, got {value!r}")
    return check_bounds(name, parse_size(name, value), k)


def fraction(name: str, k: Key, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise RecipeError(name, f"must be a number in (0, 1], got {value!r}")
    return float(value)


def flag(name: str, k: Key, value) -> bool:
    if not isinstance(value, bool):
        raise RecipeError(name, f"expected true or false, got {value!r}")
    return value


def choice(name: str, k: Key, value):
    if value not in k.choices:  # as written: the schema's enum, one spelling per value
        raise RecipeError(name, f"unknown value {value!r}; expected one of: {', '.join(k.choices)}")
    return value


def release(name: str, k: Key, value) -> str:
    """A DeepGEMM release (2.8.2, v2.6.1), as the family whose logits layout it has (2.8, 2.6)."""
    text = str(value).strip() if isinstance(value, (str, int, float)) and not isinstance(value, bool) else ""
    match = re.fullmatch(RELEASE_PATTERN, text)
    family = match.group(1) if match else None
    if family not in k.choices:
        families: dict[str, list[str]] = {}
        for known, layout in DEEPGEMM_RELEASES.items():
            families.setdefault(layout, []).append(known)
        layouts = ", ".join(f"{r[0]} - {r[-1]}" if len(r) > 1 else r[0] for r in reversed(families.values()))
        written = text if re.fullmatch(r"[\w.+-]+", text) else repr(value)
        raise RecipeError(name, f"no known logits layout for DeepGEMM {written}; known layouts: {layouts}")
    return family


def sizes(name: str, k: Key, value) -> tuple[int, ...]:
    if not isinstance(value, list) or any(isinstance(s, bool) or not isinstance(s, int) for s in value):
        raise RecipeError(name, f"expected a list of whole numbers, got {value!r}")
    return tuple(sorted({check_bounds(name, s, k) for s in value}))


def version(name: str, k: Key, value) -> str:
    """A modelled vLLM release, or main."""
    text = str(value).strip() if isinstance(value, (str, float)) else ""
    if text.lower() == engines.MAIN:
        return engines.MAIN
    if not re.fullmatch(VERSION, text):
        raise RecipeError(name, f"expected a vLLM release such as {engines.NEWEST_VLLM}, or main, got {value!r}")
    try:
        build = engines.build_of(text.lstrip("v"))
    except ValueError as error:
        raise RecipeError(name, str(error)) from None
    return build


def a_name(name: str, k: Key, value) -> str:
    """model, gpu, str: a name, which the catalog or the checks across keys judge."""
    if not isinstance(value, str) or not value.strip():
        raise RecipeError(name, f"expected a name, got {value!r}")
    return value.strip()


CHECKS = {"int": whole_number, "size": whole_number, "fraction": fraction, "bool": flag, "choice": choice,
          "release": release, "sizes": sizes, "version": version}


def check_value(name: str, k: Key, value):
    """One key's value, as the user wrote `name`; raises RecipeError."""
    return CHECKS.get(k.kind, a_name)(name, k, value)


def memory_bytes(name: str, value, unit: str, signed: bool = False) -> int:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole and not (isinstance(value, float) and math.isfinite(value)):
        raise RecipeError(name, f"expected a number of {'GiB' if unit == 'gib' else 'bytes'}, got {value!r}")
    if unit == "bytes" and not whole:
        raise RecipeError(name, f"bytes must be a whole number, got {value!r}")
    most, spelled = (1 << 50, "2^50 bytes") if unit == "bytes" else (1 << 20, "2^20 GiB")
    if not (-most if signed else 0) <= value <= most:
        raise RecipeError(name, f"must be between {'-' + spelled if signed else 0} and {spelled}, got {value}")
    return round(value * MEMORY_UNITS[unit]) if unit == "gib" else value


def memory_term(name: str, value, k: Key, unit: str):
    """A term in bytes; a per-backend term as a mapping of backend to bytes ("*": the recipe's backend)."""
    if isinstance(value, dict) and k.per_backend:
        backends = {b.name for b in BACKENDS}
        for backend in value:
            if backend not in backends:
                raise RecipeError(f"{name}.{shown(backend)}", f"unknown backend; expected one of "
                                                              f"{', '.join(sorted(backends))}")
        return {b: memory_bytes(f"{name}.{b}", v, unit) for b, v in value.items() if v is not None}  # null: estimate
    number = memory_bytes(name, value, unit, k.minimum < 0)
    return {"*": number} if k.per_backend else number


def nested_mapping(name: str, value) -> dict:
    if isinstance(value, str):  # vLLM's CLI takes these as JSON strings
        try:
            value = json.loads(value, object_pairs_hook=hf_config.unique_keys)
        except hf_config.DuplicateKey as error:
            raise RecipeError(f"{name}.{error}", "given twice in the JSON (it would keep the last)") from None
        except json.JSONDecodeError as error:
            raise RecipeError(name, f"not valid JSON: {error.msg}") from None
        except ValueError:  # Python reads no number of over 4,300 digits
            raise RecipeError(name, "a number too long to read") from None
        except RecursionError:
            raise RecipeError(name, "nests too deeply") from None
    if not isinstance(value, dict):
        raise RecipeError(name, f"expected a mapping, got {value!r}")
    return value


def read_values(raw: dict) -> tuple[dict, dict]:
    """Every key of a raw recipe checked on its own: field name -> value, and the ignored keys (dotted when nested)
    with their values as written. Another spelling of a flag (disable-expert-parallel) and a shorthand of a JSON
    argument's key (spec-tokens) read as vLLM reads them."""
    values: dict = {}
    seen: dict[str, str] = {}
    ignored: dict = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            raise RecipeError(shown(name), "a key must be a name, not a number or a list")
        top = canonical(name)
        if top in seen:
            raise RecipeError(shown(name), f"given twice (as {seen[top]} and {name})")
        seen[top] = name
        if top in IGNORED_KEYS:
            ignored[top] = value
        elif top in NESTED:
            if value is not None:
                values |= read_nested(shown(name), top, nested_mapping(shown(name), value), ignored)
        elif top in FLAG_SPELLINGS:
            values |= flag_spelling(shown(name), top, value)
        elif top in SHORTHANDS:
            field_name = BY_NAME[SHORTHANDS[top]] if SHORTHANDS[top] in BY_NAME else None
            if field_name is None:
                ignored[SHORTHANDS[top]] = value
            elif value is not None:
                values[field_name] = check_value(shown(name), KEYS[field_name], lax(KEYS[field_name], value))
        elif top not in BY_NAME:
            raise RecipeError(shown(name), "unknown key" + suggestion(top, [*BY_NAME, *NESTED, *IGNORED_KEYS]))
        elif value is not None:
            values[BY_NAME[top]] = check_value(shown(name), KEYS[BY_NAME[top]], value)
    return values, ignored


def flag_spelling(name: str, spelling: str, value) -> dict:
    """Another spelling of a flag: true is the flag as vLLM takes it, false its --no- form where there is one, else
    nothing (vllm==0.33.0 vllm/utils/argparse_utils.py:602-606)."""
    key, stores = FLAG_SPELLINGS[spelling]
    if not isinstance(value, bool):
        raise RecipeError(name, f"expected true or false, got {value!r}")
    if value:
        return {BY_NAME[key]: stores}
    negation = FLAG_SPELLINGS.get(f"no-{spelling}")
    return {BY_NAME[key]: negation[1]} if negation else {}


def lax(k: Key, value):
    """A JSON config's value as pydantic's lax mode reads it into the field: 'True' a boolean, '3' a number."""
    if isinstance(value, str) and k.kind == "bool" and value.lower() in LAX_BOOLEANS:
        return LAX_BOOLEANS[value.lower()]
    if isinstance(value, str) and k.kind == "int" and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    return value


def read_nested(name: str, top: str, mapping: dict, ignored: dict) -> dict:
    values = {}
    for inner, value in mapping.items():
        path = f"{name}.{shown(inner)}"
        if not isinstance(inner, str):
            raise RecipeError(path, "a key must be a name")
        if top == "memory" and inner not in ("gpu", "rest"):
            values |= read_memory_term(path, inner, value, values)
        elif f"{top}.{inner}" in BY_NAME:
            if value is not None:
                field_name = BY_NAME[f"{top}.{inner}"]
                k = KEYS[field_name]
                values[field_name] = check_value(path, k, value if top in ("env", "memory") else lax(k, value))
        elif inner in IGNORED_NESTED.get(top, ()) or (top == "env" and not misspelt_env(inner)):
            ignored[f"{top}.{inner}"] = value
        else:
            known = sorted(k.name.split(".", 1)[1] for k in KEYS.values() if k.name.startswith(top + "."))
            raise RecipeError(path, "unknown key" + suggestion(inner, [*known, *IGNORED_NESTED.get(top, ())])
                                    + f"; {top} takes {', '.join(known)}"
                                    + (" (each as NAME_gib or NAME_bytes)" if top == "memory" else "")
                                    + (" and vLLM's other keys" if IGNORED_NESTED.get(top) else ""))
    return values


def read_memory_term(path: str, inner: str, value, values: dict) -> dict:
    """A memory block's NAME_gib or NAME_bytes, as its field and bytes (nothing for null: the estimate)."""
    term, unit = memory_unit(inner)
    if term not in MEMORY_TERMS or unit is None:
        raise RecipeError(path, f"unknown memory term; expected one of "
                                f"{', '.join(t + '_gib' for t in MEMORY_TERMS)} (or _bytes)")
    field_name = BY_NAME[f"memory.{term}"]
    if value is None:
        return {}
    if field_name in values:
        raise RecipeError(path, f"{term} is given twice, in GiB and in bytes")
    return {field_name: memory_term(path, value, MEMORY_TERMS[term], unit)}


def misspelt_env(name: str) -> bool:
    """An environment variable plan does not model is ignored, unless it is not one at all or looks like a typo of
    one it does (VLLM_SPARSE_INDEXER_MAX_LOGIT_MB)."""
    modelled = [k.name.split(".", 1)[1] for k in KEYS.values() if k.name.startswith("env.")]
    return not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or bool(difflib.get_close_matches(name, modelled, cutoff=0.8))
