"""What a reproduction family is: a name, a title (naming the profile's TPU generation where it says
``{generation}``), how its results become a table, and how the table is drawn."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.hardware.profiles import load_hardware
from tpusim.topology.slices import TPUV4_RULES, generation_title

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

    def titled(self, profile: str) -> str:
        """The figure's title for a run on ``profile`` (a name or a path): ``{generation}`` becomes the
        generation of its slices (``TPUv5p``), so that a family run with ``--hardware`` is titled by what ran."""
        if "{generation}" not in self.title:
            return self.title
        return self.title.format(generation=generation_title(load_hardware(profile).slice_rules or TPUV4_RULES))
