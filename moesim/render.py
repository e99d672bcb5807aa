"""Text tables for the terminal, rendered by ``rich``: no fixed-width f-strings, no cell ever cut.

A table wider than the console wraps its headers at their spaces where that makes it fit, else it is split
into column groups, each repeating the first (key) column, so
every cell is printed whole at any width; the console's width is :func:`console_width` (``$COLUMNS``,
else the terminal's, else 240 columns when the output is not a terminal).

>>> print(render_table(["variant", "tok/s"], [["a long variant name", "651.0"]], title="demo", align="lr"))
demo
<BLANKLINE>
 variant               tok/s
─────────────────────────────
 a long variant name   651.0
<BLANKLINE>
>>> text = render_table(["name", "a", "b"], [["x", "1234567", "7654321"]], width=20)
>>> "1234567" in text and "7654321" in text and max(len(line) for line in text.splitlines()) <= 20
True
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Sequence

__all__ = ["NON_TTY_WIDTH", "column_groups", "console_width", "render_table"]

#: The console width when the output is not a terminal and ``$COLUMNS`` is unset (a file, a pipe).
NON_TTY_WIDTH = 240


def console_width() -> int:
    """The width text tables are laid out for: ``$COLUMNS`` when set to a positive integer, else the
    terminal's width when stdout is one, else :data:`NON_TTY_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return NON_TTY_WIDTH


def _table_width(widths: Sequence[int]) -> int:
    """The width of a table of columns ``widths`` wide: one space of padding each side, one between columns."""
    return sum(w + 2 for w in widths) + len(widths) - 1


def column_groups(widths: Sequence[int], width: int) -> list[list[int]]:
    """Indices of the columns (``widths``: each column's widest cell, in characters) in groups that each fit
    ``width`` characters as a table (each column padded by one space each side, one space between columns),
    every group starting with column 0 (the key column); a column too wide for any group gets a group of its
    own with the key column.

    >>> column_groups([7, 5, 5, 5], 40)
    [[0, 1, 2, 3]]
    >>> column_groups([7, 5, 5, 5], 20)
    [[0, 1], [0, 2], [0, 3]]
    """
    groups: list[list[int]] = []
    current = [0]
    for c in range(1, len(widths)):
        if len(current) > 1 and _table_width([widths[i] for i in (*current, c)]) > width:
            groups.append(current)
            current = [0]
        current.append(c)
    groups.append(current)
    return groups


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    title: str = "",
    notes: Sequence[str] = (),
    align: str = "",
    width: int | None = None,
) -> str:
    """A plain-text table (no colour codes): ``align`` gives one letter per column, ``l`` or ``r``
    (default: the first column left, the rest right). ``width``: the console's (default
    :func:`console_width`). Cells are never cut: a table wider than ``width`` wraps its headers at their
    spaces where that makes it fit, else is printed as several tables of whole columns (whole headers), each
    repeating the first column; only a cell wider than the console on its own wraps, at its spaces. ``notes`` follow the tables, one per line (long ones left to the terminal to wrap)."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    width = width or console_width()
    align = align or "l" + "r" * (len(headers) - 1)
    if len(align) != len(headers):
        raise ValueError(f"align {align!r} has {len(align)} letters for {len(headers)} columns")
    cells = [max([0, *(cell_len(str(r[i])) for r in rows)]) for i in range(len(headers))]
    widths = [max(c, cell_len(h)) for c, h in zip(cells, headers, strict=True)]
    compact = [max([c, *(cell_len(w) for w in h.split())]) for c, h in zip(cells, headers, strict=True)]
    if _table_width(widths) > width >= _table_width(compact):  # one table if its headers wrap at their spaces
        widths = compact
        headers = ["\n".join(textwrap.wrap(h, w, break_long_words=False)) or h for h, w in zip(headers, widths, strict=True)]
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False, soft_wrap=True)
    if title:
        console.print(title)
        console.print()
    for n, group in enumerate(column_groups(widths, width)):
        if n:
            console.print()
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=True)
        for c in group:
            table.add_column(headers[c], justify="right" if align[c] == "r" else "left", overflow="fold")
        for row in rows:
            table.add_row(*(str(row[c]) for c in group))
        console.print(table, soft_wrap=False)
    for note in notes:
        console.print(note)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    return "\n".join(lines) + "\n"
