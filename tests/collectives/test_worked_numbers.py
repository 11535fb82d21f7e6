"""The worked numbers of docs/network.md#worked-numbers are what ``tpusim collective`` gives for each row, on
``tpuv4-wire`` and on ``tpuv4``, to the hundredth of a microsecond the table shows (simulated and closed form)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.documents import page, table
from tpusim import api
from tpusim.hardware.profiles import load_hardware
from tpusim.units import us

TORUS, LINE = {"topology": "torus:16"}, {"topology": "mesh:16"}
# each row of the table: the collective(s) it describes (a row may name two that take the same time)
ROWS: list[tuple[str, list[dict[str, Any]]]] = [
    ("all-gather, wrapped axis, bidirectional", [{**TORUS, "op": "all-gather"}]),
    ("all-gather, unidirectional ring, or a 16-chip line",
     [{**TORUS, "op": "all-gather", "ring": "uni"}, {**LINE, "op": "all-gather"}]),
    ("reduce-scatter, wrapped axis", [{**TORUS, "op": "reduce-scatter"}]),
    ("all-reduce, wrapped axis", [{**TORUS, "op": "all-reduce"}]),
    ("all-reduce, 16-chip line", [{**LINE, "op": "all-reduce"}]),
    ("all-to-all, wrapped axis (part = 250 kB)", [{**TORUS, "op": "all-to-all"}]),
    ("broadcast of a 64 MB message, wrapped axis, `--chunks 1` (8 hops)", [{**TORUS, "op": "broadcast", "chunks": 1}]),
    ("same, `--chunks 8`", [{**TORUS, "op": "broadcast", "chunks": 8}]),
    ("same, schedule chosen: scatter, then ring all-gather", [{**TORUS, "op": "broadcast"}]),
    ("broadcast from rank 0 on a 16-chip line, `--chunks 8` (15 hops)", [{**LINE, "op": "broadcast", "chunks": 8}]),
    ("same, chunks chosen (256 on `tpuv4-wire`, 78 on `tpuv4`)", [{**LINE, "op": "broadcast"}]),
    ("shift of a 64 MB message by one rank", [{**TORUS, "op": "shift"}]),
]
SHOWN = {row[0]: row for row in table("docs/network.md", "| case | `tpuv4-wire` formula |")}


def _microseconds(cell: str) -> float:
    return float(cell.strip("*").split(" us")[0])


def test_the_table_has_exactly_these_rows() -> None:
    assert list(SHOWN) == [label for label, _ in ROWS]


@pytest.mark.parametrize(("label", "runs"), ROWS, ids=[label for label, _ in ROWS])
def test_each_row_is_what_the_command_gives(label: str, runs: list[dict[str, Any]]) -> None:
    _, _, wire, physical = SHOWN[label]
    for hardware, shown in (("tpuv4-wire", wire), ("tpuv4", physical)):
        for run in runs:
            result = api.collective(hardware=hardware, mesh="1x16", axis=1, bytes="64MB", **run)
            assert round(result.time_s / us, 2) == _microseconds(shown), (hardware, run)
            assert result.analytic_time_s == pytest.approx(result.time_s, rel=1e-9)


def test_the_chosen_chunk_counts_are_those_named() -> None:
    chosen = [api.collective(hardware=hardware, mesh="1x16", axis=1, bytes="64MB", **LINE, op="broadcast").chunks
              for hardware in ("tpuv4-wire", "tpuv4")]
    assert chosen == [256, 78]
    ici = load_hardware("tpuv4").ici  # type: ignore[attr-defined]
    assert (ici.link_efficiency, ici.link_bandwidth) == (0.826, 45e9)
    assert "`tpuv4` (the same links at their achievable rate, 0.826 x 45e9 B/s one way" in page("docs/network.md")


def test_the_broadcast_choices_are_the_worked_numbers() -> None:
    rows = {row[0]: row[1:] for row in table("docs/network.md", "| case | `tpuv4-wire` | `tpuv4` |")}
    runs = {"wrapped ring, chosen": {**TORUS}, "wrapped ring, `--chunks 8`": {**TORUS, "chunks": 8},
            "line, root 0, chosen": {**LINE}}
    assert list(rows) == list(runs)
    for label, run in runs.items():
        for hardware, shown in zip(("tpuv4-wire", "tpuv4"), rows[label], strict=True):
            result = api.collective(hardware=hardware, mesh="1x16", axis=1, bytes="64MB", op="broadcast", **run)
            assert round(result.time_s / us, 2) == _microseconds(shown), (hardware, label)
            if "chain of" in shown:
                assert f"chain of {result.chunks} chunks" in shown


@pytest.mark.parametrize(("hardware", "mesh", "dimensional", "snake"), [
    ("tpuv4-wire", "4x64", "The total, 364.0 us,", "= 763.0 us. On `tpuv4`"),
    ("tpuv4", "4x64", "the two are 506.73 us", "and 1175.46 us."),
    ("tpuv4-wire", "8x32", "= 402.89 us on `tpuv4-wire`", "the snake ring takes 719.89 us."),
])
def test_the_multi_axis_worked_numbers(hardware: str, mesh: str, dimensional: str, snake: str) -> None:
    text = page("docs/network.md")
    for multi_axis, sentence in (("dimensional", dimensional), ("snake", snake)):
        result = api.collective(hardware=hardware, topology="4x8x8", mesh=mesh, axis=1, op="all-gather",
                                bytes="64MB", multi_axis=multi_axis)
        figure = sentence.split(" us")[0].split()[-1]  # the number just before the first "us"
        assert sentence in text
        assert round(result.time_s / us, len(figure.partition(".")[2])) == float(figure), (multi_axis, sentence)
