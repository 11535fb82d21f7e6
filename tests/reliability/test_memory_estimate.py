"""Runs whose estimated memory exceeds what the process may use are refused before they start (docs/limits.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tpusim.cli.main import main
from tpusim.experiments.footprint import BASE_BYTES, CHIP_POWER, FULL_BYTES_PER_CHIP_POWER
from tpusim.limits import MEMORY_ENV, available_memory

POD_STEP = ["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--topology", "16x16x16", "--mesh", "256x16",
            "--algorithm", "collective", "--ignore-memory"]
VERIFIED_GEMM = ["gemm", "--hardware", "meshslice-sim", "--mesh", "4x4", "--algorithm", "collective",
                 "--dataflow", "os", "--m", "2048", "--n", "2048", "--k", "2048", "--verify"]


def test_a_full_fidelity_pod_step_beyond_the_memory_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(10**9))
    status = main([*POD_STEP, "--fidelity", "full"])
    err = capsys.readouterr().err.strip().splitlines()
    needed = BASE_BYTES + FULL_BYTES_PER_CHIP_POWER * 4096**CHIP_POWER
    assert status == 2
    assert err == [f"a full-fidelity step on 4096 chips needs about {needed / 1e9:g} GB by tpusim's measured "
                   "estimate, more than the 1 GB available here; use fidelity auto or symmetric, or fewer chips, or "
                   f"set {MEMORY_ENV}=N if the estimate is wrong for this machine (see docs/limits.md)"]


def test_a_verified_gemm_beyond_the_memory_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(10**8))
    assert main(VERIFIED_GEMM) == 2
    assert "a verified GeMM of M=2048 N=2048 K=2048 on 16 chips needs about" in capsys.readouterr().err
    monkeypatch.setenv(MEMORY_ENV, str(10**10))
    assert main([*VERIFIED_GEMM, "--json"]) == 0  # the same run, with the memory it needs


def test_the_address_space_limit_counts_as_the_memory_available() -> None:
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, resource.RLIM_INFINITY));"
            "from tpusim.cli.main import main; raise SystemExit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, *POD_STEP, "--fidelity", "full"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "more than the 1.5 GB available here" in done.stderr


def test_a_bad_memory_override_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(Exception, match=f"{MEMORY_ENV} 'lots' must be an integer number of bytes >= 1"):
        available_memory()
