"""Runs whose estimated memory exceeds what the process may use are refused before they start (docs/limits.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tpusim.cli.main import main
from tpusim.experiments.footprint import (
    BASE_BYTES,
    BYTES_PER_TRANSFER,
    CHIP_POWER,
    FULL_BYTES_PER_CHIP_POWER,
    collective_transfers,
)
from tpusim.limits import MEMORY_ENV, available_memory
from tpusim.vocabulary import CollectiveOp, Ring

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


LINE_ALL_GATHER = ["collective", "--hardware", "tpuv4", "--topology", "mesh:65536x1", "--mesh", "65536x1",
                   "--axis", "0", "--op", "all-gather", "--bytes", "64MiB"]


def test_a_65536_chip_line_collective_is_refused_before_it_runs() -> None:
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2_000_000_000, resource.RLIM_INFINITY));"
            "from tpusim.cli.main import main; raise SystemExit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, *LINE_ALL_GATHER], capture_output=True, text=True,
                          timeout=60)
    transfers = 65536 * 65535  # every rank's shard relayed to every other rank of the one line
    needed = BASE_BYTES + BYTES_PER_TRANSFER * transfers
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"the all-gather over groups of 65536 of 65536 chips ({transfers} transfers) needs about "
                           f"{needed / 1e9:.6g} GB by tpusim's measured estimate, more than the 2 GB available here; "
                           f"use fewer chips on the axis or fewer --chunks, or set {MEMORY_ENV}=N if the estimate is "
                           "wrong for this machine (see docs/limits.md)\n")


@pytest.mark.parametrize("op, closed, ring, chunks, expected", [
    (CollectiveOp.ALL_GATHER, False, Ring.BIDIRECTIONAL, 1, 1024 * 1023),  # measured: 1,047,552 on a 1024 line
    (CollectiveOp.ALL_GATHER, True, Ring.BIDIRECTIONAL, 1, 64 * 64 * 63 * 2),  # measured: 516,096 on a 64x64 torus
    (CollectiveOp.ALL_GATHER, False, Ring.BIDIRECTIONAL, 4, 1024 * 1023 * 4),  # measured: 4,190,208
    (CollectiveOp.ALL_REDUCE, True, Ring.UNIDIRECTIONAL, 1, 64 * 64 * 63 * 2),
    (CollectiveOp.BROADCAST, False, Ring.BIDIRECTIONAL, 8, 64 * 63 * 8),
    (CollectiveOp.SHIFT, True, Ring.BIDIRECTIONAL, 1, 64 * 64),
])
def test_collective_transfers_count_the_message_pattern(op: CollectiveOp, closed: bool, ring: Ring, chunks: int,
                                                        expected: int) -> None:
    chips, group = (1024, 1024) if expected % 1023 == 0 else (4096, 64)
    assert collective_transfers(op, chips, group, chunks, closed=closed, ring=ring) == expected


def test_a_collective_within_the_memory_still_runs(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "--hardware", "tpuv4", "--topology", "mesh:16x1", "--mesh", "16x1", "--axis", "0",
            "--op", "all-gather", "--bytes", "1MiB", "--json"]
    monkeypatch.setenv(MEMORY_ENV, str(int(BASE_BYTES + BYTES_PER_TRANSFER * 16 * 15)))
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["transfers"] == 16 * 15  # the estimate's count, as simulated
    monkeypatch.setenv(MEMORY_ENV, str(int(BASE_BYTES + BYTES_PER_TRANSFER * 16 * 15) - 1))
    assert main(argv) == 2
