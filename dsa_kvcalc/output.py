"""Writing a command's output (--output, --plot). Nothing is written unless asked. Then it is written whole or not at
all, and never over an input, a link, a device or what a file carries besides its content.

The files one command writes land together (Outputs): each is written in full to a hidden temporary beside it (a
name that fits the file-name limit), synced, and only when every one is ready are they renamed over their targets.
A temporary keeps the permission bits, owner, ACLs and extended attributes of the file it replaces; a file whose
owner it cannot keep is refused, and one whose ACLs or attributes it cannot all carry is written in place instead,
once the temporary holds all of it. A failure, or any terminating signal a process may catch (TERMINATING), removes
the temporaries and leaves every target as it was. A link is followed and its final target written that way; the
link stays. A device, FIFO, socket or open descriptor (/dev/full, /dev/stdout, a shell's /dev/fd/N) is written in
place at once, never replaced; a FIFO that no reader opens within FIFO_WAIT_SECONDS is refused rather than waited on
for ever.
"""

import errno
import os
import shutil
import signal
import stat
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

# Every signal whose default action ends the process and that a process may catch. Faults (SIGSEGV, SIGBUS, SIGFPE,
# SIGILL) are left alone: a handler returning from one would run the faulting instruction again.
NOT_TERMINATING = {"SIGKILL", "SIGSTOP", "SIGCHLD", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGWINCH",
                   "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL"}
TERMINATING = frozenset(signal.valid_signals()) - {getattr(signal, name) for name in NOT_TERMINATING
                                                   if hasattr(signal, name)}
FIFO_WAIT_SECONDS = 2  # for the reader of `dsa-kvcalc ... -o fifo & reader < fifo`, which may open it second
TEMPORARY_EXTRA = len("..") + 8 + len(".tmp")  # what mkstemp's name adds to the target's: dots, 8 letters, suffix


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


def may_keep_owner(status: os.stat_result) -> bool:
    """Whether a new file of this user can be given the owner and group of a file of this status."""
    same_group = status.st_gid == os.getegid() or status.st_gid in os.getgroups()
    return os.geteuid() == 0 or (status.st_uid == os.geteuid() and same_group)


def locate(target: Path, option: str) -> tuple[Path, os.stat_result | None, bool]:
    """Where a write to target lands (links followed), its status (None for a new file), and whether it is written
    in place rather than replaced. Raises OutputError when it cannot be written."""
    cannot = f"cannot write {target}"
    try:
        status = os.stat(target)
    except (FileNotFoundError, NotADirectoryError):
        status = None
    except OSError as error:
        raise OutputError(option, f"{cannot}: {error.strerror}") from None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise OutputError(option, f"{target} is a folder")
        if not stat.S_ISREG(status.st_mode) or via_descriptor(target):
            return target, status, True
    try:
        final = Path(os.path.realpath(target))
    except FileNotFoundError:  # a relative target, and the working folder was removed
        raise OutputError(option, f"{cannot}: the working folder no longer exists") from None
    folder = final.parent
    if not folder.is_dir():
        if folder.exists():
            raise OutputError(option, f"{cannot}: {os.strerror(errno.ENOTDIR)} ({folder} is not a folder)")
        raise OutputError(option, f"{cannot}: {os.strerror(errno.ENOENT)} (folder {folder} does not exist)")
    if not os.access(folder, os.W_OK | os.X_OK, effective_ids=True):
        raise OutputError(option, f"{cannot}: {os.strerror(errno.EACCES)} (folder {folder} is not writable)")
    if status is not None and not os.access(final, os.W_OK, effective_ids=True):
        raise OutputError(option, f"{cannot}: {os.strerror(errno.EACCES)} (the file is not writable)")
    if status is not None and not may_keep_owner(status):
        raise OutputError(option, f"{cannot}: it belongs to another user or group; replacing it would change its "
                                  f"owner")
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


def temporary_affixes(final: Path) -> tuple[str, str]:
    """mkstemp's prefix and suffix for a hidden temporary beside final, its name within the folder's file-name
    limit: the target's name is shortened (in bytes, as the limit counts them) where it would not fit."""
    try:
        limit = os.pathconf(final.parent, "PC_NAME_MAX")
    except OSError:
        limit = 255
    name = os.fsdecode(os.fsencode(final.name)[:limit - TEMPORARY_EXTRA])
    return f".{name}.", ".tmp"


def attributes(path) -> dict[str, bytes]:
    """A file's extended attributes (its ACLs among them: system.posix_acl_access), by name; path may be a
    descriptor. None on a file system without them."""
    try:
        return {name: os.getxattr(path, name) for name in os.listxattr(path)}
    except OSError as error:
        if error.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise


