"""The calibration of achievable rates (docs/validation.md#calibration), as a procedure anyone can re-run.

Two steps, in this order:

1. **ICI link efficiency, derived from a published fit.** The fraction of a link's line rate a collective's DMA
   sustains on ``tpuv4`` is the one that brings the physical model closest (least squares of log time ratios) to
   the MeshSlice authors' fit to their v4-32 measurements (``meshslice-tpu-fit``), over the operations whose
   schedule the model shares with the measured runtime: every compared pair but the ones docs/validation.md
   explains by another mechanism (``EXPLAINED_DIFFERENCES``). Nothing of the measured training runs enters it.
2. **MXU efficiency per generation, fitted on the measured runs.** With that link efficiency on every generation,
   each generation's sustained MXU efficiency is the one that minimises the sum of squared log ratios of
   simulated to measured step time over that generation's rows of the calibration table, and only those.

Each scalar is found on a surrogate: a row's time is taken as ``a + b / e`` through its two latest simulations
(exact where the time is compute or transfer plus fixed costs), the surrogate's minimum is simulated, and the
two repeat until the constant moves less than ``TOLERANCE``. The constants are rounded to ``DIGITS`` decimals and
the residuals are those of the rounded constants. The run changes no file: the profiles in
configs/hardware/ carry the printed constants (a test holds them equal).

``python -m tpusim.experiments.measurements.fit [--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tpusim.experiments.measurements.compare import compare_row
from tpusim.experiments.measurements.table import (
    SHIPPED_TABLE,
    SHIPPED_TABLE_NAME,
    MeasuredRun,
    TpuGeneration,
    read_measurements,
)
from tpusim.experiments.validation import EXPLAINED_DIFFERENCES, MEASURED_OPS, Check, measured_checks
from tpusim.hardware import load_hardware
from tpusim.hardware.profiles import with_rates

__all__ = ["DIGITS", "LINK_PROFILE", "TOLERANCE", "Calibration", "ConstantFit", "calibrate", "fit_scalar",
           "fit_text"]

DIGITS = 3
"""Decimals the fitted constants are rounded to (a step of 0.1% of the rate)."""
TOLERANCE = 1e-5
"""The surrogate iteration stops when the constant moves less than this."""
LINK_PROFILE = "tpuv4"
"""The profile whose link efficiency the v4-32 fit determines (the machine the authors measured)."""
_BOUNDS = (0.2, 1.0)  # an efficiency is a fraction of a rate; the search stays inside it
_ITERATIONS = 12
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True)
class ConstantFit:
    """One fitted constant: its name, the profile it belongs to, its value, and what it was fitted on."""

    name: str
    profile: str
    value: float
    fitted_on: str
    residuals: tuple[tuple[str, float], ...] = field(default=())
    """(row, delta) at the rounded value: delta = simulated / reference - 1."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "profile": self.profile, "value": self.value, "fitted_on": self.fitted_on,
                "residuals": [{"id": row, "delta": delta} for row, delta in self.residuals]}


@dataclass(frozen=True)
class Calibration:
    """Every constant the procedure determines, in the order it determines them."""

    constants: tuple[ConstantFit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"constants": [constant.to_dict() for constant in self.constants]}


def _objective(times: Sequence[float], references: Sequence[float]) -> float:
    return sum(math.log(t / r) ** 2 for t, r in zip(times, references, strict=True))


def _golden(function: Callable[[float], float], low: float, high: float) -> float:
    a, b = low, high
    while b - a > TOLERANCE / 10:
        c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
        if function(c) <= function(d):
            b = d
        else:
            a = c
    return (a + b) / 2


def fit_scalar(simulate: Callable[[float], list[float]], references: Sequence[float],
               start: tuple[float, float] = (1.0, 0.8)) -> float:
    """The efficiency in ``_BOUNDS`` whose simulated times (``simulate(e)``, one per reference) have the least sum
    of squared log ratios to ``references``, by the surrogate iteration of the module docstring."""
    points = [(start[0], simulate(start[0])), (start[1], simulate(start[1]))]
    previous = start[1]
    for _ in range(_ITERATIONS):
        (e0, t0), (e1, t1) = points[-2], points[-1]
        # per row, the a + b / e through the two latest simulations
        slopes = [(x0 - x1) / (1.0 / e0 - 1.0 / e1) for x0, x1 in zip(t0, t1, strict=True)]
        offsets = [x1 - b / e1 for x1, b in zip(t1, slopes, strict=True)]

        def surrogate(e: float, slopes: list[float] = slopes, offsets: list[float] = offsets) -> float:
            return _objective([max(a + b / e, 1e-30) for a, b in zip(offsets, slopes, strict=True)], references)

        best = _golden(surrogate, *_BOUNDS)
        if abs(best - previous) < TOLERANCE:
            return best
        points.append((best, simulate(best)))
        previous = best
    return previous


