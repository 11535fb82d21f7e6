"""``tpusim plan``'s answer: the planning table of a model on a chip count, and its rows for a CSV file.

The CSV follows the column rules of results.csv (``experiments.rows``): one cell per number, flag or word, a
per-FF-layer list one column per layer (``dataflows_qkv`` ... ``slices_ff2``), and a text cell never empty
(``none`` for a layout that runs no algorithm, a slice count an algorithm does not take is an empty cell).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tpusim.config.requests import FF_LAYERS
from tpusim.tuning.candidates import Candidate

__all__ = ["CSV_COLUMNS", "PlanResult", "csv_rows"]

NONE = "none"
_PER_LAYER = ("dataflows", "transposes", "slices")


@dataclass
class PlanResult:
    """The ranked candidates (fastest first) of ``model`` on ``chips`` chips of ``hardware``, batch ``batch``."""

    model: str
    hardware: str
    chips: int
    batch: int
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _columns() -> list[str]:
    columns = ["rank"]
    for name in (f.name for f in fields(Candidate)):
        columns.extend(f"{name}_{layer}" for layer in FF_LAYERS) if name in _PER_LAYER else columns.append(name)
    return columns


CSV_COLUMNS = tuple(_columns())


def csv_rows(result: PlanResult) -> list[dict[str, Any]]:
    """One row per candidate, in rank order (1: the fastest)."""
    rows = []
    for rank, candidate in enumerate(result.candidates, start=1):
        cells: dict[str, Any] = {"rank": rank}
        for name, value in candidate.to_dict().items():
            if name in _PER_LAYER:
                cells.update(zip((f"{name}_{layer}" for layer in FF_LAYERS), value, strict=True))
            else:
                cells[name] = NONE if value is None else value
        rows.append({column: cells[column] for column in CSV_COLUMNS})
    return rows
