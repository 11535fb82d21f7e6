"""What every result object offers: ``to_dict()`` (the CLI's ``--json`` fields) and ``to_frame()``; and what makes
a result's numbers sound (finite; times, byte counts and ratios not negative), which the runners check before they
return a result and the timing cache before it trusts a disk entry."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any


class ResultMixin:
    """For dataclass results."""

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = asdict(self)  # type: ignore[call-overload]
        return fields

    def to_frame(self) -> Any:
        """A one-row pandas DataFrame (pandas is imported only here)."""
        import pandas as pd

        return pd.DataFrame([self.to_dict()])


# result fields that are times, byte counts or ratios by their name, and so must not be negative
_NON_NEGATIVE_SUFFIXES = ("_s", "bytes", "bytes_sent", "utilisation", "mfu", "hfu", "flops_per_chip")


def _numbers(value: Any, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool):
        return
    if isinstance(value, float | int):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _numbers(item, f"{path}[{index}]")


def bad_number(data: dict[str, Any]) -> tuple[str, float] | None:
    """The first field of a result (as a dict) that is not finite, or is a negative time, byte count or ratio."""
    for path, value in _numbers(data, ""):
        if isinstance(value, float) and not math.isfinite(value):
            return path, value
        leaf = path.rsplit(".", 1)[-1].split("[", 1)[0]
        if value < 0 and leaf.endswith(_NON_NEGATIVE_SUFFIXES):
            return path, value
    return None
