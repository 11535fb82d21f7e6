"""Measured step times next to simulated ones: each row of a measurements table simulated, and its delta.

A row is ``ok`` (simulated, with its delta) or ``unsupported`` (with the reason): a request or model field the
mapping needs that tpusim does not have, a field value the request refuses, or a configuration that does not fit
in HBM. Every row is reported; none is skipped. The rows carry no tolerance: they inform, they do not fail a
validation (docs/validation.md#measured-training-runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tpusim.config import HardwareProfile, TransformerModel
from tpusim.config.requests import StepRequest
from tpusim.engine.context import Context
from tpusim.errors import UserError
from tpusim.experiments.measurements.convert import RowRequest, row_request
from tpusim.experiments.measurements.table import SHIPPED_TABLE, MeasuredRun, TpuGeneration, read_measurements
from tpusim.experiments.runners import run_request

__all__ = ["Comparison", "RowStatus", "compare_measurements", "comparison_text", "generation_summary",
           "measurements_payload"]


class RowStatus(StrEnum):
    """What became of one measured row."""

    OK = "ok"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Comparison:
    """One measured row next to its simulation (field meanings: docs/validation.md#measured-training-runs)."""

    id: str
    tpu: TpuGeneration
    measured_step_time_s: float
    simulated_step_time_s: float | None
    status: RowStatus
    reason: str
    notes: tuple[str, ...]
    request: dict[str, Any]

    @property
    def delta(self) -> float | None:
        """(simulated - measured) / measured, for an ``ok`` row."""
        if self.simulated_step_time_s is None:
            return None
        return (self.simulated_step_time_s - self.measured_step_time_s) / self.measured_step_time_s

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "tpu": str(self.tpu), "measured_step_time_s": self.measured_step_time_s,
                "simulated_step_time_s": self.simulated_step_time_s, "delta": self.delta,
                "status": str(self.status), "reason": self.reason, "notes": list(self.notes),
                "request": self.request}


def compare_measurements(path: Path | str = SHIPPED_TABLE, context: Context | None = None) -> list[Comparison]:
    """Every row of the measurements table at ``path`` (default: the shipped one), simulated where it can be."""
    return [compare_row(run, context) for run in read_measurements(path)]


def compare_row(run: MeasuredRun, context: Context | None = None, hardware: HardwareProfile | None = None
                ) -> Comparison:
    """One row simulated as its step request (on ``hardware`` instead of its generation's profile, where given);
    any refusal of the request becomes ``unsupported`` with its line."""
    def unsupported(reason: str, asked: RowRequest | None = None) -> Comparison:
        return Comparison(run.id, run.tpu, run.step_time_s, None, RowStatus.UNSUPPORTED, reason,
                          asked.notes if asked else (), asked.fields if asked else {})

    try:
        asked = row_request(run)
    except UserError as error:
        return unsupported(error.message)
    missing = unavailable_fields(asked.fields)
    if missing:
        return unsupported(missing, asked)
    fields = asked.fields if hardware is None else {**asked.fields, "hardware": hardware}
    try:
        result = run_request(StepRequest, fields, context)
    except UserError as error:  # a value the request refuses, a layout that cannot be placed, a model beyond HBM
        return unsupported(error.message, asked)
    return Comparison(run.id, run.tpu, run.step_time_s, float(result.step_time_s), RowStatus.OK, "", asked.notes,
                      asked.fields)


def unavailable_fields(fields: dict[str, Any]) -> str:
    """Which of the request's fields (and its inline model's) tpusim's request and model do not define, as a
    reason ("request field 'layout' not available"); empty when every one exists."""
    parts = []
    for what, names, known in (("request", fields, StepRequest.model_fields),
                               ("model", fields.get("model") or {}, TransformerModel.model_fields)):
        absent = [name for name in names if name not in known]
        if absent:
            plural = "s" if len(absent) > 1 else ""
            parts.append(f"{what} field{plural} {', '.join(repr(name) for name in absent)} not available")
    return "; ".join(parts)


def generation_summary(rows: list[Comparison]) -> dict[str, dict[str, Any]]:
    """Per TPU generation (in the order rows name them): rows, ok rows, and the mean and max |delta| of the ok
    rows (None when none is ok)."""
    summary: dict[str, dict[str, Any]] = {}
    for generation in dict.fromkeys(row.tpu for row in rows):
        mine = [row for row in rows if row.tpu is generation]
        deltas = [abs(row.delta) for row in mine if row.delta is not None]
        summary[str(generation)] = {"rows": len(mine), "ok": len(deltas),
                                    "mean_abs_delta": sum(deltas) / len(deltas) if deltas else None,
                                    "max_abs_delta": max(deltas) if deltas else None}
    return summary


def measurements_payload(rows: list[Comparison], table: str) -> dict[str, Any]:
    """The ``--json`` object of a measurements comparison."""
    return {"table": table, "rows": [row.to_dict() for row in rows], "generations": generation_summary(rows),
            "unsupported": sum(row.status is RowStatus.UNSUPPORTED for row in rows)}


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.2f}%"


def comparison_text(rows: list[Comparison], table: str) -> str:
    """The text table: one line per row, then one per generation and the count of unsupported rows."""
    width = max([len("id"), *(len(row.id) for row in rows)])
    lines = [f"measured training runs from {table} (informational: no tolerance)",
             f"{'id':<{width}}  {'tpu':<4}  {'measured_s':>10}  {'simulated_s':>11}  {'delta':>8}  status"]
    for row in rows:
        simulated = "-" if row.simulated_step_time_s is None else f"{row.simulated_step_time_s:.3f}"
        status = str(row.status) + (f": {row.reason}" if row.reason else "")
        notes = "".join(f" ({note})" for note in row.notes)
        lines.append(f"{row.id:<{width}}  {row.tpu:<4}  {row.measured_step_time_s:>10.3f}  {simulated:>11}  "
                     f"{_percent(row.delta):>8}  {status}{notes}")
    for generation, stats in generation_summary(rows).items():
        mean = "-" if stats["mean_abs_delta"] is None else f"{100 * stats['mean_abs_delta']:.2f}%"
        peak = "-" if stats["max_abs_delta"] is None else f"{100 * stats['max_abs_delta']:.2f}%"
        lines.append(f"{generation}: {stats['rows']} rows, {stats['ok']} ok, mean |delta| {mean}, max |delta| {peak}")
    unsupported = sum(row.status is RowStatus.UNSUPPORTED for row in rows)
    lines.append(f"{unsupported} of {len(rows)} rows unsupported")
    return "\n".join(lines)
