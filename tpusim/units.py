"""SI units, data-type sizes, and parsing of human-written quantities.

Everything inside tpusim is SI: seconds, bytes, FLOP, bytes per second. This module turns strings such
as ``"64 MiB"``, ``"45 GB/s"``, ``"1 us"`` or ``"275 TFLOP/s"`` into those numbers. It imports nothing
from tpusim; it raises :class:`UnitError` (a ``ValueError``) that callers translate into user errors.
"""

from __future__ import annotations

import math
import re
from types import MappingProxyType

KB, MB, GB, TB = 1e3, 1e6, 1e9, 1e12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40
ns, us, ms = 1e-9, 1e-6, 1e-3

DTYPE_BYTES: MappingProxyType[str, int] = MappingProxyType({"int8": 1, "bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8})

_SIZE_UNITS = MappingProxyType({
    "": 1.0, "b": 1.0, "B": 1.0,
    "kB": KB, "KB": KB, "MB": MB, "GB": GB, "TB": TB,
    "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB,
})
_SIZE_UNITS_BY_CASE = MappingProxyType({name.lower(): name for name in _SIZE_UNITS})
_TIME_UNITS = MappingProxyType({"s": 1.0, "ms": ms, "us": us, "µs": us, "ns": ns})
_FLOPS_PREFIX = MappingProxyType({"": 1.0, "K": 1e3, "G": 1e9, "T": 1e12, "P": 1e15})
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


class UnitError(ValueError):
    """A quantity that cannot be parsed; the message quotes it and says what is valid."""


def dtype_bytes(name: str) -> int:
    """Bytes per element of a data type name such as ``"bf16"``."""
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise UnitError(f"unknown dtype {name!r}; valid: {', '.join(DTYPE_BYTES)}") from None


def _split(text: str) -> tuple[float, str]:
    if not isinstance(text, str):
        raise UnitError(f"cannot parse {text!r} as a number with a unit")
    match = re.fullmatch(_NUMBER + r"\s*([^\s\d].*)?", text.strip())
    if not match:
        raise UnitError(f"cannot parse {text!r} as a number with a unit")
    return float(match.group(1)), (match.group(2) or "").strip()


def _finite_positive(value: float, text: object, what: str, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise UnitError(f"{what} {text!r} must be a finite number {bound}")
    return value


def _as_float(value: int | float, what: str) -> float:
    """A number as a float; an integer too large for one (``2**1100``) is refused, not an OverflowError."""
    try:
        return float(value)
    except OverflowError:
        shown = str(value)
        raise UnitError(f"{what} {shown[:24]}... ({len(shown)} digits) is too large to be a number") from None


def _size_unit(unit: str) -> str | None:
    """The canonical spelling of a byte unit, whatever its case ("mb" -> "MB", "gib" -> "GiB"); sizes are
    always bytes, so the case carries no meaning."""
    return _SIZE_UNITS_BY_CASE.get(unit.lower())


def parse_size(text: str | float | int, *, allow_zero: bool = False) -> float:
    """Bytes from ``"64MB"`` (64e6), ``"8 MiB"`` (8 * 2**20), either in any case, or a plain number of bytes."""
    if isinstance(text, bool):
        raise UnitError(f"size {text!r} is not a number of bytes")
    if isinstance(text, int | float):
        return _finite_positive(_as_float(text, "size"), text, "size", allow_zero)
    value, unit = _split(text)
    canonical = _size_unit(unit)
    if canonical is None:
        raise UnitError(
            f"size {text!r} has unknown unit {unit!r}; valid: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB"
        )
    return _finite_positive(value * _SIZE_UNITS[canonical], text, "size", allow_zero)


def parse_bandwidth(text: str | float | int) -> float:
    """Bytes per second from ``"45 GB/s"``, ``"1.2 TB/s"`` or a plain number of B/s."""
    if isinstance(text, bool):
        raise UnitError(f"bandwidth {text!r} is not a number")
    if isinstance(text, int | float):
        return _finite_positive(_as_float(text, "bandwidth"), text, "bandwidth", False)
    value, unit = _split(text)
    canonical = _size_unit(unit[:-2]) if unit.endswith("/s") else None
    if canonical is None:
        raise UnitError(f"bandwidth {text!r} needs a unit per second, e.g. '45 GB/s' or '90e9 B/s'")
    return _finite_positive(value * _SIZE_UNITS[canonical], text, "bandwidth", False)


def parse_time(text: str | float | int, *, allow_zero: bool = True) -> float:
    """Seconds from ``"1 us"``, ``"13e-6 s"``, ``"5ms"`` or a plain number of seconds."""
    if isinstance(text, bool):
        raise UnitError(f"time {text!r} is not a number")
    if isinstance(text, int | float):
        return _finite_positive(_as_float(text, "time"), text, "time", allow_zero)
    value, unit = _split(text)
    if unit not in _TIME_UNITS:
        raise UnitError(f"time {text!r} has unknown unit {unit!r}; valid: s, ms, us, ns")
    return _finite_positive(value * _TIME_UNITS[unit], text, "time", allow_zero)


def parse_flops(text: str | float | int) -> float:
    """FLOP per second from ``"275 TFLOP/s"`` or a plain number."""
    if isinstance(text, bool):
        raise UnitError(f"compute rate {text!r} is not a number")
    if isinstance(text, int | float):
        return _finite_positive(_as_float(text, "compute rate"), text, "compute rate", False)
    value, unit = _split(text)
    match = re.fullmatch(r"([KGTP]?)FLOP/s", unit)
    if not match:
        raise UnitError(f"compute rate {text!r} needs a unit such as 'TFLOP/s'")
    return _finite_positive(value * _FLOPS_PREFIX[match.group(1)], text, "compute rate", False)


def parse_count(text: str | int, what: str = "count") -> int:
    """A whole number >= 1 (chips, slices, batch); ``"8"`` and ``8`` are fine, ``"0"`` and ``"2.5"`` not."""
    if isinstance(text, bool):
        raise UnitError(f"{what} {text!r} must be an integer >= 1")
    if isinstance(text, int):
        value = text
    else:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise UnitError(f"{what} {text!r} must be an integer >= 1") from None
    if value < 1:
        raise UnitError(f"{what} {text!r} must be an integer >= 1")
    return value


def format_time(seconds: float | None) -> str:
    """A readable time with a unit: ``681.67 us``; ``n/a`` for a time that has no value (None)."""
    if seconds is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", ms), ("us", us)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.6g} {unit}"
    return f"{seconds / ns:.6g} ns"


def format_size(nbytes: float) -> str:
    """A readable size in decimal (SI) units, as every result is: ``64 MB``, ``34.3597 GB`` for 32 GiB; one style
    in all output, so that two sizes side by side are never in different units."""
    for name, scale in (("TB", TB), ("GB", GB), ("MB", MB), ("kB", KB)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.6g} {name}"
    return f"{nbytes:.6g} B"
