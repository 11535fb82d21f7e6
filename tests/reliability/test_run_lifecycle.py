"""``tpusim run`` as real processes: interrupts, a killed parent, stuck points, a shared output folder, Dask
addresses that are wrong or lead nowhere, and result files that cannot be written.

Runs start with ``start_new_session=True``, so every process of one run (the parent and its workers) is in a
session of its own, found through /proc. Points that must still be running when something happens to the run
hang through the ``TPUSIM_FAULT_HANG_POINT`` hook; waits poll with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.reliability.files import TINY_GEMM_POINT, wait_until
from tpusim.cli.main import main
from tpusim.experiments.jobs import HANG_ENV
from tpusim.experiments.run import FAULT_ENV

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds a run's processes in /proc")

TINY = "name: tiny\n" + TINY_GEMM_POINT + """\
sweep:
  grid:
    m: [64, 128, 256, 512]
"""
POINTS = 4
DEADLINE_S = 8.0
"""The longest any wait polls before the test fails (the run's own reactions take well under a second)."""
POLL_S = 0.02
RUN = [sys.executable, "-m", "tpusim", "run", "tiny.yaml", "--out", "out", "--quiet"]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def start(folder: Path, *extra: str, hang: str = "", **env: str) -> subprocess.Popen[bytes]:
    """``tpusim run tiny.yaml --out out`` in a session of its own; stdout and stderr go to files (a worker that
    outlived its parent would otherwise hold a pipe open)."""
    environment = {key: value for key, value in os.environ.items() if key not in (HANG_ENV, FAULT_ENV)}
    environment.update(env, **({HANG_ENV: hang} if hang else {}))
    with open(folder / "stdout", "wb") as out, open(folder / "stderr", "wb") as err:
        return subprocess.Popen([*RUN, *extra], cwd=folder, env=environment, stdout=out, stderr=err,
                                start_new_session=True)


def finish(folder: Path, *extra: str, hang: str = "", **env: str) -> tuple[int, str]:
    """Run to the end: exit status and stderr."""
    process = start(folder, *extra, hang=hang, **env)
    return process.wait(timeout=DEADLINE_S * 4), (folder / "stderr").read_text()


until = partial(wait_until, deadline_s=DEADLINE_S, poll_s=POLL_S)


def session(leader: int) -> list[int]:
    """The live processes of session ``leader`` (zombies are dead, waiting to be reaped, and left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while being looked at
            continue
        state, sid = fields[0], int(fields[3])
        if sid == leader and state != "Z":
            found.append(int(entry.name))
    return found


def workers(run: subprocess.Popen[bytes]) -> list[int]:
    return [pid for pid in session(run.pid) if pid != run.pid]


def finished(folder: Path) -> int:
    try:
        return int(json.loads((folder / "out" / "results.json").read_text())["points_finished"])
    except (OSError, ValueError, KeyError):
        return -1


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs a test started: whatever of them is left when it ends is killed, so a failing test leaves nothing."""
    runs: list[subprocess.Popen[bytes]] = []
    yield runs
    for run in runs:
        for pid in session(run.pid):
            os.kill(pid, signal.SIGKILL)
        if run.poll() is None:
            run.wait()


def two_points_hanging(folder: Path, runs: list[subprocess.Popen[bytes]], **env: str) -> subprocess.Popen[bytes]:
    """A run on two workers whose point 0 finished and whose points 1 and 2 hang in the workers."""
    run = start(folder, "--jobs", "2", hang="1,2,3", **env)
    runs.append(run)
    until(lambda: finished(folder) == 1 and len(workers(run)) == 2, "one point written and two workers busy")
    return run


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two worker processes")
@pytest.mark.parametrize(("name", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.slow
def test_an_interrupt_stops_the_workers_keeps_the_finished_points_and_resume_completes(
        folder: Path, reaper: list[subprocess.Popen[bytes]], name: str, status: int) -> None:
    run = two_points_hanging(folder, reaper)
    if name == "SIGINT":  # Ctrl-C: the terminal signals the whole process group
        os.killpg(run.pid, signal.SIGINT)
    else:
        os.kill(run.pid, signal.SIGTERM)
    assert run.wait(timeout=DEADLINE_S) == status
    assert (folder / "stderr").read_text() == (
        f"interrupted by {name}: 1 of {POINTS} points finished in 'out'; run the same command with --resume to "
        "finish the rest\n")
    until(lambda: not session(run.pid), "every worker gone")
    assert finished(folder) == 1
    assert len((folder / "out" / "results.csv").read_text().splitlines()) == 2
    assert not list((folder / "out").glob("*.tmp"))
    assert finish(folder, "--resume") == (0, "")
    assert finished(folder) == POINTS
    assert (folder / "stdout").read_text().startswith(f"{POINTS} of {POINTS} points in out (1 resumed)")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two worker processes")
@pytest.mark.parametrize("death", ["SIGKILL", FAULT_ENV])
@pytest.mark.slow
def test_workers_die_with_a_killed_parent(folder: Path, reaper: list[subprocess.Popen[bytes]], death: str) -> None:
    if death == FAULT_ENV:  # the run kills itself with SIGKILL after writing its first point
        run = start(folder, "--jobs", "2", hang="1,2,3", **{FAULT_ENV: "1"})
        reaper.append(run)
    else:
        run = two_points_hanging(folder, reaper)
        os.kill(run.pid, signal.SIGKILL)
    assert run.wait(timeout=DEADLINE_S) == -signal.SIGKILL
    until(lambda: not session(run.pid), "every worker gone")
    assert finished(folder) == 1


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.slow
def test_a_point_past_its_timeout_is_stopped_and_the_sweep_goes_on(
        folder: Path, reaper: list[subprocess.Popen[bytes]], jobs: str) -> None:
    run = start(folder, "--jobs", jobs, "--timeout", "0.5", hang="1")
    reaper.append(run)
    assert run.wait(timeout=DEADLINE_S) == 1
    assert (folder / "stderr").read_text() == (
        f"1 of {POINTS} points stopped before finishing (timed out: stopped after --timeout 0.5 s); their rows in "
        "'out' say so, the other points finished\n"
        "rerun with --resume (and a larger --timeout) to run them again\n")
    until(lambda: not session(run.pid), "every worker gone")
    points = json.loads((folder / "out" / "results.json").read_text())["points"]
    assert [(p["index"], p["error"], p.get("stopped", False)) for p in points] == [
        (0, None, False), (1, "timed out: stopped after --timeout 0.5 s", True), (2, None, False), (3, None, False)]
    assert all(p["result"] for p in points if p["index"] != 1)
    csv_errors = [line.rsplit(",", 1)[1] for line in (folder / "out" / "results.csv").read_text().splitlines()]
    assert csv_errors == ["error", "none", "timed out: stopped after --timeout 0.5 s", "none", "none"]
    # --resume runs the stopped point again (here it no longer hangs)
    assert finish(folder, "--resume") == (0, "")
    points = json.loads((folder / "out" / "results.json").read_text())["points"]
    assert [(p["error"], "stopped" in p) for p in points] == [(None, False)] * POINTS


def lock_holder(folder: Path) -> dict[str, object]:
    try:
        found = json.loads((folder / "out" / ".lock").read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


@pytest.mark.slow
def test_a_busy_folder_is_refused_naming_its_holder_and_a_dead_holder_does_not_block(
        folder: Path, reaper: list[subprocess.Popen[bytes]]) -> None:
    holder = start(folder, hang="0")  # --jobs 1 without --timeout: the run itself hangs, holding the lock
    reaper.append(holder)
    until(lambda: lock_holder(folder).get("pid") == holder.pid, "locked by the first run")
    command = str(lock_holder(folder)["command"])
    assert command.endswith("run tiny.yaml --out out --quiet")
    status, err = finish(folder)
    assert (status, err) == (2, f"output folder 'out' is in use by another run (pid {holder.pid}: {command}); wait "
                                "for it to finish or give another --out folder\n")
    holder.kill()
    holder.wait()
    assert lock_holder(folder)["pid"] == holder.pid  # the stale lock file stays; its holder is dead
    assert finish(folder) == (0, "")
    assert finished(folder) == POINTS


@pytest.mark.slow
def test_concurrent_runs_into_one_folder_never_crash(folder: Path, reaper: list[subprocess.Popen[bytes]]) -> None:
    runs = []
    for number in range(3):
        log = folder / f"stderr{number}"
        with open(log, "wb") as err:
            runs.append((subprocess.Popen(RUN, cwd=folder, stdout=subprocess.DEVNULL, stderr=err,
                                          start_new_session=True), log))
    reaper.extend(run for run, _ in runs)
    outcomes = [(run.wait(timeout=DEADLINE_S * 4), log.read_text()) for run, log in runs]
    assert 0 in [status for status, _ in outcomes]
    for status, err in outcomes:
        assert status in (0, 2)
        if status == 2:
            assert err.startswith("output folder 'out' is in use by another run (pid ") and err.count("\n") == 1
        else:
            assert err == ""
    assert finished(folder) == POINTS
    assert not list((folder / "out").glob("*.tmp"))


@pytest.mark.parametrize("address", ["not a url", "http://127.0.0.1:8786", "tcp://127.0.0.1", "tcp://:8786",
                                     "tcp://127.0.0.1:port"])
def test_a_malformed_scheduler_address_is_one_line(folder: Path, capsys: pytest.CaptureFixture[str],
                                                   address: str) -> None:
    assert main(["run", "tiny.yaml", "--out", "out", "--executor", "dask", "--scheduler", address]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"--scheduler {address!r} is not a scheduler address")
    assert err.endswith("; valid: tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786\n") and err.count("\n") == 1
    assert not (folder / "out").exists()  # refused before anything was written


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.mark.slow
def test_a_scheduler_that_is_not_dask_ends_in_one_line_after_the_connect_timeout(folder: Path) -> None:
    pytest.importorskip("distributed")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        address = f"tcp://127.0.0.1:{server.server_address[1]}"
        status, err = finish(folder, "--executor", "dask", "--scheduler", address, "--connect-timeout", "0.5")
    finally:
        server.shutdown()
        server.server_close()
    assert (status, err) == (2, f"--scheduler {address!r}: no Dask scheduler connection (no answer within 0.5 s); "
                                "is it a Dask scheduler? (--connect-timeout sets the wait)\n")


@pytest.mark.slow
def test_a_scheduler_address_where_nothing_listens_is_one_line(folder: Path) -> None:
    pytest.importorskip("distributed")
    with socket.socket() as bound:  # bound, never listening: connections to it are refused
        bound.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{bound.getsockname()[1]}"
        status, err = finish(folder, "--executor", "dask", "--scheduler", address)
    assert (status, err) == (2, f"--scheduler {address!r}: cannot connect (Connection refused)\n")


FILE_SIZE_LIMIT = 3000
"""Bytes: room for the files of no finished point, not for results.json with one."""
LIMITED = f"""\
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT}))
from tpusim.cli.main import main
raise SystemExit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_a_file_size_limit_ends_the_run_in_one_line_with_valid_files_and_no_temporary(folder: Path) -> None:
    done = subprocess.run([sys.executable, "-c", LIMITED, *RUN[3:]], cwd=folder, capture_output=True, text=True,
                          timeout=DEADLINE_S * 4)
    assert (done.returncode, done.stderr) == (2, "cannot write the results in 'out': File too large; the files there "
                                                 "stay as they were last written\n")
    assert sorted(p.name for p in (folder / "out").iterdir()) == [".key", ".lock", "results.csv", "results.json",
                                                                 "results.jsonl", "run_meta.json"]
    assert json.loads((folder / "out" / "results.json").read_text())["points_finished"] == 0
    assert (folder / "out" / "results.csv").read_text().startswith("index,")


def test_a_folder_name_too_long_is_one_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "d" * 300
    assert main(["run", "tiny.yaml", "--out", name]) == 2
    assert capsys.readouterr().err == f"output folder {name!r} is not writable: File name too long\n"
