"""`gemm --slow-chip` and `--slow-link` have an effect: a straggler's products take FACTOR times as long, in the
simulation, its closed form and `--fidelity analytic`; slow links in the simulation, refused under analytic."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tpusim import api
from tpusim.cli.main import main
from tpusim.errors import InfeasibleError

# a collective GeMM on a 2x2 line mesh: compute and communication alternate without overlap, so a straggler's
# extra compute adds to the step whole
GEMM: dict[str, Any] = {"hardware": "tpuv4", "mesh": "2x2", "algorithm": "collective", "dataflow": "os",
                        "m": 2048, "n": 2048, "k": 2048}
FACTOR = 10.0


def test_a_slow_chip_slows_the_gemm_by_its_extra_compute() -> None:
    base = api.gemm(**GEMM)
    slowed = api.gemm(**GEMM, slow_chips=[f"0:{FACTOR:g}"])
    analytic = api.gemm(**GEMM, slow_chips=[f"0:{FACTOR:g}"], fidelity="analytic")
    assert base.compute_s is not None and slowed.compute_s is not None
    expected = base.time_s + (FACTOR - 1) * base.compute_s  # compute fully exposed on this mapping
    assert slowed.time_s == pytest.approx(expected, rel=1e-9, abs=0)
    assert slowed.compute_s == pytest.approx(FACTOR * base.compute_s, rel=1e-9, abs=0)
    assert slowed.analytic_time_s == pytest.approx(expected, rel=1e-9, abs=0)
    assert analytic.time_s == pytest.approx(expected, rel=1e-9, abs=0)
    assert slowed.fidelity == "full"


def test_slow_links_on_every_axis_equal_a_profile_with_that_bandwidth() -> None:
    slowed = api.gemm(**GEMM, slow_links=["y:2", "z:2"])  # tpuv4:1x2x2: the mesh's links run along y and z
    halved = api.gemm(**GEMM, scale={"beta": 0.5}, fidelity="full")
    assert slowed.time_s == pytest.approx(halved.time_s, rel=1e-9, abs=0)
    assert slowed.time_s > api.gemm(**GEMM).time_s * 1.5
    assert "per-link overrides: the closed form describes the network without them" in slowed.notes
    with pytest.raises(InfeasibleError, match=r"^fidelity analytic: the closed form describes the network without "
                                              r"--slow-link overrides$"):
        api.gemm(**GEMM, slow_links=["y:2"], fidelity="analytic")


def test_gemm_command_line_slow_chip_changes_the_printed_time(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["gemm", "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "collective", "--dataflow", "os",
            "--m", "256", "--n", "256", "--k", "256", "--json"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--slow-chip", "0:10"]) == 0
    slow = capsys.readouterr().out
    assert json.loads(slow)["time_s"] > json.loads(plain)["time_s"]
    assert main([*argv, "--slow-chip", "4:10"]) == 2
    assert capsys.readouterr().err == "--slow-chip '4:10': chip 4 does not exist; valid: 0..3\n"
