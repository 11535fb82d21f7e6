"""What the pages say about the shipped profiles is what configs/hardware/*.yaml hold: the list of profiles in
docs/hardware-profiles.md, the HBM and op-overhead tables of docs/chip.md, the calibrated profiles' HBM, and the
GeMM times of docs/chip.md#gemm-time, each figure to the digits the page shows."""

from __future__ import annotations

import re

import pytest

from tests.documents import page, table
from tpusim.config.catalog import HARDWARE
from tpusim.hardware.chip import ChipModel
from tpusim.hardware.profiles import load_hardware
from tpusim.units import GiB, us

NAMES = HARDWARE.names()
PROFILES = {name: load_hardware(name) for name in NAMES}
NUMBERS = {4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight", 9: "Nine"}


def _named(cell: str) -> list[str]:
    """The profile names written in backticks in ``cell``."""
    return re.findall(r"`([^`]+)`", cell)


def _as_shown(shown: str, value: float) -> None:
    """``value`` rounds to ``shown``, a number written with as many decimals as the page gives."""
    number = re.match(r"[\d.]+", shown)
    assert number, shown
    decimals = len(number.group().partition(".")[2])
    assert abs(value - float(number.group())) <= 0.5 * 10 ** -decimals + 1e-9, (shown, value)


def test_the_profile_list_is_every_shipped_profile() -> None:
    rows = table("docs/hardware-profiles.md", "| profile | kind | network | GeMM model |")
    assert sorted(_named(row[0])[0] for row in rows) == NAMES
    for row in rows:
        profile = PROFILES[_named(row[0])[0]]
        assert row[1] == profile.kind
        assert row[3] == {"roofline": "roofline", "flops": "2mnk / F"}[profile.chip.gemm_model]
    assert f"{NUMBERS[len(NAMES)]} profiles ship with tpusim" in page("docs/hardware-profiles.md")


def test_the_hbm_reserve_table_and_its_inheritors_are_every_profile() -> None:
    rows = table("docs/chip.md", "| profile | `hbm_capacity` | `hbm_reserved` |")
    listed = {_named(row[0])[0]: row for row in rows}
    sentence = re.search(r"((?:`[\w-]+`(?:, | and ))+`[\w-]+`) inherit `tpuv4`'s\.", page("docs/chip.md"))
    assert sentence
    inheritors = _named(sentence.group(1))
    assert sorted([*listed, *inheritors]) == NAMES
    for name, (_, capacity, reserved, usable, _) in listed.items():
        chip = PROFILES[name].chip
        for shown, value in ((capacity, chip.hbm_capacity), (reserved, chip.hbm_reserved),
                             (usable, chip.hbm_capacity - chip.hbm_reserved)):
            assert shown.endswith(" GiB")
            _as_shown(shown, value / GiB)
    for name in inheritors:
        chip, v4 = PROFILES[name].chip, PROFILES["tpuv4"].chip
        assert (chip.hbm_capacity, chip.hbm_reserved) == (v4.hbm_capacity, v4.hbm_reserved)


def test_the_calibrated_profiles_have_the_hbm_the_pages_give() -> None:
    text = page("docs/hardware-profiles.md")
    assert "| calibrated profiles use the HBM of `tpuv4` | 32 GiB, 1.2e12 B/s |" in text
    assert "| inherited from `tpuv4` | HBM 32 GiB at 1.2e12 B/s, MXU shape (the chip block) | same |" in text
    calibrated = [p.chip for p in PROFILES.values() if p.kind == "calibrated"]
    assert len(calibrated) == 2
    v4 = PROFILES["tpuv4"].chip
    for chip in calibrated:
        assert (chip.hbm_capacity, chip.hbm_bandwidth) == (32 * GiB, 1.2e12) == (v4.hbm_capacity, v4.hbm_bandwidth)
        assert chip.mxu_dim == v4.mxu_dim


def test_the_op_overhead_table_is_every_profile() -> None:
    rows = table("docs/chip.md", "| profile | `chip.op_overhead` |")
    seen = []
    for cell, overhead in rows:
        shown = 0.0 if overhead.startswith("0") else 1 * us
        assert overhead.startswith(("0", "1 us")), overhead
        for name in _named(cell):
            seen.append(name)
            assert PROFILES[name].chip.op_overhead == pytest.approx(shown, abs=1e-15), name
    assert sorted(seen) == NAMES


GEMM_ROWS = table("docs/chip.md", "| m x n x k | `tpuv4` compute (padded) |")


@pytest.mark.parametrize("row", GEMM_ROWS, ids=[row[0] for row in GEMM_ROWS])
def test_the_gemm_examples_are_the_chip_model_at_the_digits_shown(row: list[str]) -> None:
    shape, _, kind = row[0].partition(", ")
    m, n, k = (int(side) for side in shape.split(" x "))
    accumulate = kind == "accumulating"
    v4, wire, sim = (ChipModel(PROFILES[name].chip) for name in ("tpuv4", "tpuv4-wire", "meshslice-sim"))
    compute = 2 * -(-m // 128) * 128 * -(-n // 128) * 128 * -(-k // 128) * 128 / v4.gemm_peak
    memory = v4.gemm_hbm_bytes(m, n, k, accumulate=accumulate) / v4.hbm_rate
    _as_shown(row[1], compute / us)
    _as_shown(row[2], memory / us)
    _as_shown(row[3], v4.gemm_time(m, n, k, accumulate=accumulate) / us)
    assert row[3].endswith("(compute-bound)" if compute > memory else "(HBM-bound)")
    _as_shown(row[4], wire.gemm_time(m, n, k, accumulate=accumulate) / us)
    _as_shown(row[5], sim.gemm_time(m, n, k, accumulate=accumulate) / us)


def test_the_op_overhead_example_quotes_the_table() -> None:
    small = next(row for row in GEMM_ROWS if row[0] == "512 x 512 x 512")
    memory, total = small[2], small[3].split(" ")[0]
    assert f"the 512 x 512 x 512 product above takes {memory} us of HBM time and {total} us in all" \
        in page("docs/chip.md")


def test_the_dcn_table_and_its_assumptions_are_every_physical_profile() -> None:
    rows = table("docs/hardware-profiles.md", "| profile | `dcn.host_bandwidth` (one direction) |")
    physical = sorted(name for name, p in PROFILES.items() if p.kind == "physical")
    assert sorted(_named(row[0])[0] for row in rows) == physical
    for cell, bandwidth, per_host, _ in rows:
        dcn, v4 = PROFILES[_named(cell)[0]].dcn, PROFILES["tpuv4"].dcn  # type: ignore[attr-defined]
        shown = v4.host_bandwidth if bandwidth == "as `tpuv4`" else float(bandwidth.split(" ")[0])
        assert (dcn.host_bandwidth, dcn.chips_per_host) == (shown, int(per_host))
    text = page("docs/hardware-profiles.md")
    assert ("`dcn.latency` (10 us on every physical profile) and `dcn.launch_overhead` (50 us per DCN collective "
            "on every physical profile but `tpuv4-wire`, where it is 0)") in text
    for name in physical:
        dcn = PROFILES[name].dcn  # type: ignore[attr-defined]
        assert dcn.latency == pytest.approx(10 * us)
        assert dcn.launch_overhead == pytest.approx(0.0 if name == "tpuv4-wire" else 50 * us, abs=1e-15)


def test_the_usable_hbm_docs_workloads_quotes_is_each_profiles() -> None:
    text = page("docs/workloads.md")
    sentence = text[text.index("[docs/chip.md](chip.md#hbm-reserve):"):]
    quoted = re.findall(r"([\d.]+) GiB on `([\w-]+)`", sentence[:sentence.index(";")])
    assert sorted(name for _, name in quoted) == ["tpuv4", "tpuv5e", "tpuv5p", "tpuv6e"]
    for usable, name in quoted:
        chip = PROFILES[name].chip
        assert float(usable) * GiB == chip.hbm_capacity - chip.hbm_reserved, name
