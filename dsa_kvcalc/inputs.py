"""Every file dsa-kvcalc reads (a recipe, a vLLM log, a local config.json) is read here, and only here.

The contract: a file is read only if it is a regular file. A device, FIFO, socket or folder is refused at once:
opening never waits, so a FIFO without a writer cannot hang a command, and /dev/zero cannot feed one for ever. At
most a reader's limit of bytes is read, whatever the file's size claims: a larger file is refused, and so is one
that grows past the limit while it is read. So how long a read takes is bounded by the limit too. Past this
module, readers trust what they get: at most `limit` bytes of a regular file.
"""

import io
import os
import stat
from contextlib import contextmanager, suppress
from pathlib import Path

from dsa_kvcalc.units import MIB

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
