"""Rendering for people: tables, markdown, CSV, text. No arithmetic beyond unit conversion for display."""

import json
import re
import textwrap

from dsa_kvcalc.units import GIB

HEADER_WORD_MAX = 12  # a longer word of a header (a dotted recipe key) may fold; a figure never does
PROSE_MIN = 24  # a column of prose narrower than this reads worse than the narrow layout
CONTINUED = 4  # a folded line's continuations are indented this much more than it
# A word that is a number (1,049,088, 95.00, +10.5%, >152, (-4,414,242) followed by a space and another word: that
# space does not break, so that a number keeps its unit ("6 B", "95.00 GiB", "39.15 requests").
NUMBER_THEN_WORD = re.compile(r"(?:(?<=\s)|^)([(\[~+\-<>=]*\d(?:[\d,.]*\d)?%?) (?=\S)", re.MULTILINE)
GLUE = "\u00a0"  # textwrap breaks at ASCII whitespace only


def json_text(document, indent: int | None = 2) -> str:
    """Every JSON the tool prints: a plan, a report, a sweep row (indent None: one line); a value JSON has no type
    for (a date YAML read, a path) as its text."""
    return json.dumps(document, indent=indent, default=str) + "\n"


def gib(value: int) -> str:
    """Bytes as GiB with two decimals, the way vLLM prints them."""
    return f"{value / GIB:.2f}"


def table_width(widths: list[int]) -> int:
    """How wide print_table's rich Table is with these column widths: no outer edge, a space each side of every
    inner rule."""
    return sum(widths) + 3 * len(widths) - 3


def longest(texts, split=lambda text: [text]) -> int:
    return max((len(word) for text in texts for word in split(text)), default=1)


def words(text: str) -> list[str]:
    """What fold() keeps whole: the words, a number and the word after it as one."""
    return [word for word in NUMBER_THEN_WORD.sub(lambda m: m[1] + GLUE, text).split(" ") if word]


def least_widths(header: list[str], rows: list[list[str]], prose=()) -> list[int]:
    """Per column, the narrowest width that cuts no figure and folds no short header word: its widest cell (a prose
    column: its longest word, a number with its unit, and PROSE_MIN unless all of it is shorter), and at least its
    header's longest word up to HEADER_WORD_MAX."""
    def least(i: int, label: str) -> int:
        cells = [row[i] for row in rows]
        body = max(longest(cells, words), min(longest(cells), PROSE_MIN)) if i in prose else longest(cells)
        return max(body, min(longest([label], str.split), HEADER_WORD_MAX))

    return [least(i, label) for i, label in enumerate(header)]


def grow(widths: list[int], targets: list[int], spare: int) -> int:
    """Widen the columns towards targets one character at a time, in turn; returns what is left to spare."""
    while spare and any(w < t for w, t in zip(widths, targets)):
        for i, target in enumerate(targets):
            if spare and widths[i] < target:
                widths[i] += 1
                spare -= 1
    return spare


def csv_fields(rows: list[dict]) -> list[str]:
    """The columns of flattened rows, in first-seen order; an unavailable backend's null decode_logits gives way to
    the decode_logits.* columns of the available ones."""
    fields = list(dict.fromkeys(key for row in rows for key in row))
    return [f for f in fields if not any(other.startswith(f + ".") for other in fields)]


def print_table(console, header: list[str], rows: list[list], *, left=(0,), prose=(), title: str | None = None):
    """A rich table whose figures are never cut. Every column gets its least width (least_widths); what is left goes
    to prose columns (folded as fold() folds a line), then to whole headers. When even the least widths do not fit
    the console, each row is printed as one line of "header: value" pairs instead, folded. A row with nothing beside
    its first cell says nothing and is left out. Cells are plain text (a figure or a user's value is never read as
    markup), or rich Text."""
    from rich.table import Table
    from rich.text import Text

    cells = [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
    cells = [row for row in cells if any(cell.plain for cell in row[1:])]
    plain = [[cell.plain for cell in row] for row in cells]
    widths = least_widths(header, plain, prose)
    spare = console.width - table_width(widths)
    if spare < 0:
        if title:
            print_prose(console, title)
        for row in cells:
            print_prose(console, Text("; ").join(Text(f"{label}: " if label else "") + cell
                                                 for label, cell in zip(header, row) if cell.plain))
        return
    natural = [max(len(label), longest([row[i] for row in plain])) for i, label in enumerate(header)]
    spare = grow(widths, [natural[i] if i in prose else widths[i] for i in range(len(header))], spare)
    grow(widths, natural, spare)
    grid = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, label in enumerate(header):
        grid.add_column(Text(label), justify="left" if i in left else "right", overflow="fold", width=widths[i])
    for row in cells:
        grid.add_row(*(Text("\n").join(folded(cell, widths[i], 0)) if i in prose else cell
                       for i, cell in enumerate(row)))
    console.print(grid)


def fold(line: str, width: int, more: int = CONTINUED) -> list[str]:
    """One line broken at spaces to fit width, its continuations indented CONTINUED more: a number is never cut, nor
    parted from the word after it (its unit), and a key is never broken at its hyphens. Only a word wider than the
    width (a path) is cut."""
    indent = " " * (len(line) - len(line.lstrip(" ")) + more)
    glued = NUMBER_THEN_WORD.sub(lambda m: m[1] + GLUE, line)
    pieces = textwrap.wrap(glued, width, subsequent_indent=indent, break_on_hyphens=False)
    return [piece.replace(GLUE, " ") for piece in pieces] or [""]


def wrapped(text: str, width: int) -> str:
    """Each line folded to width (fold)."""
    return "\n".join(piece for line in text.splitlines() for piece in fold(line, width)) + "\n"


def folded(text, width: int, more: int = CONTINUED) -> list:
    """A rich Text folded as fold() folds its plain text, its styles kept."""
    from rich.text import Text

    pieces, start = [], 0
    for i, line in enumerate(fold(text.plain, width, more)):
        indent = len(line) - len(line.lstrip(" ")) if i else 0
        start = text.plain.index(line[indent:], start)
        pieces.append(Text(line[:indent]) + text[start:start + len(line) - indent])
        start += len(line) - indent
    return pieces


def print_prose(console, line, more: int = CONTINUED) -> None:
    """Print one line of prose (a str, never read as markup, or a rich Text) folded to the console's width."""
    from rich.text import Text

    for piece in folded(line if isinstance(line, Text) else Text(line), console.width, more):
        console.print(piece, soft_wrap=True, highlight=False)
