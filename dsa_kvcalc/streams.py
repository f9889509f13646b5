"""stdout and stderr as every command writes them, set up once by cli.main.

stdout carries a command's product: when it cannot take the text (closed, full, a reader gone, an I/O error), the
write raises StreamError, which main turns into one line and exit 2 (exit 1 without a word when the reader went
away, as under `| head`). stderr carries what is said about the product: when it cannot take the text, the text is
lost and nothing else changes, so an exit code always says how the command went. Text that a stream's encoding
cannot hold (a non-ASCII model name under LC_ALL=C) is written with backslash escapes; figures are ASCII anyway.
Consoles are as wide as the terminal, held between MIN_COLUMNS and MAX_COLUMNS: a width of 0 or 1 would print
nothing or a character a line, and no figure is wider than MIN_COLUMNS.
"""

import errno
import os
from contextlib import suppress

MIN_COLUMNS = 40
MAX_COLUMNS = 1000


class StreamError(Exception):
    """stdout cannot take the command's output; str() is one line."""

    def __init__(self, error: OSError | None):
        reason = "it is closed" if error is None else error.strerror or str(error)
        super().__init__(f"stdout: cannot write: {reason}")
        self.reader_gone = error is not None and error.errno == errno.EPIPE


def silence(stream) -> None:
    """Point a failed stream's descriptor at /dev/null, so that what it still buffers goes nowhere at exit instead of
    failing again there."""
    with suppress(OSError, ValueError, AttributeError):  # not backed by a descriptor (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class Stream:
    """A text stream (sys.stdout or sys.stderr; None when the process started with it closed) as the commands write
    it. Once a write fails (on a closed stream, the first that writes anything), nothing more is written: on stdout
    every later write raises the same StreamError (a caller that swallows one cannot hide it), on stderr the text is
    dropped. Only what rich and click ask of a stream is offered: no binary buffer to write past these checks."""

    def __init__(self, stream, product: bool):
        self.stream = stream
        self.product = product  # stdout: a failure is the command's; stderr: the text is lost
        self.failure: StreamError | None = None  # a closed stream fails at its first write, not before
        self.wrote = False  # flushing a stream never written to (closed, say) is no failure

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        with suppress(OSError, ValueError, AttributeError):
            return self.stream.isatty()
        return False

    def fileno(self) -> int:
        if self.stream is None:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        return self.stream.fileno()

    def write(self, text: str) -> int:
        """Write and flush: a failure shows at the write that met it, before anything else is said."""
        self.put([text])
        self.flush()
        return len(text)

    def writelines(self, texts) -> None:
        """Write them all, then flush (a full buffer flushes on the way)."""
        self.put(texts)
        self.flush()

    def put(self, texts) -> None:
        for text in texts:
            if text == "":  # click's probe of what kind of stream this is
                continue
            if self.stream is None and self.failure is None:
                self.failure = StreamError(None)
            if self.failure is None:
                self.wrote = True
                try:
                    try:
                        self.stream.write(text)
                    except UnicodeEncodeError:
                        self.stream.write(text.encode(self.encoding, "backslashreplace").decode(self.encoding))
                except (OSError, ValueError) as error:  # ValueError: a stream closed while the command ran
                    self.failed(error)
            if self.failure is not None and self.product:
                raise self.failure

    def flush(self) -> None:
        if self.failure is None and self.wrote:
            try:
                self.stream.flush()
            except (OSError, ValueError) as error:
                self.failed(error)
        if self.failure is not None and self.product:
            raise self.failure

    def failed(self, error: OSError | ValueError) -> None:
        self.failure = StreamError(error if isinstance(error, OSError) else None)
        silence(self.stream)


def console(stderr: bool = False):
    """A rich console on stdout (or stderr) as wide as the terminal, within MIN_COLUMNS and MAX_COLUMNS."""
    from rich.console import Console

    found = Console(highlight=False, stderr=stderr)
    found.width = min(max(found.width, MIN_COLUMNS), MAX_COLUMNS)
    return found


def printable(text: str) -> str:
    """text with each character that is not printable (a newline or an escape in a file name, half of a UTF-16 pair)
    written as Python escapes it: one line, whatever it holds."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)
