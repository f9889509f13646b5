"""Writing a command's output (--output, --plot): nothing unless asked, then whole or not at all. The files of one
command land together: each is written to a hidden temporary beside its target (a link's target: the link stays),
then all are renamed over their targets; a failure, Ctrl-C or SIGTERM removes them and leaves every target as it was.
A replaced file keeps its mode. A target that is no regular file (/dev/null, /dev/stdout, a FIFO) is written in place.
"""

import os
import signal
import stat
import sys
from contextlib import contextmanager, suppress
from pathlib import Path


class OutputError(Exception):
    """An output that cannot or must not be written; str() is one line, "OPTION: PROBLEM"."""

    def __init__(self, option: str, problem: str):
        super().__init__(f"{option}: {problem}")


def check_targets(targets: dict[str, Path | None], inputs: list[Path]) -> None:
    """Before any work: no target (option -> path; None: not asked) is an input of the command (`plan R -o R`)."""
    for option, target in targets.items():
        if target is not None and os.path.exists(target) and any(
                os.path.exists(path) and os.path.samefile(target, path) for path in inputs):
            raise OutputError(option, f"{target} is an input of this command; refusing to overwrite it")


class Outputs:
    """The files one command writes: write() puts each in its temporary; outputs() renames or removes them."""

    def __init__(self):
        self.temporaries: list[tuple[str, str, str]] = []  # (temporary, final, option)

    def write(self, chunks, target: Path, option: str = "--output", binary: bool = False) -> None:
        """chunks: str (bytes when binary), streamed. Raises OutputError(option, ...) with the OS's reason."""
        mode, text = ("b", {}) if binary else ("", {"encoding": "utf-8", "errors": "backslashreplace"})
        try:
            if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
                with open(target, "w" + mode, **text) as file:
                    file.writelines(chunks)
                return
            final = os.path.realpath(target)
            temporary = os.path.join(os.path.dirname(final), f".{os.path.basename(final)[:50]}.{os.getpid()}.tmp")
            with open(temporary, "x" + mode, **text) as file:
                self.temporaries.append((temporary, final, option))
                if os.path.exists(final):
                    os.chmod(temporary, stat.S_IMODE(os.stat(final).st_mode))
                file.writelines(chunks)
        except OSError as error:
            raise OutputError(option, f"cannot write {target}: {error.strerror}") from None


@contextmanager
def outputs():
    """An Outputs whose files replace their targets when the block ends, and are removed when it fails, on Ctrl-C, or
    on SIGTERM (which then exits with 128 + its number)."""
    files = Outputs()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield files
        for temporary, final, option in files.temporaries:
            try:
                os.replace(temporary, final)
            except OSError as error:
                raise OutputError(option, f"cannot write {final}: {error.strerror}") from None
    except BaseException:
        for temporary, _, _ in files.temporaries:
            with suppress(FileNotFoundError):  # already in place
                os.unlink(temporary)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def write(chunks, target: Path, option: str = "--output", binary: bool = False) -> None:
    """One output, written as Outputs writes it."""
    with outputs() as files:
        files.write(chunks, target, option, binary)
