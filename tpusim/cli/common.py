"""Helpers shared by the command modules: argument types that fail with one clear line, and output."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpusim.errors import UserError, unknown_name
from tpusim.units import UnitError, format_time, parse_count


class UsageError(UserError):
    """A command-line argument that cannot be accepted."""


def name_arg(kind: str, names: list[str]) -> Callable[[str], str]:
    """An argparse type for one of ``names``: a miss is the standard unknown-name error with its "did you mean",
    not argparse's "invalid choice"."""

    def parse(text: str) -> str:
        if text not in names:
            raise unknown_name(kind, text, names)
        return text

    return parse


def out_dir_arg(text: str) -> Path:
    """An argparse type for ``--out``: a folder path; an empty one would silently mean the current folder."""
    if not text.strip():
        raise UsageError("--out '' is empty; give the folder the results go to (it is created if missing)")
    return Path(text)


def count_arg(flag: str) -> Callable[[str], int]:
    """An argparse type for counts (chips, slice counts, batch): integers >= 1."""

    def parse(text: str) -> int:
        try:
            return parse_count(text, flag)
        except UnitError as error:
            raise UsageError(str(error)) from None

    return parse


def positive_number_arg(flag: str) -> Callable[[str], float]:
    """An argparse type for a finite number > 0 (seconds, factors), quoting the text as given when it is not."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} {text!r} must be a finite number > 0")
        return value

    return parse


def add_trace_arguments(parser: argparse.ArgumentParser, help_text: str, *, flag: str = "--trace",
                        chips_default: str = "default: chip (0,0)'s row and column") -> None:
    """``flag``, the Chrome/Perfetto trace file (``help_text``), and ``--trace-chips``, the chips it records
    (``chips_default`` says which without it)."""
    parser.add_argument(flag, help=help_text)
    parser.add_argument("--trace-chips", help=f"chips to trace, e.g. '0,3,5-7' ({chips_default})")


def emit_json(payload: dict[str, Any]) -> None:
    """Exactly one JSON object on stdout."""
    json.dump(payload, sys.stdout, indent=2, sort_keys=False, default=_jsonable, allow_nan=False)
    sys.stdout.write("\n")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def print_table(rows: list[tuple[str, ...]], indent: str = "") -> None:
    """``rows`` (the header first) as left-aligned columns two spaces apart, each line after ``indent``."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(indent + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def note(message: str) -> None:
    """A note for the human on stderr."""
    print(f"note: {message}", file=sys.stderr)


def stall_text(stall: float | None) -> str:
    """The part of compute that HBM contention added, where there is any (docs/chip.md#hbm-contention)."""
    return f"   (of which {format_time(stall)} from HBM shared with DMA)" if stall else ""


def network_text(mapping: dict[str, Any], multi_axis: str | None) -> str:
    """Where the logical mesh ran, e.g. ``tpuv4:2x2x4 (axis 0: x*y dimensional; axis 1: z line)``: a slice chosen by
    default is named, never silently used. An axis of several whole physical axes is named by the schedule its
    gathers and reductions ran (``multi_axis``: dimensional, or the snake ring); with None, by its axes alone."""
    axes = []
    for axis, key in ((0, "axis0"), (1, "axis1"), ("data", "data")):
        placed = mapping.get(key)
        if placed is None:
            continue
        axes.append(f"{'axis ' if axis != 'data' else ''}{axis}: {_axis_text(placed, multi_axis)}")
    return f"{mapping['topology']} ({'; '.join(axes)})"


def _axis_text(placed: dict[str, Any], multi_axis: str | None) -> str:
    physical, embedding = placed["physical"], placed["embedding"]
    if embedding == "snake":  # several whole physical axes: how it ran is the multi-axis schedule's to say
        return "*".join(physical) + ("" if multi_axis is None else f" {multi_axis}")
    return f"{','.join(physical) + ' ' if physical else ''}{embedding}"


def per_layer_text(values: list[Any], sep: str = " ") -> str:
    """A per-FF-layer list as text, ``8 4 4 8``; ``-`` for a layer without a value."""
    return sep.join("-" if value is None else str(value) for value in values)


def slices_text(slices: list[int | None]) -> str:
    """A step's slice counts, ``slice counts 8, 4, 4, 8``, or ``not sliced`` for an algorithm that does not slice."""
    return "not sliced" if all(count is None for count in slices) else f"slice counts {per_layer_text(slices, ', ')}"


def throughput_text(tokens_per_s: float, seconds_per_sequence: float) -> str:
    """``95,411 tokens/s, 21.5 ms per sequence``."""
    return f"{tokens_per_s:,.0f} tokens/s, {format_time(seconds_per_sequence)} per sequence"
