"""Writing a command's output (--output, --plot). Nothing is written unless asked. Then it is written atomically, and
never over an input, a link, a device or a file's permissions.

A regular file (or a new one) is written to a hidden temporary file beside it, synced and renamed over it, keeping
its permission bits and owner; a file this user may not write, or whose owner it cannot keep, is refused. A link is
followed and its final target written that way; the link stays. A device, FIFO, socket or open descriptor
(/dev/full, /dev/stdout, a shell's /dev/fd/N) is written in place, never replaced; a FIFO that no reader opens within
FIFO_WAIT_SECONDS is refused rather than waited on for ever.
"""

import errno
import os
import signal
import stat
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FIFO_WAIT_SECONDS = 2  # for the reader of `dsa-kvcalc ... -o fifo & reader < fifo`, which may open it second


class OutputError(Exception):
    """An output that cannot or must not be written; str() is one line, "OPTION: PROBLEM"."""

    def __init__(self, option: str, problem: str):
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


def via_descriptor(path: Path) -> bool:
    """Whether path reaches its file through an open descriptor's link (/dev/stdout, /dev/fd/N, /proc/self/fd/N),
    which is written in place, as the shell opened it (appending with >>, say)."""
    path = os.path.abspath(path)
    while os.path.islink(path):
        folder = os.path.realpath(os.path.dirname(path))
        if folder.startswith("/proc/") and folder.endswith("/fd"):
            return True
        path = os.path.join(folder, os.readlink(path))
    return False


def locate(target: Path, option: str) -> tuple[Path, os.stat_result | None, bool]:
    """Where a write to target lands (links followed), its status (None for a new file), and whether it is written
    in place rather than replaced. Raises OutputError when it cannot be written."""
    try:
        status = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        status = None
    except OSError as error:
        raise OutputError(option, f"cannot write {target}: {error.strerror}") from None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise OutputError(option, f"{target} is a folder")
        if not stat.S_ISREG(status.st_mode) or via_descriptor(target):
            return target, status, True
    final = Path(os.path.realpath(target))
    folder = final.parent
    cannot = f"cannot write {target}"
    if not folder.is_dir():
        if folder.exists():
            raise OutputError(option, f"{cannot}: {os.strerror(errno.ENOTDIR)} ({folder} is not a folder)")
        raise OutputError(option, f"{cannot}: {os.strerror(errno.ENOENT)} (folder {folder} does not exist)")
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=True):
        raise OutputError(option, f"{cannot}: {os.strerror(errno.EACCES)} (folder {folder} is not writable)")
    if status is not None and not os.access(final, os.W_OK, effective_ids=True):
        raise OutputError(option, f"{cannot}: {os.strerror(errno.EACCES)} (the file is not writable)")
    return final, status, False


def check_targets(targets: dict[str, Path | None], inputs: list[Path]) -> None:
    """targets: option name -> path (None = not asked). Raises OutputError for the first bad one: its folder missing
    or not writable, a folder itself, an input of the command, or the target of another option."""
    read = set()
    for path in inputs:
        with suppress(OSError):  # an input that is not a file ("-" for stdin) cannot be overwritten
            status = os.stat(path)
            read.add((status.st_dev, status.st_ino))
    written = {}
    for option, target in targets.items():
        if target is None:
            continue
        final, status, _ = locate(target, option)
        key = (status.st_dev, status.st_ino) if status else str(final)  # links and hard links are the same file
        if key in read:
            raise OutputError(option, f"{target} is an input of this command; refusing to overwrite it")
        if key in written:
            raise OutputError(option, f"{target} is also the target of {written[key]}; refusing to write it twice")
        written[key] = option


def open_in_place(final: Path, status: os.stat_result) -> int:
    """A descriptor that appends to a device, FIFO or socket. Opening a FIFO without a reader fails (ENXIO) instead of
    blocking: it is tried again until one comes, for FIFO_WAIT_SECONDS."""
    deadline = time.monotonic() + FIFO_WAIT_SECONDS
    while True:
        try:
            descriptor = os.open(final, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO or not stat.S_ISFIFO(status.st_mode) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
            continue
        os.set_blocking(descriptor, True)
        return descriptor


@contextmanager
def temporary_beside(final: Path):
    """A hidden temporary file in final's folder, as (handle, name). It is removed when the block fails, and when
    SIGTERM, SIGINT or SIGHUP arrives, which then exits with 128 + the signal's number; the previous handlers come
    back afterwards."""
    names = []

    def remove():
        for name in names:
            with suppress(FileNotFoundError):
                os.unlink(name)

    def stop(signum, frame):
        remove()
        raise SystemExit(128 + signum)

    previous = {signum: signal.signal(signum, stop) for signum in SIGNALS}
    try:
        handle, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
        names.append(name)
        yield handle, name
    except BaseException:
        remove()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def write(chunks, target: Path, option: str = "--output", binary: bool = False) -> None:
    """chunks: an iterable of str (or bytes when binary), streamed (memory stays flat for huge sweeps).
    Regular/new file: temp file in the same folder (hidden name starting with '.'), fsync, os.replace; mode/owner kept.
    Device/FIFO/socket/pipe: written directly. Raises OutputError(option, ...) with the OS reason on failure,
    leaving an existing target untouched and no temp file behind."""
    final, status, in_place = locate(target, option)
    mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    try:
        if in_place:
            with os.fdopen(open_in_place(final, status), mode, encoding=encoding) as file:
                file.writelines(chunks)
            return
        with temporary_beside(final) as (handle, name):
            with os.fdopen(handle, mode, encoding=encoding) as file:
                if status is None:
                    umask = os.umask(0)
                    os.umask(umask)
                    os.fchmod(handle, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
                else:
                    try:
                        os.fchown(handle, status.st_uid, status.st_gid)
                    except PermissionError:  # only root may give a file away: replacing it would change its owner
                        raise OutputError(option, f"cannot write {target}: it belongs to another user or group; "
                                                  f"replacing it would change its owner") from None
                    os.fchmod(handle, stat.S_IMODE(status.st_mode))  # after fchown, which clears setuid bits
                file.writelines(chunks)
                file.flush()
                os.fsync(handle)
            os.replace(name, final)
    except OSError as error:
        unread_fifo = error.errno == errno.ENXIO and status is not None and stat.S_ISFIFO(status.st_mode)
        reason = "no process reads this FIFO" if unread_fifo else error.strerror or error
        raise OutputError(option, f"cannot write {target}: {reason}") from None
