"""How the admin commands print: aligned tables with Kafka's column names, or JSON.

A table is a header row plus rows of cells; every column is as wide as its widest cell and
columns are separated by one space (as Kafka's tools print them); trailing blanks are trimmed.
``None`` prints as ``-`` in tables and ``null`` in JSON. JSON output is one document per command
on stdout, keys in snake case.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

Cell = str | int | None


def cell_text(value: Cell) -> str:
    return "-" if value is None else str(value)


def table(header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """The aligned table as text (with a trailing newline)."""
    texts = [list(header)] + [[cell_text(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in texts) for i in range(len(header))]
    lines = [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in texts]
    return "\n".join(lines) + "\n"


def print_table(header: Sequence[str], rows: Sequence[Sequence[Cell]],
                out: TextIO | None = None) -> None:
    (out or sys.stdout).write(table(header, rows))


def json_key(column: str) -> str:
    """``START-OFFSET`` -> ``start_offset``; ``#MEMBERS`` -> ``members``."""
    key = column.lower().replace("#", "").replace("-", "_").replace(" ", "_")
    return key.replace("(", "").replace(")", "").strip("_")


def rows_as_json(header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> list[dict[str, Any]]:
    keys = [json_key(h) for h in header]
    return [dict(zip(keys, row)) for row in rows]


def print_json(doc: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def emit(output: str, header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
    """Print rows as a table or as a JSON list of objects."""
    if output == "json":
        print_json(rows_as_json(header, rows))
    else:
        print_table(header, rows)
