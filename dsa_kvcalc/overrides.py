"""`--set key=value` (and each point of sweep's `--vary`): a value put at a dotted key of a raw recipe, as the recipe
file would give it, for values.py to check with the rest."""

import yaml

from dsa_kvcalc.inputs import RecipeLoader
from dsa_kvcalc.keys import BY_NAME, TEXT_KEYS, RecipeError, canonical, memory_unit
from dsa_kvcalc.values import nested_mapping


def set_override(raw: dict, assignment: str) -> None:
    """--set key=value: the value as YAML reads it; dotted keys reach into the nested mappings. null restores the
    default."""
    path, equals, text = assignment.partition("=")
    if not equals:
        raise RecipeError("--set", f"expected key=value, got {assignment!r}")
    name = f"--set {path.strip()}"
    if not text.strip():
        raise RecipeError(name, "no value (null restores the default)")
    try:
        text.encode()
        value = yaml.load(text, Loader=RecipeLoader)
    except UnicodeEncodeError:  # bytes that are not UTF-8 on the command line
        raise RecipeError(name, "the value is not UTF-8 text") from None
    except RecipeError as error:  # a mapping with a key given twice
        raise RecipeError(name, str(error)) from None
    except (yaml.YAMLError, RecursionError):
        value = text  # not YAML: the text itself, which the key's check then judges
    set_value(raw, path, as_written(path, text, value))


def as_written(key: str, text: str, value):
    """A version key keeps the text written where YAML reads a number: vllm-version=0.30 is not 0.3."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return text.strip() if number and canonical(key.strip()) in TEXT_KEYS else value


def set_value(raw: dict, path: str, value) -> None:
    """Put a value at a dotted key. The mappings on the way are copied: a shallow copy of raw is enough to leave
    the original untouched (sweep applies each point this way)."""
    top, *inner = [part.strip() for part in path.strip().split(".")]
    if not top or not all(inner):
        raise RecipeError("--set", f"no key name in {path.strip()!r}")
    written = next((k for k in raw if isinstance(k, str) and canonical(k) == canonical(top)), top)
    if not inner:
        raw[written] = value
        return
    if canonical(top) in BY_NAME:  # an unknown key is reported, with a suggestion, when the recipe is read
        raise RecipeError(path, f"{top} has no nested keys")
    node = raw[written] = dict(nested_mapping(top, raw.get(written) or {}))
    if top == "memory":
        drop_other_unit(node, path, inner)
    *parents, last = inner
    for part in parents:
        child = node.get(part)
        if child is not None and not isinstance(child, dict):
            raise RecipeError(path, f"{top}.{part} is {child!r}, not a mapping: set {top}.{part} instead")
        node[part] = node = dict(child or {})
    node[last] = value


def drop_other_unit(memory: dict, path: str, inner: list[str]) -> None:
    """One unit per term: weights_gib replaces weights_bytes; a backend's figure must take the term's unit."""
    term = memory_unit(inner[0])[0]
    for other in [k for k in memory if k != inner[0] and memory_unit(str(k))[0] == term]:
        if len(inner) > 1:
            where = ".".join(["memory", other, *inner[1:]])
            raise RecipeError(path, f"the recipe gives {term} as {other}: set {where}")
        del memory[other]
