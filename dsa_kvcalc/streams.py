"""stdout and stderr as every command writes them: one handler (run) for a stdout that cannot take the output, exit 1
without a word when its reader went away (`| head`), else one line and exit 2 (closed, full); every message on stderr
one line of at most MAX_LINE_CHARS; consoles as wide as the terminal, and at least 40 columns.
"""

import errno
import os
import sys
from contextlib import suppress

MAX_LINE_CHARS = 300  # a message quoting a 5,000-digit value is cut short


def run(command) -> int:
    """command()'s exit code. Text stdout's encoding cannot hold is written with backslash escapes."""
    if sys.stdout is None:  # started with stdout closed (>&-): descriptor 1 opened for reading, so writes fail
        sys.stdout = open(os.open(os.devnull, os.O_RDONLY), "w")
    sys.stdout.reconfigure(errors="backslashreplace")
    try:
        code = command()
        sys.stdout.flush()
        return code
    except OSError as error:  # the files read and written raise errors of their own: this is stdout's
        if error.errno != errno.EPIPE:
            say(f"error: stdout: cannot write: {error.strerror or error}")
        with suppress(OSError):  # Python flushes stdout again at exit: let that go nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1 if error.errno == errno.EPIPE else 2


def say(text: str) -> None:
    """text on stderr as one line: each character that is not printable (a newline in a file name) written as Python
    escapes it, and the line cut at MAX_LINE_CHARS."""
    line = "".join(char if char.isprintable() else repr(char)[1:-1] for char in text[:MAX_LINE_CHARS + 1])
    sys.stderr.write((line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 3] + "...") + "\n")


def console(stderr: bool = False):
    """A rich console on stdout (or stderr) as wide as the terminal, and at least 40 columns: no figure is wider."""
    from rich.console import Console

    found = Console(highlight=False, stderr=stderr)
    found.width = max(found.width, 40)
    return found
