"""Rendering for people: tables, markdown, CSV, text. No arithmetic beyond unit conversion for display."""

import textwrap

from dsa_kvcalc.units import GIB

HEADER_WORD_MAX = 12  # a longer word of a header (a dotted recipe key) may fold; a figure never does
PROSE_MIN = 24  # a column of prose narrower than this reads worse than the narrow layout


def gib(value: int) -> str:
    """Bytes as GiB with two decimals, the way vLLM prints them."""
    return f"{value / GIB:.2f}"


def table_width(widths: list[int]) -> int:
    """How wide print_table's rich Table is with these column widths: no outer edge, a space each side of every
    inner rule."""
    return sum(widths) + 3 * len(widths) - 3


def longest(texts, split=lambda text: [text]) -> int:
    return max((len(word) for text in texts for word in split(text)), default=1)


def least_widths(header: list[str], rows: list[list[str]], prose=()) -> list[int]:
    """Per column, the narrowest width that cuts no figure and folds no short header word: its widest cell (a prose
    column: its longest word, and PROSE_MIN unless all of it is shorter), and at least its header's longest word
    up to HEADER_WORD_MAX."""
    def least(i: int, label: str) -> int:
        cells = [row[i] for row in rows]
        body = max(longest(cells, str.split), min(longest(cells), PROSE_MIN)) if i in prose else longest(cells)
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
    to prose columns, then to whole headers. When even the least widths do not fit the console, each row is printed
    as one line of "header: value" pairs instead, wrapped at spaces. Cells are plain text (a figure or a user's value
    is never read as markup), or rich Text."""
    from rich.table import Table
    from rich.text import Text

    cells = [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
    plain = [[cell.plain for cell in row] for row in cells]
    widths = least_widths(header, plain, prose)
    spare = console.width - table_width(widths)
    if spare < 0:
        if title:
            console.print(Text(title))
        for row in cells:
            console.print(Text("; ").join(Text(f"{label}: " if label else "") + cell
                                          for label, cell in zip(header, row) if cell.plain))
        return
    natural = [max(len(label), longest([row[i] for row in plain])) for i, label in enumerate(header)]
    spare = grow(widths, [natural[i] if i in prose else widths[i] for i in range(len(header))], spare)
    grow(widths, natural, spare)
    grid = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, label in enumerate(header):
        grid.add_column(Text(label), justify="left" if i in left else "right", overflow="fold", width=widths[i])
    for row in cells:
        grid.add_row(*row)
    console.print(grid)


def wrapped(text: str, width: int) -> str:
    """Each line broken at spaces to fit width, its continuation indented four more: what a terminal would break
    mid-number stays whole. A word wider than width is left whole too."""
    lines = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        lines += textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False,
                               break_on_hyphens=False) or [""]
    return "\n".join(lines) + "\n"
