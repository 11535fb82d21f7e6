"""Signals as real processes: SIGINT and SIGTERM end a command mid-simulation (exit 130 / 143), the tuner's
worker pool dies with its command however that ends, and Ctrl-C while the command line loads is one line; a wait
too long for the system (``--timeout``, ``--connect-timeout``) is refused in one line.

Each command starts in a session of its own (``start_new_session=True``); what is left of it afterwards is found
with ``ps`` by that session id. A command is signalled only once it is demonstrably running: in its event loop
(``TPUSIM_FAULT_SIMULATING_FILE`` names a file every loop creates after its first event), or with its workers up.
The bounds are liveness checks (generous), not timings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.files import TINY_GEMM_POINT, wait_until
from tpusim.cli.main import main
from tpusim.engine.signals import SIMULATING_ENV

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds a session's processes with ps")

DEADLINE_S = 60.0
"""How long a wait for a command to be running may poll (loading and building a large simulation)."""
ENDS_WITHIN_S = 10.0
"""A signalled command must have exited within this (it takes well under a second, plus freeing its memory)."""
POLL_S = 0.05
BIG_ALL_TO_ALL = ["collective", "--hardware", "tpuv4", "--topology", "torus:100x100", "--mesh", "100x100",
                  "--axis", "0", "--op", "all-to-all", "--bytes", "64MB"]
"""About 15 s of simulation: a signal sent once its loop runs lands mid-simulation."""
BIG_POINT = """\
name: big
point:
  kind: collective
  hardware: tpuv4
  topology: torus:100x100
  mesh: 100x100
  axis: 0
  op: all-to-all
  bytes: 64MB
sweep:
  grid:
    bytes: [64MB, 128MB]
"""
TUNE = ["tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "64", "--jobs", "2", "--ignore-memory"]
TUNE_PROCESSES = 5
"""The command, its two workers, their forkserver and multiprocessing's resource tracker."""


until = partial(wait_until, deadline_s=DEADLINE_S, poll_s=POLL_S)


def session(leader: int) -> list[str]:
    """``ps`` rows (pid, ppid, pgid, cmd) of the live processes in session ``leader``."""
    rows = subprocess.run(["ps", "-eo", "pid=,ppid=,pgid=,sid=,stat=,cmd="], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    found = []
    for row in rows:
        pid, ppid, pgid, sid, stat, cmd = row.split(None, 5)
        if int(sid) == leader and not stat.startswith("Z"):
            found.append(f"{pid} {ppid} {pgid} {cmd}")
    return found


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``python -m tpusim ARGS`` in ``tmp_path``, stdout and stderr to files there (an orphan would hold a
    pipe open); whatever is left of the commands when the test ends is killed."""
    monkeypatch.chdir(tmp_path)
    runs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, **env: str) -> subprocess.Popen[bytes]:
        environment = {key: value for key, value in os.environ.items() if key != SIMULATING_ENV}
        environment.update(env)
        with open(tmp_path / "stdout", "wb") as out, open(tmp_path / "stderr", "wb") as err:
            run = subprocess.Popen([sys.executable, "-m", "tpusim", *args], cwd=tmp_path, env=environment,
                                   stdout=out, stderr=err, start_new_session=True)
        runs.append(run)
        return run

    yield start
    for run in runs:
        for row in session(run.pid):
            os.kill(int(row.split()[0]), signal.SIGKILL)
        if run.poll() is None:
            run.wait()


def signal_and_wait(run: subprocess.Popen[bytes], signum: int) -> int:
    """Send ``signum`` as a terminal (SIGINT, to the process group) or ``kill`` (SIGTERM, to the command) does;
    the exit status, once the command ended within ``ENDS_WITHIN_S``."""
    if signum == signal.SIGINT:
        os.killpg(run.pid, signum)
    else:
        os.kill(run.pid, signum)
    return run.wait(timeout=ENDS_WITHIN_S)


SIGNALS = [pytest.param(signal.SIGINT, 130, id="SIGINT"), pytest.param(signal.SIGTERM, 143, id="SIGTERM")]


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_a_signal_mid_simulation_ends_a_collective_at_once(
        tmp_path: Path, started: Callable[..., subprocess.Popen[bytes]], signum: int, status: int) -> None:
    run = started(*BIG_ALL_TO_ALL, **{SIMULATING_ENV: str(tmp_path / "simulating")})
    until(lambda: (tmp_path / "simulating").exists(), "simulating")
    assert signal_and_wait(run, signum) == status
    assert (tmp_path / "stderr").read_text() == f"interrupted by {signal.Signals(signum).name}\n"
    assert (tmp_path / "stdout").read_text() == ""  # no result: the simulation did not finish
    assert session(run.pid) == []


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_a_signal_mid_simulation_ends_a_run_in_one_process_keeping_the_folder(
        tmp_path: Path, started: Callable[..., subprocess.Popen[bytes]], signum: int, status: int) -> None:
    (tmp_path / "big.yaml").write_text(BIG_POINT)
    run = started("run", "big.yaml", "--out", "out", "--quiet", **{SIMULATING_ENV: str(tmp_path / "simulating")})
    until(lambda: (tmp_path / "simulating").exists(), "simulating")
    assert signal_and_wait(run, signum) == status
    assert (tmp_path / "stderr").read_text() == (
        f"interrupted by {signal.Signals(signum).name}: 0 of 2 points finished in 'out'; run the same command with "
        "--resume to finish the rest\n")
    assert (tmp_path / "out" / "results.csv").read_text().count("\n") == 1  # the header, no point
    assert session(run.pid) == []


def tune_running(run: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: len(session(run.pid)) == TUNE_PROCESSES


@pytest.mark.slow
def test_a_killed_tuner_leaves_no_process_behind(started: Callable[..., subprocess.Popen[bytes]]) -> None:
    run = started(*TUNE)
    until(tune_running(run), "tuning on two workers")
    os.kill(run.pid, signal.SIGKILL)
    assert run.wait(timeout=ENDS_WITHIN_S) == -signal.SIGKILL
    until(lambda: session(run.pid) == [], "every worker, the forkserver and the resource tracker gone")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_a_signalled_tuner_ends_in_one_line_and_leaves_no_process_behind(
        tmp_path: Path, started: Callable[..., subprocess.Popen[bytes]], signum: int, status: int) -> None:
    run = started(*TUNE)
    until(tune_running(run), "tuning on two workers")
    assert signal_and_wait(run, signum) == status
    until(lambda: session(run.pid) == [], "every worker, the forkserver and the resource tracker gone")
    # read once every process is gone: the resource tracker, the last, would warn of leaked semaphores on its way
    # out (after the command has exited); no such warning, no worker's traceback
    assert (tmp_path / "stderr").read_text() == f"interrupted by {signal.Signals(signum).name}\n"


def pool_starting(run: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """The resource tracker and the forkserver are up (the forkserver importing tpusim: about a second) and no
    worker is yet: the command waits for its first worker."""
    return lambda: len(session(run.pid)) == TUNE_PROCESSES - 2


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_a_signal_to_the_process_group_while_the_tuners_pool_starts_is_one_line(
        tmp_path: Path, started: Callable[..., subprocess.Popen[bytes]], signum: int, status: int) -> None:
    run = started(*TUNE)
    until(pool_starting(run), "the forkserver starting")
    os.killpg(run.pid, signum)  # the forkserver, importing, hears it too
    assert run.wait(timeout=ENDS_WITHIN_S) == status
    until(lambda: session(run.pid) == [], "every worker, the forkserver and the resource tracker gone")
    # no forkserver's traceback, no worker's failure to read what the command sent it, no internal error, no
    # resource tracker's warning (read once the last process of the session is gone)
    assert (tmp_path / "stderr").read_text() == f"interrupted by {signal.Signals(signum).name}\n"


INTERRUPTED_IMPORT = """\
import importlib.abc, os, runpy, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["tpusim", "list", "hardware"]
runpy.run_module("tpusim", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(("module", "stderr"), [
    ("tpusim.cli.common", "interrupted\n"),  # while the command line loads, before its handlers are installed
    ("tpusim.cli.listing", "interrupted by SIGINT\n"),  # while the command named loads, once they are
], ids=["command-line", "command"])
@pytest.mark.slow
def test_ctrl_c_while_the_command_line_loads_is_one_line(module: str, stderr: str) -> None:
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT.format(module=module)], capture_output=True,
                          text=True, timeout=ENDS_WITHIN_S * 3)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", stderr)