def copy_attributes(source: Path, descriptor: int) -> bool:
    """Give the temporary the extended attributes of the file it replaces, and only those (a folder's default ACL
    gives a new file one of its own). False when some cannot be set or removed (security.* and trusted.* need
    privileges): the file is then written in place."""
    try:
        wanted, found = attributes(source), attributes(descriptor)
        for name in found.keys() - wanted.keys():
            os.removexattr(descriptor, name)
        for name, value in wanted.items():
            if found.get(name) != value:
                os.setxattr(descriptor, name, value)
    except OSError:
        return False
    return True


def copy_into(temporary: str, final: Path) -> None:
    """The temporary's content written over final's, in place: final keeps its inode and all it carries."""
    with open(temporary, "rb") as source, open(final, "r+b") as target:
        shutil.copyfileobj(source, target)
        target.truncate()
        target.flush()
        os.fsync(target.fileno())


@dataclass
class Replacement:
    temporary: str
    final: Path
    target: Path  # as the user named it
    option: str
    in_place: bool = False  # final's attributes do not all carry over: its content is copied over it instead


class Outputs:
    """The files one command writes, all or none: write() puts each in its temporary, commit() puts them all in
    place, discard() removes the temporaries, and so does stop(), the handler of TERMINATING signals. Devices, FIFOs
    and descriptors are written at once."""

    def __init__(self):
        self.replacements: list[Replacement] = []
        self.holding = False  # a signal waits: a temporary is being registered, or the targets replaced
        self.arrived: int | None = None

    def stop(self, signum: int, frame) -> None:
        if self.holding:
            self.arrived = signum
            return
        self.discard()
        raise SystemExit(128 + signum)

    @contextmanager
    def held(self):
        """A signal that arrives in the block is handled when it ends (Python runs handlers in the main thread, so
        a flag holds them whatever thread the signal reached)."""
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.arrived is not None:
            self.stop(self.arrived, None)

    def write(self, chunks, target: Path, option: str = "--output", binary: bool = False) -> None:
        """chunks: an iterable of str (or bytes when binary), streamed (memory stays flat for huge sweeps). Raises
        OutputError(option, ...) with the OS reason on failure."""
        final, status, in_place = locate(target, option)
        mode, encoding = ("wb", None) if binary else ("w", "utf-8")
        try:
            if in_place:
                with os.fdopen(open_in_place(final, status), mode, encoding=encoding) as file:
                    file.writelines(chunks)
                return
            prefix, suffix = temporary_affixes(final)
            with self.held():  # a signal before the append would leave a temporary that discard() does not know
                descriptor, name = tempfile.mkstemp(dir=final.parent, prefix=prefix, suffix=suffix)
                replacement = Replacement(name, final, target, option)
                self.replacements.append(replacement)
            with os.fdopen(descriptor, mode, encoding=encoding) as file:
                file.writelines(chunks)
                file.flush()
                replacement.in_place = not keep_metadata(descriptor, final, status)
                os.fsync(descriptor)
        except OSError as error:
            unread_fifo = error.errno == errno.ENXIO and status is not None and stat.S_ISFIFO(status.st_mode)
            reason = "no process reads this FIFO" if unread_fifo else error.strerror or error
            raise OutputError(option, f"cannot write {target}: {reason}") from None

    def commit(self) -> None:
        with self.held():
            while self.replacements:
                replacement = self.replacements[0]
                try:
                    if replacement.in_place:
                        copy_into(replacement.temporary, replacement.final)
                        os.unlink(replacement.temporary)
                    else:
                        os.replace(replacement.temporary, replacement.final)
                except OSError as error:
                    raise OutputError(replacement.option, f"cannot write {replacement.target}: "
                                                          f"{error.strerror or error}") from None
                self.replacements.pop(0)

    def discard(self) -> None:
        for replacement in self.replacements:
            with suppress(FileNotFoundError):
                os.unlink(replacement.temporary)
        self.replacements.clear()


def keep_metadata(descriptor: int, final: Path, status: os.stat_result | None) -> bool:
    """The temporary's mode as open() would create it (a new file), or the replaced file's owner, mode, ACLs and
    extended attributes; False when those last do not all carry over."""
    if status is None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(descriptor, 0o666 & ~umask)  # as open() would create it, not mkstemp's 0600
        return True
    os.fchown(descriptor, status.st_uid, status.st_gid)
    os.fchmod(descriptor, stat.S_IMODE(status.st_mode))  # after fchown, which clears setuid bits
    return copy_attributes(final, descriptor)


@contextmanager
def outputs():
    """An Outputs whose files are committed when the block ends, and discarded when it fails or a TERMINATING
    signal arrives, which then exits with 128 + its number. Signals the process ignores (under nohup, say) stay
    ignored; the previous handlers come back afterwards."""
    files = Outputs()
    previous = {signum: signal.signal(signum, files.stop) for signum in TERMINATING
                if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler)}
    try:
        yield files
        files.commit()
    except BaseException:
        files.discard()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def write(chunks, target: Path, option: str = "--output", binary: bool = False) -> None:
    """One output, written as Outputs writes it and committed at once."""
    with outputs() as files:
        files.write(chunks, target, option, binary)
