"""Plug-ins reach every entry point: an algorithm in a module outside the package, named in ``$TPUSIM_PLUGINS`` or
by an installed entry point of group ``tpusim.plugins``, runs under ``gemm``, ``step``, ``tune --jobs 2`` and a YAML
experiment (on worker processes too); a plug-in that fails to load is one line, exit 2; an error raised in a
``tune`` worker reaches the user from that worker.

Each case runs a fresh interpreter: this test session's registry must not gain the example algorithms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "tests" / "plugins"
GEMM = ["gemm", "--hardware", "meshslice-tpu-fit", "--mesh", "2x2", "--algorithm", "my-alg", "--dataflow", "os",
        "--m", "256", "--n", "128", "--k", "512"]
SMALL_MODEL = """name: small-plugin-test
description: a 2-layer decoder for the plug-in tests
layers: 2
hidden: 512
heads: 8
head_dim: 64
ffn: 2048
sequence: 256
"""
STEP = ["step", "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "my-alg"]
TUNE = ["tune", "--hardware", "tpuv4", "--chips", "4", "--algorithm", "my-alg"]


def _tpusim(argv: list[str], cwd: Path, plugins: str | None = "my_alg",
            path: list[Path] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TPUSIM_PLUGINS", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [ROOT, PLUGINS, *(path or [])])
    if plugins is not None:
        env["TPUSIM_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "tpusim", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_MODEL)
    return path


@pytest.mark.slow
def test_gemm_runs_the_plugin_and_it_is_exact(tmp_path: Path) -> None:
    result = _json(_tpusim([*GEMM, "--verify", "--json"], tmp_path))
    assert result["algorithm"] == "my-alg"
    assert isinstance(result["max_abs_error"], float) and result["max_abs_error"] < 1e-9
    assert result["time_s"] == pytest.approx(result["analytic_time_s"], rel=1e-9)


def test_an_algorithm_the_registry_lacks_is_still_refused_without_the_plugin(tmp_path: Path) -> None:
    done = _tpusim(GEMM, tmp_path, plugins=None)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[0] == ("unknown algorithm 'my-alg'; valid: cannon, collective, fsdp, meshslice, "
                                           "summa, tp1d, wang")


@pytest.mark.slow
def test_step_tune_with_two_workers_and_an_experiment_run_the_plugin(tmp_path: Path, model: Path) -> None:
    step = _json(_tpusim([*STEP, "--model", str(model), "--json"], tmp_path))
    assert step["algorithm"] == "my-alg"
    one = _tpusim([*TUNE, "--model", str(model), "--json", "--jobs", "1"], tmp_path)
    two = _tpusim([*TUNE, "--model", str(model), "--json", "--jobs", "2"], tmp_path)
    tuned = _json(two)
    assert tuned["algorithm"] == "my-alg" and tuned["best"]["algorithm"] == "my-alg"  # type: ignore[index]
    assert two.stdout == one.stdout  # the workers priced every simulation the single process does, to the bit
    experiment = tmp_path / "sweep.yaml"
    experiment.write_text(f"name: plugin-sweep\npoint:\n  kind: step\n  model: {model.name}\n  hardware: tpuv4\n"
                          "  mesh: 2x2\n  algorithm: my-alg\nsweep:\n  grid:\n    algorithm: [my-alg, collective]\n")
    ran = _json(_tpusim(["run", str(experiment), "--out", "out", "--jobs", "2", "--quiet", "--json"], tmp_path))
    rows = ran["rows"]
    assert isinstance(rows, list)
    assert [(r["point.algorithm"], r["error"]) for r in rows] == [("my-alg", "none"), ("collective", "none")]
    assert rows[0]["step_time_s"] == step["step_time_s"]  # a worker process computed the CLI's figure


@pytest.mark.slow
def test_an_error_in_a_tune_worker_reaches_the_user_from_the_worker(tmp_path: Path, model: Path) -> None:
    argv = ["tune", "--hardware", "tpuv4", "--chips", "4", "--algorithm", "failing-alg", "--model", str(model)]
    alone = _tpusim([*argv, "--jobs", "1"], tmp_path, plugins="failing_alg")
    pooled = _tpusim([*argv, "--jobs", "2"], tmp_path, plugins="failing_alg")
    assert (alone.returncode, alone.stdout, alone.stderr) == (2, "", "failing-alg refuses to run (in the main "
                                                                     "process)\n")
    assert (pooled.returncode, pooled.stdout, pooled.stderr) == (2, "", "failing-alg refuses to run (in a worker "
                                                                        "process)\n")


@pytest.mark.parametrize(("plugins", "line"), [
    ("my_alg, no_such_module", "plug-in 'no_such_module' (named in $TPUSIM_PLUGINS) failed to load: "
                               "ModuleNotFoundError: No module named 'no_such_module'"),
    ("my_alg,my_alg,wrong_alg,my_alg", None),  # a module named twice is imported once
    ("broken_plugin", "plug-in 'broken_plugin' (named in $TPUSIM_PLUGINS) failed to load: RuntimeError: "
                      f"{'x' * 200}... (1000 characters)"),
])
@pytest.mark.slow
def test_a_plugin_that_fails_to_load_is_one_line_and_exit_2(tmp_path: Path, plugins: str, line: str | None) -> None:
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('x' * 1000)\n")
    done = _tpusim(GEMM, tmp_path, plugins=plugins, path=[tmp_path])
    if line is None:
        assert done.returncode == 0, done.stderr
        return
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")


def _distribution(folder: Path, entry: str) -> None:
    """An installed distribution (its metadata on the path) declaring ``entry`` in group ``tpusim.plugins``."""
    info = folder / "example_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: example-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tpusim.plugins]\n{entry}\n")


@pytest.mark.parametrize("entry", ["mine = my_alg", "mine = callable_plugin:register"], ids=["module", "callable"])
@pytest.mark.slow
def test_an_entry_point_registers_without_the_variable(tmp_path: Path, entry: str) -> None:
    (tmp_path / "callable_plugin.py").write_text("def register() -> None:\n    import my_alg  # noqa: F401\n")
    _distribution(tmp_path, entry)
    listed = _tpusim(["list", "algorithms"], tmp_path, plugins=None, path=[tmp_path])
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines() if line.startswith("my-alg")] == ["my-alg"]
    result = _json(_tpusim([*GEMM, "--json"], tmp_path, plugins=None, path=[tmp_path]))
    assert result["algorithm"] == "my-alg"


@pytest.mark.slow
def test_an_entry_point_that_fails_is_one_line_naming_it(tmp_path: Path) -> None:
    _distribution(tmp_path, "mine = my_alg:no_such_function")
    done = _tpusim(GEMM, tmp_path, plugins=None, path=[tmp_path])
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("plug-in 'my_alg:no_such_function' (entry point 'mine' of group tpusim.plugins) failed "
                           "to load: AttributeError: module 'my_alg' has no attribute 'no_such_function'\n")
