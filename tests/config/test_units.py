"""Sizes and bandwidths: SI and binary units in any case (sizes are always bytes), one clear error otherwise."""

from __future__ import annotations

import pytest

from tpusim.units import UnitError, format_size, parse_bandwidth, parse_size


@pytest.mark.parametrize(("text", "expected"), [
    ("64MB", 64e6), ("64mb", 64e6), ("64 Mb", 64e6), ("8 MiB", 8 * 2**20), ("8 mib", 8 * 2**20),
    ("2GIB", 2 * 2**30), ("3 kb", 3e3), ("3 KB", 3e3), ("512 b", 512.0), ("4096", 4096.0),
])
def test_size_units_in_any_case(text: str, expected: float) -> None:
    assert parse_size(text) == expected


def test_bandwidth_units_in_any_case() -> None:
    assert parse_bandwidth("45 gb/s") == parse_bandwidth("45 GB/s") == 45e9
    assert parse_bandwidth("1 TiB/s") == parse_bandwidth("1 tib/s") == 2**40


def test_unknown_units_are_named_with_the_valid_ones() -> None:
    with pytest.raises(UnitError, match=r"^size '3 xb' has unknown unit 'xb'; valid: B, kB, MB, GB, TB, KiB, MiB"):
        parse_size("3 xb")
    with pytest.raises(UnitError, match=r"^bandwidth '45 GB' needs a unit per second"):
        parse_bandwidth("45 GB")


@pytest.mark.parametrize(("nbytes", "text"), [
    (32 * 2**30, "34.3597 GB"), (8 * 2**20, "8.38861 MB"), (64e6, "64 MB"), (15.7035e9, "15.7035 GB"),
    (4096.0, "4.096 kB"), (4100.0, "4.1 kB"), (512.0, "512 B"), (1e9, "1 GB"), (14976 * 2**20, "15.7035 GB"),
])
def test_sizes_print_in_decimal_units_only(nbytes: float, text: str) -> None:
    assert format_size(nbytes) == text
