"""Running experiments: outputs, determinism across executors, kill and resume, sweep rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpusim.config import Experiment
from tpusim.errors import ConfigError, OutputPathError, UserError
from tpusim.experiments.run import FAULT_ENV, run_experiment
from tpusim.experiments.spec import expand, load_experiment

EXPERIMENT = """\
name: small
description: a quick sweep of GeMMs and one step
point:
  kind: gemm
  hardware: meshslice-tpu-fit
  mesh: 4x4
  algorithm: collective
  dataflow: os
  m: 4096
  n: 2048
  k: 8192
sweep:
  grid:
    algorithm: [collective, meshslice, wang]
    dataflow: [os, ls, rs]
  exclude:
    - {algorithm: wang, dataflow: rs}
  include:
    - {kind: collective, op: all-gather, axis: 1, bytes: 64MB}
"""


def write(tmp_path: Path, text: str = EXPERIMENT) -> Path:
    path = tmp_path / "experiment.yaml"
    path.write_text(text)
    return path


def test_sweep_order_exclude_and_include(tmp_path: Path) -> None:
    points = expand(load_experiment(write(tmp_path)))
    assert [(p.kind, getattr(p, "algorithm", None), getattr(p, "dataflow", None)) for p in points] == [
        ("gemm", "collective", "os"), ("gemm", "collective", "ls"), ("gemm", "collective", "rs"),
        ("gemm", "meshslice", "os"), ("gemm", "meshslice", "ls"), ("gemm", "meshslice", "rs"),
        ("gemm", "wang", "os"), ("gemm", "wang", "ls"),
        ("collective", None, None),
    ]


def test_outputs_and_rows(tmp_path: Path) -> None:
    summary = run_experiment(write(tmp_path), tmp_path / "out")
    assert summary.finished == summary.total == 9
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"results.csv", "results.json", "run_meta.json"} <= files
    csv_lines = (tmp_path / "out" / "results.csv").read_text().splitlines()
    # the swept keys lead (the include's too), then the other inputs, the results, the error
    assert len(csv_lines) == 10 and csv_lines[0].startswith(
        "index,point.algorithm,point.dataflow,point.kind,point.op,point.axis,point.bytes,point.hardware,")
    assert csv_lines[0].endswith(",transfers,events,max_abs_error,error")
    assert csv_lines[-1].startswith("8,,,collective,all-gather,1,64000000,meshslice-tpu-fit,")
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["points_finished"] == 9 and data["config_hash"]
    assert "started" not in json.dumps(data)  # times live in run_meta.json only
    collective_row = summary.rows[-1]
    assert collective_row["time_s"] == pytest.approx(collective_row["analytic_time_s"], rel=1e-9)


@pytest.mark.slow
def test_byte_identical_across_runs_and_jobs(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_experiment(path, tmp_path / "a")
    run_experiment(path, tmp_path / "b", jobs=2)
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.slow
def test_dask_local_cluster_gives_identical_files(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = write(tmp_path)
    run_experiment(path, tmp_path / "local")
    run_experiment(path, tmp_path / "dask", executor="dask", jobs=2)
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "dask" / name).read_bytes()


@pytest.mark.slow
def test_a_local_dask_cluster_starts_at_most_one_worker_per_cpu(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    cpus = os.cpu_count() or 1
    summary = run_experiment(write(tmp_path), tmp_path / "dask", executor="dask", jobs=cpus + 62)
    assert f"--jobs {cpus + 62} is more than this machine's {cpus} CPUs; ran {cpus} worker processes" in summary.notes


@pytest.mark.slow
def test_sigkill_half_way_then_resume_completes_identically(tmp_path: Path) -> None:
    path = write(tmp_path)
    run_experiment(path, tmp_path / "clean")
    env = dict(os.environ, **{FAULT_ENV: "4"})
    killed = subprocess.run([sys.executable, "-m", "tpusim", "run", str(path), "--out",
                             str(tmp_path / "killed"), "--quiet"], env=env, capture_output=True, text=True)
    assert killed.returncode == -9  # SIGKILL
    partial = json.loads((tmp_path / "killed" / "results.json").read_text())
    assert partial["points_finished"] == 4
    assert len((tmp_path / "killed" / "results.csv").read_text().splitlines()) == 5
    summary = run_experiment(path, tmp_path / "killed", resume=True)
    assert summary.skipped == 4 and summary.finished == 9
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "clean" / name).read_bytes() == (tmp_path / "killed" / name).read_bytes()


def test_resume_refuses_a_different_experiment(tmp_path: Path) -> None:
    run_experiment(write(tmp_path), tmp_path / "out")
    other = write(tmp_path, EXPERIMENT.replace("m: 4096", "m: 8192"))
    with pytest.raises(OutputPathError, match="different experiment"):
        run_experiment(other, tmp_path / "out", resume=True)


def test_a_fresh_run_never_replaces_another_experiments_results(tmp_path: Path) -> None:
    run_experiment(write(tmp_path), tmp_path / "out")
    before = (tmp_path / "out" / "results.json").read_bytes()
    other = write(tmp_path, EXPERIMENT.replace("m: 4096", "m: 8192"))
    with pytest.raises(OutputPathError, match=r"holds results of a different experiment \('small', config hash "):
        run_experiment(other, tmp_path / "out")
    assert (tmp_path / "out" / "results.json").read_bytes() == before
    assert run_experiment(write(tmp_path), tmp_path / "out").finished == 9  # the same experiment may run again


@pytest.mark.slow
def test_force_replaces_another_experiments_results(tmp_path: Path) -> None:
    run_experiment(write(tmp_path), tmp_path / "out")
    other = write(tmp_path, EXPERIMENT.replace("m: 4096", "m: 8192"))
    fresh = run_experiment(other, tmp_path / "fresh")
    forced = run_experiment(other, tmp_path / "out", force=True)
    assert forced.finished == fresh.finished and forced.skipped == 0
    assert (tmp_path / "out" / "results.json").read_bytes() == (tmp_path / "fresh" / "results.json").read_bytes()


@pytest.mark.parametrize("damage", ["index 999", "index -5", "index text", "no row", "points not a list",
                                    "duplicate"])
def test_resume_refuses_damaged_finished_points(tmp_path: Path, damage: str) -> None:
    run_experiment(write(tmp_path), tmp_path / "out")
    path = tmp_path / "out" / "results.json"
    data = json.loads(path.read_text())
    first = data["points"][0]
    if damage.startswith("index"):
        first["index"] = {"index 999": 999, "index -5": -5, "index text": "0"}[damage]
    elif damage == "no row":
        del first["row"]
    elif damage == "duplicate":
        data["points"][1]["index"] = first["index"]
    else:
        data["points"] = {"0": first}
    path.write_text(json.dumps(data))
    with pytest.raises(OutputPathError, match="cannot be resumed"):
        run_experiment(write(tmp_path), tmp_path / "out", resume=True)


def test_sweep_cap_needs_yes(tmp_path: Path) -> None:
    path = write(tmp_path, EXPERIMENT + "max_points: 5\n")
    with pytest.raises(UserError, match="above its max_points of 5; rerun with --yes"):
        run_experiment(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # checked before anything ran or was written
    assert run_experiment(path, tmp_path / "out", yes=True).finished == 9


def test_empty_sweep_list_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, EXPERIMENT.replace("dataflow: [os, ls, rs]", "dataflow: []"))
    with pytest.raises(ConfigError, match="sweep list 'dataflow' is empty"):
        load_experiment(path)


def test_output_path_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(OutputPathError, match="is a file"):
        run_experiment(write(tmp_path), target)


def test_an_infeasible_point_keeps_the_others(tmp_path: Path) -> None:
    text = EXPERIMENT.replace("algorithm: [collective, meshslice, wang]", "algorithm: [collective, cannon]")
    text = text.replace("mesh: 4x4", "mesh: 8x4")
    summary = run_experiment(write(tmp_path, text), tmp_path / "out")
    errors = [r["error"] for r in summary.rows]
    assert sum(1 for e in errors if "square mesh" in e) == 3
    assert summary.errors == 3 and summary.finished == summary.total


def test_schema_lists_the_point_fields() -> None:
    schema = Experiment.model_json_schema(by_alias=True)
    assert "point" in schema["properties"]
    assert {"CollectiveRequest", "GemmRequest", "StepRequest", "TuneRequest"} <= set(schema["$defs"])


def test_a_scheduler_needs_the_dask_executor(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^--scheduler 'tcp://host:8786' needs --executor dask \(the local executor "
                                        r"runs here\)$"):
        run_experiment(write(tmp_path), tmp_path / "out", scheduler="tcp://host:8786")


def test_more_local_jobs_than_cpus_run_one_per_cpu(tmp_path: Path) -> None:
    cpus = os.cpu_count() or 1
    summary = run_experiment(write(tmp_path), tmp_path / "out", jobs=cpus + 62)
    assert summary.notes == [f"--jobs {cpus + 62} is more than this machine's {cpus} CPUs; ran {cpus} worker "
                             "processes"]
    assert json.loads((tmp_path / "out" / "run_meta.json").read_text())["jobs"] == cpus