def _link_fit() -> ConstantFit:
    profile = load_hardware(LINK_PROFILE)
    pairs = frozenset((op, axis) for op in MEASURED_OPS for axis in (0, 1)) - EXPLAINED_DIFFERENCES

    runs: dict[float, list[Check]] = {}

    def checks_at(e: float) -> list[Check]:  # each efficiency simulated once: the fit starts at 1, the reference run
        if e not in runs:
            runs[e] = measured_checks(hardware=with_rates(profile, link=e), pairs=pairs)
        return runs[e]

    references = [check.reference for check in checks_at(1.0)]
    value = round(fit_scalar(lambda e: [check.simulated for check in checks_at(e)], references), DIGITS)
    final = checks_at(value)
    return ConstantFit("ici.link_efficiency", LINK_PROFILE, value,
                       f"{len(final)} v4-32 collectives of meshslice-tpu-fit (docs/validation.md#the-v4-32-comparison)",
                       tuple((check.quantity, check.delta) for check in final))


def _mxu_fit(generation: TpuGeneration, runs: list[MeasuredRun], link: float) -> ConstantFit:
    profile = with_rates(load_hardware(generation.hardware), link=link)

    def simulate(e: float) -> list[float]:
        times = []
        for run in runs:
            row = compare_row(run, hardware=with_rates(profile, mxu=e))
            if row.simulated_step_time_s is None:
                raise ValueError(f"row {run.id} cannot be simulated at MXU efficiency {e}: {row.reason}")
            times.append(row.simulated_step_time_s)
        return times

    references = [run.step_time_s for run in runs]
    value = round(fit_scalar(simulate, references), DIGITS)
    final = simulate(value)
    return ConstantFit("chip.mxu_efficiency", generation.hardware, value,
                       f"{len(runs)} measured run{'s' if len(runs) > 1 else ''} of {generation} "
                       f"({SHIPPED_TABLE_NAME})",
                       tuple((run.id, t / run.step_time_s - 1.0) for run, t in zip(runs, final, strict=True)))


def calibrate(table: str = str(SHIPPED_TABLE), generations: Sequence[TpuGeneration] | None = None) -> Calibration:
    """Run the procedure on ``table`` (default: the shipped calibration table) for ``generations`` (default:
    every generation with rows)."""
    runs = read_measurements(table)
    link = _link_fit()
    chosen = generations or [g for g in TpuGeneration if any(run.tpu is g for run in runs)]
    fits = [_mxu_fit(g, [run for run in runs if run.tpu is g], link.value) for g in chosen]
    return Calibration((link, *fits))


def fit_text(calibration: Calibration) -> str:
    """The constants and their residuals as a plain table."""
    lines = []
    for constant in calibration.constants:
        worst = max((abs(delta) for _, delta in constant.residuals), default=0.0)
        mean = sum(abs(delta) for _, delta in constant.residuals) / max(len(constant.residuals), 1)
        lines.append(f"{constant.profile:<8} {constant.name:<20} {constant.value:.{DIGITS}f}   fitted on "
                     f"{constant.fitted_on}; mean |delta| {100 * mean:.2f}%, max {100 * worst:.2f}%")
        if constant.name == "chip.mxu_efficiency":
            lines.extend(f"    {row:<32} {100 * delta:+.2f}%" for row, delta in constant.residuals)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpusim.experiments.measurements.fit",
                                     description="Fit tpusim's achievable-rate constants "
                                                 "(docs/validation.md#calibration)")
    parser.add_argument("--json", action="store_true", help="print the constants and residuals as JSON")
    args = parser.parse_args(argv)
    calibration = calibrate()
    print(json.dumps(calibration.to_dict(), indent=2) if args.json else fit_text(calibration))
    return 0


if __name__ == "__main__":
    sys.exit(main())
