"""The input boundary: every file dsa-kvcalc reads (a recipe, a vLLM log, a local config.json) is read here, and a
recipe's text is parsed here, and only here.

The contract for files: a file is read only if it is a regular file. A device, FIFO, socket or folder is refused at
once: opening never waits, so a FIFO without a writer cannot hang a command, and /dev/zero cannot feed one for ever. At
most a reader's limit of bytes is read, whatever the file's size claims: a larger file is refused, and so is one
that grows past the limit while it is read. So how long a read takes is bounded by the limit too.

The contract for a recipe's YAML (a file, or a --set or --vary value): at most RECIPE_MAX_BYTES of UTF-8, read by
PyYAML's safe loader made stricter where a recipe needs it. A key given twice is an error (YAML would keep the last), a
key is the name written (`yes:` is "yes"), a version is the text written (0.30 is not 0.3), a number has at most 100
digits, a string has no half of a UTF-16 pair, and aliases expand to no more than a recipe holds (a "billion laughs"
file would otherwise take all memory as soon as a value is printed). Every refusal is one RecipeError or Unreadable.

Past this module, readers trust what they get: at most `limit` bytes of a regular file; a recipe as a mapping of
plain values, which values.py then checks key by key against the declarations (keys.py), once. Inside, code trusts
the Recipe that recipe.load() returns.
"""

import io
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path

import yaml
from yaml.constructor import ConstructorError

from dsa_kvcalc.keys import TEXT_KEYS, RecipeError, canonical, shown
from dsa_kvcalc.units import MIB

RECIPE_MAX_BYTES = 1 << 20  # a recipe is a few hundred bytes; anything this large is not one

KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device", stat.S_IFIFO: "a FIFO",
         stat.S_IFSOCK: "a socket"}


class Unreadable(Exception):
    """A file that is not read; str() is one line: the file and why."""


@contextmanager
def regular_file(path: Path, limit: int, what: str):
    """path opened for reading in binary, once it is known to be a regular file of at most limit bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)  # a FIFO opens without its writer
    except FileNotFoundError:
        raise Unreadable(f"cannot read {path}: no such file") from None
    except OSError as error:
        raise not_opened(path, error) from None
    status = os.fstat(descriptor)
    problem = refusal(path, status, limit, what)
    if problem is not None:
        os.close(descriptor)
        raise problem
    with os.fdopen(descriptor, "rb") as file:
        try:
            yield file
        except OSError as error:
            raise Unreadable(f"cannot read {path}: {error.strerror or error}") from None


def not_opened(path: Path, error: OSError) -> Unreadable:
    """Why path did not open: what it is when it is no regular file (a socket opens for nobody), else the OS's
    reason."""
    with suppress(OSError):
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            return not_regular(path, mode)
    return Unreadable(f"cannot read {path}: {error.strerror or error}")


def refusal(path: Path, status: os.stat_result, limit: int, what: str) -> Unreadable | None:
    """Why a file of this status is not read, if it is not."""
    if not stat.S_ISREG(status.st_mode):
        return not_regular(path, status.st_mode)
    if status.st_size > limit:
        return too_large(path, limit, what)
    return None


def not_regular(path: Path, mode: int) -> Unreadable:
    return Unreadable(f"{path} is {KINDS.get(stat.S_IFMT(mode), 'a special file')}, not a regular file")


def too_large(path: Path, limit: int, what: str) -> Unreadable:
    return Unreadable(f"{path} is over {limit // MIB} MiB: not a {what}")


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """The whole file, of at most limit bytes."""
    with regular_file(path, limit, what) as file:
        data = file.read(limit + 1)
    if len(data) > limit:
        raise too_large(path, limit, what)
    return data


def read_lines(path: Path, limit: int, what: str, line_limit: int):
    """The file's lines as text (bytes that are not UTF-8 replaced; any newline convention), read one by one, so
    that memory stays flat; a line of over line_limit characters comes in pieces."""
    with regular_file(path, limit, what) as file:
        text = io.TextIOWrapper(file, encoding="utf-8", errors="replace")
        for line in iter(lambda: text.readline(line_limit), ""):
            if file.tell() > limit:  # it grew while being read
                raise too_large(path, limit, what)
            yield line


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
        if node.tag == "tag:yaml.org,2002:int" and len(node.value) > 100:
            raise ConstructorError(None, None, f"a number of {len(node.value)} digits", node.start_mark)
        try:
            value = super().construct_object(node, deep)
            if isinstance(value, str):
                value.encode()
            return value
        except UnicodeEncodeError:  # "\ud800": half a UTF-16 pair, which no output can print
            raise ConstructorError(None, None, "an escape such as \\ud800 that is half a character",
                                   node.start_mark) from None
        except ValueError as error:  # a date such as 2001-13-45
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
                mark = key_node.start_mark
                raise RecipeError(path, f"given twice (line {mark.line + 1}): YAML would keep the last")
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


def read_yaml(path: Path) -> dict:
    return yaml_mapping(read_text(path), path)


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
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RecipeError("recipe", f"{path} must hold a mapping of keys to values")
    return raw