@pytest.mark.parametrize("flag", ["--timeout", "--connect-timeout"])
def test_a_wait_too_long_for_the_system_is_one_line(tmp_path: Path, flag: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\n" + TINY_GEMM_POINT)
    assert main(["run", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "out"), flag, "1e10"]) == 2
    assert capsys.readouterr() == ("", f"{flag} 10000000000.0 is too long; valid: seconds > 0 and <= 1e+06\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["1e10", "1e308", "1e400", "inf", "nan", "-inf"])
@pytest.mark.parametrize("flag", ["--timeout", "--connect-timeout"])
def test_a_wait_beyond_the_system_or_any_float_is_one_line(tmp_path: Path, flag: str, value: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\n" + TINY_GEMM_POINT)
    assert main(["run", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "out"), f"{flag}={value}"]) == 2
    number = float(value)
    line = (f"{flag} {number!r} is too long; valid: seconds > 0 and <= 1e+06\n" if number < float("inf") and number > 0
            else f"{flag} {value!r} must be a finite number > 0\n")
    assert capsys.readouterr() == ("", line)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("value", "tail"), [
    (1e10, "10000000000.0 is too long; valid: seconds > 0 and <= 1e+06"),
    (1e308, "1e+308 is too long; valid: seconds > 0 and <= 1e+06"),
    (10**400, "1" + "0" * 76 + "... (401 characters) is too long; valid: seconds > 0 and <= 1e+06"),
    (-10**400, "-" + "1" + "0" * 75 + "... (402 characters) must be a finite number of seconds > 0"),
    (float("inf"), "inf must be a finite number of seconds > 0"),
    (float("nan"), "nan must be a finite number of seconds > 0"),
], ids=["1e10", "1e308", "10**400", "-10**400", "inf", "nan"])
@pytest.mark.parametrize("option", ["timeout", "connect_timeout"])
def test_an_api_wait_beyond_the_system_or_any_float_is_a_user_error(tmp_path: Path, option: str, value: float,
                                                                    tail: str) -> None:
    from tpusim import api
    from tpusim.errors import UserError

    (tmp_path / "tiny.yaml").write_text("name: tiny\n" + TINY_GEMM_POINT)
    with pytest.raises(UserError) as refused:  # 10**400 was an OverflowError (math.isfinite of a huge int)
        api.run_experiment(tmp_path / "tiny.yaml", tmp_path / "out", **_options(option, value))
    assert refused.value.message == f"--{option.replace('_', '-')} {tail}"
    assert not (tmp_path / "out").exists()


def _options(option: str, value: object) -> dict[str, Any]:
    """``{option: value}`` as keyword arguments of any type (the point is a wrong one)."""
    return {option: value}
