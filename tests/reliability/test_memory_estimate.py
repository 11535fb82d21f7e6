"""Runs whose estimated memory exceeds what the process may use are refused before they start (docs/limits.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.small_model import SMALL_MODEL_YAML
from tpusim.cli.main import main
from tpusim.engine.footprint import BYTES_PER_EVENT
from tpusim.engine.simulation import CountingEnvironment
from tpusim.experiments.footprint import (
    BASE_BYTES,
    BYTES_PER_TRANSFER,
    CHIP_POWER,
    FULL_BYTES_PER_CHIP_POWER,
    collective_transfers,
)
from tpusim.limits import MEMORY_ENV, available_memory
from tpusim.units import format_size
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


@pytest.mark.slow
def test_a_verified_gemm_beyond_the_memory_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(MEMORY_ENV, str(10**8))
    assert main(VERIFIED_GEMM) == 2
    assert "a verified GeMM of M=2048 N=2048 K=2048 on 16 chips needs about" in capsys.readouterr().err
    monkeypatch.setenv(MEMORY_ENV, str(10**10))
    assert main([*VERIFIED_GEMM, "--json"]) == 0  # the same run, with the memory it needs


@pytest.mark.slow
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


@pytest.mark.slow
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


def _deep_model(folder: Path, layers: int, name: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(SMALL_MODEL_YAML.replace("layers: 2", f"layers: {layers}").replace("small-test", name))
    return str(path)


def _every_layer(model: str) -> list[str]:
    return ["step", "--model", model, "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "collective",
            "--all-layers", "--ignore-memory", "--json"]


@pytest.mark.slow
def test_every_layer_is_estimated_from_two_windows_and_refused_beyond_the_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs: list[CountingEnvironment] = []
    start = CountingEnvironment.__init__

    def counted(env: CountingEnvironment) -> None:
        start(env)
        runs.append(env)

    monkeypatch.setattr(CountingEnvironment, "__init__", counted)
    argv = _every_layer(_deep_model(tmp_path, 12, "deep12"))
    monkeypatch.setenv(MEMORY_ENV, str(10**12))
    assert main(argv) == 0
    capsys.readouterr()
    # two windows (2 and 3 layers) estimate the run, then the 12 layers run: one more layer adds the same events,
    # so the estimate is the run's own count (the runs before them are the cost estimate's probes)
    probe2, probe3, whole = (env.events_processed for env in runs[-3:])
    assert whole == probe2 + 10 * (probe3 - probe2)
    needed = int(BASE_BYTES + BYTES_PER_EVENT * whole)
    monkeypatch.setenv(MEMORY_ENV, str(needed - 1))
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"simulating every one of the 12 layers of deep12 ({whole} events) needs about {format_size(needed)} by "
        f"tpusim's measured estimate, more than the {format_size(needed - 1)} available here; simulate a window "
        "of layers and extrapolate (drop --all-layers), or use fewer layers, or set "
        f"{MEMORY_ENV}=N if the estimate is wrong for this machine (see docs/limits.md)\n")
    monkeypatch.setenv(MEMORY_ENV, str(needed))
    assert main(argv) == 0


@pytest.mark.slow
def test_a_million_layers_with_every_layer_simulated_is_refused_in_seconds(tmp_path: Path) -> None:
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4_000_000_000, resource.RLIM_INFINITY));"
            "from tpusim.cli.main import main; raise SystemExit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, *_every_layer(_deep_model(tmp_path, 10**6, "deep1m"))],
                          capture_output=True, text=True, timeout=120)
    events = 701 * 10**6 + 3  # the 2x2 collective step's 701 events per layer, and 3 more per run
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (  # as docs/limits.md#memory-estimate quotes it
        f"simulating every one of the 1000000 layers of deep1m ({events} events) needs about "
        f"{format_size(int(BASE_BYTES + BYTES_PER_EVENT * events))} by tpusim's measured estimate, more than the "
        "4 GB available here; simulate a window of layers and extrapolate (drop --all-layers), or use fewer "
        f"layers, or set {MEMORY_ENV}=N if the estimate is wrong for this machine (see docs/limits.md)\n")


def test_a_pod_step_is_charged_its_data_parallel_collectives(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # 16 replicas of 16x16: the data axis's 256 groups of 16 ranks on closed rings, every shard both ways, for the
    # reduce-scatter and the all-gather
    transfers = 2 * 256 * 16 * 15 * 2
    needed = int(BASE_BYTES + BYTES_PER_TRANSFER * transfers)
    monkeypatch.setenv(MEMORY_ENV, str(needed - 1))
    argv = ["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--mesh", "16x16x16", "--slices", "4"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"the data-parallel collectives of a step over 16 replicas of 256 chips ({transfers} transfers) needs about "
        f"{format_size(needed)} by tpusim's measured estimate, more than the {format_size(needed - 1)} available "
        f"here; use fewer data-parallel replicas or fewer chips, or set {MEMORY_ENV}=N if the estimate is wrong "
        "for this machine (see docs/limits.md)\n")


def _tuned_on_16_chips(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                       memory: int) -> tuple[dict[str, str], dict[str, Any]]:
    monkeypatch.setenv(MEMORY_ENV, str(memory))
    argv = ["tune", "--model", "llama3.1-8b", "--hardware", "tpuv4", "--chips", "16", "--batch", "16",
            "--ignore-memory", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    skipped = {r["mesh"]: r["reason"] for r in result["meshes"]
               if r["status"] == "skipped" and "simulating it needs about" in r["reason"]}
    return skipped, result


@pytest.mark.slow
def test_the_tuner_skips_layouts_this_machine_cannot_simulate(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    skipped, _ = _tuned_on_16_chips(monkeypatch, capsys, 10**12)
    assert skipped == {}
    # a full-fidelity step on 16 chips needs 48.48 MB, the 16 replicas of one chip 2 x 16 x 15 x 2 transfers
    full = int(BASE_BYTES + FULL_BYTES_PER_CHIP_POWER * 16**CHIP_POWER)
    data = int(BASE_BYTES + BYTES_PER_TRANSFER * 2 * 16 * 15 * 2)
    assert data < full
    skipped, result = _tuned_on_16_chips(monkeypatch, capsys, full - 1)
    assert skipped and all("(a full-fidelity step on 16 chips)" in reason for reason in skipped.values())
    assert "16x1x1" not in skipped and result["best"]["mesh"] not in skipped
    assert f"{len(skipped)} layout(s) skipped: simulating them needs more memory" in " ".join(result["notes"])
    skipped, result = _tuned_on_16_chips(monkeypatch, capsys, data - 1)
    assert "data-parallel collectives of a step over 16 replicas of 1 chips (960 transfers)" in skipped["16x1x1"]
    assert result["best"]["mesh"] not in skipped
