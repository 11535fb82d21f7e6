"""What a reproduction family is: a name, a title, how its results become a table, and how the table is drawn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Entry", "Family", "Row"]

Entry = dict[str, Any]  # one finished point of results.json: point, row, result, error
Row = dict[str, Any]


@dataclass(frozen=True)
class Family:
    """``table`` turns the finished points of ``results.json`` into the rows of ``X.csv``; ``plot`` draws
    ``X.png`` from those rows. ``leads``: its table gives each lead's range when its points also ran under the
    sensitivity family's settings (``reproduce --lead-ranges``)."""

    name: str
    title: str
    table: Callable[[list[Entry]], list[Row]]
    plot: Callable[[list[Row], Path, str], None]
    leads: bool = False
