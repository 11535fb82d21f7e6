"""``tpusim run --executor dask`` against a real Dask cluster the test starts: a worker killed by its pid while it
runs a point, and a scheduler without workers.

The cluster is a ``distributed.LocalCluster`` of worker processes in this test's process, its scheduler set to
retry nothing on its own (``allowed_failures=0``, as the cluster a run starts for itself), so every retry seen is
tpusim's. The run is a real ``tpusim run`` process given the scheduler's address. Point 1 is a full-fidelity step
of a few seconds, so it is still running when the test, having seen its key being processed on a worker, kills
that worker with SIGKILL; the other points take a fraction of a second. Waits poll observable state with a deadline
(a liveness bound, not a timing).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.files import TINY_GEMM_POINT, wait_until
from tpusim.experiments.executors import DEAD_TWICE

distributed = pytest.importorskip("distributed")

SLOW_SECOND = """\
name: slow-second
point:
  kind: step
  model: gpt3-175b
  hardware: tpuv4
  algorithm: collective
  fidelity: full
  ignore_memory: true
  mesh: 2x2
sweep:
  grid:
    mesh: [2x2, 8x8, 2x4, 4x2]
"""
"""Four full-fidelity steps: point 1 (8x8) takes seconds, the others a fraction of a second each."""
TINY_TWO = "name: tiny\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    m: [64, 128]\n"
POINTS = 4
SLOW = 1
DEADLINE_S = 120.0
"""The longest a wait polls before the test fails (starting workers and running the sweep take seconds)."""
POLL_S = 0.02
NO_WORKER_WAIT_S = 2.0
"""``--connect-timeout`` of the runs left without workers: long enough to connect to a local scheduler."""

until = partial(wait_until, deadline_s=DEADLINE_S, poll_s=POLL_S)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "slow.yaml").write_text(SLOW_SECOND)
    return tmp_path


def _cluster(workers: int) -> Any:
    return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                    scheduler_kwargs={"allowed_failures": 0})


@pytest.fixture
def cluster() -> Iterator[tuple[Any, Any]]:
    """A cluster of two worker processes, and a client of it for the test to look inside."""
    local = _cluster(2)
    client = distributed.Client(local, set_as_default=False)
    yield local, client
    client.close()
    local.close()


@pytest.fixture
def runs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The runs a test started: any still going when it ends is killed, so a failing test leaves nothing."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for run in started:
        if run.poll() is None:
            run.kill()
            run.wait()


def start(folder: Path, runs: list[subprocess.Popen[bytes]], scheduler: str, *extra: str) -> subprocess.Popen[bytes]:
    with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
        run = subprocess.Popen([sys.executable, "-m", "tpusim", "run", "slow.yaml", "--out", "out", "--quiet",
                                "--executor", "dask", "--scheduler", scheduler, *extra], cwd=folder, stdout=out,
                               stderr=err, start_new_session=True)
    runs.append(run)
    return run


def processing(client: Any, key: str) -> str | None:
    """The address of the worker processing task ``key``, None while none is."""
    for address, keys in client.processing().items():
        if key in keys:
            return str(address)
    return None


def kill_worker_running(client: Any, key: str) -> None:
    """SIGKILL the worker process that is running task ``key``, once one is."""
    address: str | None = None

    def seen() -> bool:
        nonlocal address
        address = processing(client, key)
        return address is not None

    until(seen, f"running {key} on a worker")
    assert address is not None
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)


def points(folder: Path) -> list[dict[str, Any]]:
    return list(json.loads((folder / "out" / "results.json").read_text())["points"])


@pytest.mark.slow
def test_a_point_whose_worker_is_killed_runs_once_more_and_finishes(
        folder: Path, cluster: tuple[Any, Any], runs: list[subprocess.Popen[bytes]]) -> None:
    local, client = cluster
    run = start(folder, runs, local.scheduler_address)
    kill_worker_running(client, f"tpusim-point-{SLOW}")
    assert run.wait(timeout=DEADLINE_S) == 0
    assert (folder / "stderr").read_text() == ""
    assert (folder / "stdout").read_text() == f"{POINTS} of {POINTS} points in out: results.csv, results.json, " \
                                              "run_meta.json\n"
    finished = points(folder)
    assert [(p["index"], p["error"], "stopped" in p) for p in finished] == [(i, None, False) for i in range(POINTS)]
    assert finished[SLOW]["result"]["mesh"] == "8x8"


@pytest.mark.slow
def test_a_point_whose_worker_dies_twice_is_its_error_row_and_the_others_finish(
        folder: Path, cluster: tuple[Any, Any], runs: list[subprocess.Popen[bytes]]) -> None:
    local, client = cluster
    run = start(folder, runs, local.scheduler_address)
    kill_worker_running(client, f"tpusim-point-{SLOW}")
    kill_worker_running(client, f"tpusim-point-{SLOW}-try-2")
    assert run.wait(timeout=DEADLINE_S) == 1
    assert (folder / "stderr").read_text() == (
        f"1 of {POINTS} points stopped before finishing ({DEAD_TWICE}); their rows in 'out' say so, the other points "
        "finished\nrerun with --resume to run them again\n")
    finished = points(folder)
    assert [(p["index"], p["error"], p.get("stopped", False)) for p in finished] == [
        (0, None, False), (SLOW, DEAD_TWICE, True), (2, None, False), (3, None, False)]
    assert finished[SLOW]["result"] == {} and all(p["result"] for p in finished if p["index"] != SLOW)
    with open(folder / "out" / "results.csv", newline="") as table:
        assert [row["error"] for row in csv.DictReader(table)] == ["none", DEAD_TWICE, "none", "none"]
    # --resume runs the stopped point again (its worker is left alone now), and only it
    resumed = start(folder, runs, local.scheduler_address, "--resume")
    assert resumed.wait(timeout=DEADLINE_S) == 0
    assert (folder / "stdout").read_text() == f"{POINTS} of {POINTS} points in out ({POINTS - 1} resumed): " \
                                              "results.csv, results.json, run_meta.json\n"
    assert [(p["error"], "stopped" in p) for p in points(folder)] == [(None, False)] * POINTS


def test_a_scheduler_without_workers_ends_the_run_after_the_connect_timeout(
        folder: Path, runs: list[subprocess.Popen[bytes]]) -> None:
    local = _cluster(0)
    try:
        run = start(folder, runs, local.scheduler_address, "--connect-timeout", f"{NO_WORKER_WAIT_S:g}")
        status = run.wait(timeout=DEADLINE_S)
    finally:
        local.close()
    assert (status, (folder / "stderr").read_text()) == (2, (
        f"the Dask scheduler {local.scheduler_address!r} has had no workers for {NO_WORKER_WAIT_S:g} s "
        f"(--connect-timeout sets the wait): 0 of {POINTS} points finished in 'out'; start workers for it and run "
        "the same command with --resume to finish the rest\n"))
    assert json.loads((folder / "out" / "results.json").read_text())["points_finished"] == 0


@pytest.mark.slow
def test_a_cluster_whose_last_worker_goes_ends_the_run_keeping_the_finished_points(
        folder: Path, runs: list[subprocess.Popen[bytes]]) -> None:
    local = _cluster(1)
    client = distributed.Client(local, set_as_default=False)
    try:
        run = start(folder, runs, local.scheduler_address, "--connect-timeout", f"{NO_WORKER_WAIT_S:g}")
        until(lambda: processing(client, f"tpusim-point-{SLOW}") is not None, "running the slow point")
        local.scale(0)  # point 0 has finished: one point runs at a time on one worker thread
        status = run.wait(timeout=DEADLINE_S)
    finally:
        client.close()
        local.close()
    assert (status, (folder / "stderr").read_text()) == (2, (
        f"the Dask scheduler {local.scheduler_address!r} has had no workers for {NO_WORKER_WAIT_S:g} s "
        f"(--connect-timeout sets the wait): 1 of {POINTS} points finished in 'out'; start workers for it and run "
        "the same command with --resume to finish the rest\n"))
    assert [(p["index"], p["error"]) for p in points(folder)] == [(0, None)]


@pytest.mark.slow
def test_a_local_cluster_starts_at_most_one_worker_per_cpu(folder: Path) -> None:
    # issue 26, lower item: --jobs 64 started 64 worker processes on 2 CPUs
    cpus = os.cpu_count() or 1
    (folder / "tiny.yaml").write_text(TINY_TWO)
    done = subprocess.run([sys.executable, "-m", "tpusim", "run", "tiny.yaml", "--out", "out", "--executor", "dask",
                           "--jobs", str(cpus + 62), "--json"], cwd=folder, capture_output=True, text=True,
                          timeout=DEADLINE_S, check=False)
    assert (done.returncode, "Traceback" in done.stderr) == (0, False), done.stderr
    summary = json.loads(done.stdout)
    assert summary["points_finished"] == 2
    assert any(note.startswith(f"--jobs {cpus + 62} is more than this machine's {cpus} CPUs; ran {cpus} worker "
                               "processes") for note in summary["notes"])
