"""The paper-reproduction families: how each turns its experiment's results into a table and a figure.

A family is registered under the name of its folder in ``experiments/``; ``table`` turns the finished
points of ``results.json`` into the rows of ``X.csv`` and ``plot`` draws ``X.png`` from those rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.errors import unknown_name

Entry = dict[str, Any]  # one finished point of results.json: point, row, result, error
Row = dict[str, Any]


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    table: Callable[[list[Entry]], list[Row]]
    plot: Callable[[list[Row], Path, str], None]


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    _load()
    try:
        return FAMILIES[name]
    except KeyError:
        raise unknown_name("reproduction family", name, [*FAMILIES, "all"]) from None


def family_names() -> list[str]:
    _load()
    return list(FAMILIES)


def _load() -> None:
    from tpusim.experiments.families import comparisons, scaling, sweeps  # noqa: F401
