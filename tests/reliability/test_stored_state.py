"""Stored state is verified, never believed on its word: tampered finished points, profiles edited between a kill
and a resume, results written per point without rewriting every earlier one, a re-run that keeps the old results
until it has new ones, and both result files consistent once a kill between their writes is repaired.

Kills are real: the run kills itself with SIGKILL through ``TPUSIM_FAULT_KILL_AFTER`` (and
``TPUSIM_FAULT_KILL_FILE`` for the exact file), in a process of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tpusim.experiments.results as results_module
from tests.reliability.files import TINY_GEMM_POINT
from tpusim.config.catalog import CONFIG_DIR_ENV
from tpusim.experiments.journal import JOURNAL_NAME
from tpusim.experiments.results import REBUILD_SHARE
from tpusim.experiments.run import FAULT_ENV, FAULT_FILE_ENV, run_experiment

POINTS = 4
TINY = "name: tiny\n" + TINY_GEMM_POINT + """\
sweep:
  grid:
    m: [64, 128, 256, 512]
"""
VIEWS = ("results.csv", "results.json")
DEADLINE_S = 120


def _tpusim(args: list[str], folder: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in (FAULT_ENV, FAULT_FILE_ENV, CONFIG_DIR_ENV)}
    environment.update(env, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run([sys.executable, "-m", "tpusim", *args], cwd=folder, env=environment, capture_output=True,
                          text=True, timeout=DEADLINE_S, check=False)


def _run(folder: Path, out: str, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _tpusim(["run", "tiny.yaml", "--out", out, "--quiet", *extra], folder, **env)


def _killed(folder: Path, out: str, after: int, *extra: str, **env: str) -> None:
    done = _run(folder, out, *extra, **{FAULT_ENV: str(after)}, **env)
    assert done.returncode == -signal.SIGKILL, done.stderr


def _document(folder: Path, out: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / out / "results.json").read_text())
    return data


def _csv_indices(folder: Path, out: str) -> list[int]:
    return [int(line.split(",")[0]) for line in (folder / out / "results.csv").read_text().splitlines()[1:]]


def _same_views(folder: Path, left: str, right: str) -> None:
    for name in VIEWS:
        assert (folder / left / name).read_bytes() == (folder / right / name).read_bytes(), name


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tiny.yaml").write_text(TINY)
    done = _run(tmp_path, "clean")
    assert done.returncode == 0, done.stderr
    return tmp_path


# ------------------------------------------------------------------- 5: tampered finished points are not kept

def _set_time(entry: dict[str, Any], value: Any) -> None:
    entry["result"]["time_s"] = value
    entry["row"]["time_s"] = value


TAMPERS = {
    "negative time": lambda entry: _set_time(entry, -1),
    "a word for a time": lambda entry: _set_time(entry, "fast"),
    "edited settings": lambda entry: entry["point"].update(m=4096),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
@pytest.mark.slow
def test_resume_never_keeps_a_tampered_finished_point(folder: Path, tamper: str) -> None:
    _killed(folder, "out", 2)
    path = folder / "out" / "results.json"
    data = _document(folder, "out")
    TAMPERS[tamper](data["points"][0])
    path.write_text(json.dumps(data))
    done = _run(folder, "out", "--resume")
    assert done.returncode == 0, done.stderr
    assert ("note: 1 finished point(s) of results.json (first: index 0) differ from their verified line in "
            f"{JOURNAL_NAME} (edited): rebuilt from it\n") in done.stderr
    _same_views(folder, "out", "clean")


@pytest.mark.slow
def test_a_nan_in_results_json_is_not_an_internal_error(folder: Path) -> None:
    _killed(folder, "out", 2)
    path = folder / "out" / "results.json"
    path.write_text(path.read_text().replace('"time_s": ', '"time_s": NaN, "was": ', 1))
    done = _run(folder, "out", "--resume")
    assert done.returncode == 0, done.stderr
    _same_views(folder, "out", "clean")


@pytest.mark.slow
def test_an_edited_journal_line_runs_its_point_again(folder: Path) -> None:
    _killed(folder, "out", 2)
    journal = folder / "out" / JOURNAL_NAME
    lines = journal.read_text().splitlines()
    first = json.loads(lines[0])
    first["result"]["time_s"] = 1.0  # a plausible forgery, but without the folder's key
    journal.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    done = _run(folder, "out", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["points_resumed"] == 1  # point 1 only: point 0 ran again
    assert summary["notes"] == [
        f"1 finished point(s) of results.json (first: index 0) have no verified line in {JOURNAL_NAME} (edited, or "
        "written by an earlier version): they run again",
        f"1 line(s) of {JOURNAL_NAME} failed their keyed digest (edited, or cut by a kill): their points run again"]
    _same_views(folder, "out", "clean")


@pytest.mark.slow
def test_results_copied_into_another_folder_are_not_believed(folder: Path) -> None:
    _killed(folder, "out", 2)
    (folder / "copy").mkdir()
    for name in (*VIEWS, JOURNAL_NAME):  # another folder has another key
        shutil.copy(folder / "out" / name, folder / "copy" / name)
    done = _run(folder, "copy", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["points_resumed"] == 0
    _same_views(folder, "copy", "clean")


# ------------------------------------------------- 6: named profiles edited between a kill and a resume

@pytest.mark.slow
def test_a_named_profile_edited_between_kill_and_resume_is_refused(folder: Path) -> None:
    data = folder / "data"
    root = Path(__file__).resolve().parents[2]
    for shipped in ("configs/hardware", "configs/models", "experiments"):
        shutil.copytree(root / shipped, data / Path(shipped).name)
    _killed(folder, "out", 2, **{CONFIG_DIR_ENV: str(data)})
    profile = data / "hardware" / "meshslice-tpu-fit.yaml"
    profile.write_text(profile.read_text().replace("27.472e9", "2.7472e9"))
    before = {name: (folder / "out" / name).read_bytes() for name in VIEWS}
    done = _run(folder, "out", "--resume", **{CONFIG_DIR_ENV: str(data)})
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("'out/results.json' holds results of a different experiment ('tiny', config hash ")
    assert line.endswith("the experiment, or a profile or model it names, has changed); use another --out folder, "
                         "or --force to replace them")
    assert {name: (folder / "out" / name).read_bytes() for name in VIEWS} == before


# ------------------------------------------------------------- 12: written per point, not rewritten whole

def _expected_rebuilds(sizes: list[int]) -> int:
    """Rebuilds of the views for journal lines of ``sizes`` (bytes) written in order: one on opening an empty
    folder, one after each point once the points since the last reach 1/REBUILD_SHARE of the bytes held before
    them, one at the end."""
    rebuilds, held, pending = 1, 0, 0
    for size in sizes:
        pending += size
        if pending * REBUILD_SHARE >= held:
            rebuilds, held, pending = rebuilds + 1, held + pending, 0
    return rebuilds + 1


@pytest.mark.slow
def test_results_are_journalled_per_point_and_rebuilt_geometrically(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    points = 200
    (tmp_path / "sweep.yaml").write_text("name: wide\nmax_points: 1000\n" + TINY_GEMM_POINT.replace(
        "  dataflow: os\n", "  dataflow: os\n  fidelity: analytic\n") + "sweep:\n  grid:\n    m: "
        + json.dumps(list(range(64, 64 + points))) + "\n")
    renamed: list[str] = []
    original = results_module.replace_together

    def counting(files: list[tuple[Path, bytes]], *args: Any, **kwargs: Any) -> None:
        renamed.extend(path.name for path, _ in files)
        original(files, *args, **kwargs)

    monkeypatch.setattr(results_module, "replace_together", counting)
    summary = run_experiment(tmp_path / "sweep.yaml", tmp_path / "out")
    assert summary.finished == points
    lines = (tmp_path / "out" / JOURNAL_NAME).read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == list(range(points))
    expected = _expected_rebuilds([len(line) for line in lines])
    assert renamed.count("results.json") == renamed.count("results.csv") == expected
    assert expected < 60  # against 200 whole rewrites, one per point, before


def test_an_aliased_exclude_is_not_copied_into_every_point_written(tmp_path: Path) -> None:
    # issue 26 item 12: an exclude of aliases (a few kB of YAML, 4.4 MB expanded) was copied into results.json on
    # every write, one per point; a point's journal line now holds only that point
    long = "x" * 1000
    points = 20
    (tmp_path / "aliased.yaml").write_text(
        "name: aliased\n" + TINY_GEMM_POINT.replace("  dataflow: os\n", "  dataflow: os\n  fidelity: analytic\n")
        + "sweep:\n  grid:\n    m: " + json.dumps([64 + 2 * i for i in range(points)]) + "\n  exclude:\n"
        f"    - hardware: &s {long}\n    - hardware: [" + ",".join(["*s"] * 100) + "]\n")
    summary = run_experiment(tmp_path / "aliased.yaml", tmp_path / "out")
    assert summary.finished == points
    lines = (tmp_path / "out" / JOURNAL_NAME).read_text().splitlines()
    assert len(lines) == points and all(long not in line and len(line) < 10 * len(long) for line in lines)
    assert (tmp_path / "out" / "results.json").read_text().count(long) == 101  # the experiment, once


# ------------------------------------------------- 17: a re-run keeps the old results until it has new ones

@pytest.mark.slow
def test_a_killed_rerun_without_resume_keeps_the_old_results(folder: Path) -> None:
    shutil.copytree(folder / "clean", folder / "out")
    _killed(folder, "out", 1)
    assert _document(folder, "out")["points_finished"] == POINTS
    assert _csv_indices(folder, "out") == list(range(POINTS))
    _same_views(folder, "out", "clean")
    done = _run(folder, "out", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["points_resumed"] == POINTS
    _same_views(folder, "out", "clean")


# ------------------------------------------------- lower: a kill between the two result files' writes

@pytest.mark.slow
def test_a_kill_between_the_two_result_writes_is_repaired_from_the_journal(folder: Path) -> None:
    _killed(folder, "out", 2, **{FAULT_FILE_ENV: "results.json"})
    assert _document(folder, "out")["points_finished"] == 2  # results.json renamed, results.csv not yet
    assert _csv_indices(folder, "out") == [0]
    assert len((folder / "out" / JOURNAL_NAME).read_text().splitlines()) == 2
    done = _run(folder, "out", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["points_resumed"] == 2
    assert summary["notes"] == ["results.json and results.csv in 'out' do not match their keyed digests in "
                                "run_meta.json (edited, or a kill while they were written): rebuilt from "
                                f"{JOURNAL_NAME}"]
    _same_views(folder, "out", "clean")


@pytest.mark.slow
def test_a_kill_after_the_journal_line_loses_no_point(folder: Path) -> None:
    _killed(folder, "out", 3, **{FAULT_FILE_ENV: JOURNAL_NAME})
    assert _document(folder, "out")["points_finished"] == _csv_indices(folder, "out").__len__() == 2
    done = _run(folder, "out", "--resume", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["points_resumed"] == 3
    _same_views(folder, "out", "clean")


def test_an_unknown_fault_file_is_one_line(folder: Path) -> None:
    done = _run(folder, "out", **{FAULT_ENV: "1", FAULT_FILE_ENV: "x"})
    assert (done.returncode, done.stderr) == (2, f"{FAULT_FILE_ENV} 'x' is not a file a run writes after each "
                                                 f"point; valid: {JOURNAL_NAME}, results.json, results.csv\n")
