"""The input boundary: every file dsa-kvcalc reads (a recipe, a vLLM log, a config.json) is read here, up to its
reader's limit, if it is a regular file or a pipe (`plan <(...)`; a FIFO opens without waiting for its writer). A
recipe's YAML is read by PyYAML's safe loader, stricter: a key given twice is an error, a key is the name written
(`yes:` is "yes"), a version the text written (0.30 is not 0.3), and aliases expand to no more than a recipe holds (a
"billion laughs" file). Every refusal is one RecipeError or Unreadable; values.py then checks each value."""

import os
import stat
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError

from dsa_kvcalc.keys import TEXT_KEYS, RecipeError, canonical, shown
from dsa_kvcalc.units import MIB

RECIPE_MAX_BYTES = 1 << 20  # a recipe is a few hundred bytes; anything this large is not one
PIPES_READ: dict[str, bytes] = {}  # a pipe gives its bytes once: a command that reads its recipe twice gets them here


class Unreadable(Exception):
    """A file that is not read; str() is one line: the file and why."""


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """The whole of a regular file or a pipe, of at most limit bytes."""
    if str(path) in PIPES_READ:
        return PIPES_READ[str(path)]
    try:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as file:
            mode = os.fstat(file.fileno()).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                raise Unreadable(f"{path} is not a regular file or a pipe")
            os.set_blocking(file.fileno(), True)
            data = file.read(limit + 1)
    except OSError as error:
        raise Unreadable(f"cannot read {path}: {error.strerror}") from None
    if len(data) > limit:
        raise Unreadable(f"{path} is over {limit // MIB} MiB: not a {what}")
    if stat.S_ISFIFO(mode):
        PIPES_READ[str(path)] = data
    return data


# A recipe's YAML -------------------------------------------------------------------------------------------------

def expanded_size(node, sizes: dict) -> int:
    """What a YAML node holds with its aliases expanded: nodes plus scalar characters."""
    if id(node) not in sizes:
        sizes[id(node)] = 0  # a node that holds itself counts once
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else \
            node.value if isinstance(node, yaml.SequenceNode) else []
        sizes[id(node)] = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0) + sum(
            expanded_size(child, sizes) for child in children)
    return sizes[id(node)]


def as_text(node: yaml.ScalarNode) -> yaml.ScalarNode:
    """A copy of a scalar read as the text written (a copy: an anchored node is shared with its aliases)."""
    return yaml.ScalarNode("tag:yaml.org,2002:str", node.value, node.start_mark, node.end_mark, node.style)


class RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, as strict as the contract above says."""

    def __init__(self, stream):
        super().__init__(stream)
        self.paths = {}  # id(a mapping node) -> its dotted key, to name a key given twice inside it

    def construct_document(self, node):
        if expanded_size(node, {}) > RECIPE_MAX_BYTES:
            raise ConstructorError(None, None, "its aliases expand to more than a recipe holds", node.start_mark)
        return super().construct_document(node)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except ValueError as error:  # a date such as 2001-13-45, a number of over 4,300 digits
            raise ConstructorError(None, None, str(error), node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        self.flatten_mapping(node)  # <<: merges first, so that merged keys are checked too
        parent, names, pairs = self.paths.get(id(node)), set(), []
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):  # a key is a name as written: `yes:` is "yes", not True
                key_node = as_text(key_node)
            name = self.construct_object(key_node, deep=True)
            path = f"{parent}.{shown(name)}" if parent else shown(name)
            if isinstance(name, str) and name in names:
                raise RecipeError(path, f"given twice (line {key_node.start_mark.line + 1}): YAML would keep the last")
            names.add(name if isinstance(name, str) else None)
            if isinstance(value_node, yaml.MappingNode):
                self.paths[id(value_node)] = path
            if (isinstance(name, str) and canonical(name) in TEXT_KEYS and isinstance(value_node, yaml.ScalarNode)
                    and value_node.tag.endswith((":float", ":int"))):
                value_node = as_text(value_node)
            pairs.append((key_node, value_node))
        node.value = pairs
        return super().construct_mapping(node, deep)


def read_text(path: Path) -> str:
    try:
        data = read_bytes(path, RECIPE_MAX_BYTES, "recipe")
    except Unreadable as error:
        raise RecipeError("recipe", str(error)) from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise RecipeError("recipe", f"{path} is not UTF-8 text") from None


def yaml_mapping(text: str, path: Path) -> dict:
    try:
        raw = yaml.load(text, Loader=RecipeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or getattr(error, "reason", None) or "invalid YAML"
        raise RecipeError("recipe", f"YAML error in {path}{where}: {problem}") from None
    except RecursionError:
        raise RecipeError("recipe", f"{path} nests too deeply") from None
    if not isinstance(raw, dict | None):
        raise RecipeError("recipe", f"{path} must hold a mapping of keys to values")
    return raw or {}
