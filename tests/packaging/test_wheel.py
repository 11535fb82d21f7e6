"""A normal install carries everything a run needs: the wheel holds every profile, model, experiment and measured
run of the top-level configs/ and experiments/, and, installed (not editable) in a fresh environment, runs
``list``, ``step`` and ``reproduce`` from another folder on its own copy of them, with the checkout's results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tpusim.experiments.families import FAMILIES  # one shipped experiment per family

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("configs", "experiments")
STEP = ["step", "--model", "llama2-7b", "--hardware", "meshslice-sim", "--mesh", "4x4", "--batch", "16",
        "--slices", "2", "--json"]
FAMILY = "slice-sweep"
REPRODUCE = ["reproduce", FAMILY, "--quick", "--hardware", "meshslice-sim", "--out", "out"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a clean copy of the tree, so nothing left in a build/ folder can slip into it."""
    source = tmp_path_factory.mktemp("source") / "tpusim"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                                               "__pycache__", ".*_cache", ".hypothesis"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out)], check=True, capture_output=True, cwd=out)
    (wheel,) = out.glob("tpusim-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(built: Path) -> zipfile.ZipFile:
    return zipfile.ZipFile(built)


@pytest.fixture(scope="module")
def venv(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed; its libraries are the test environment's, named by a
    .pth file (whose own .pth files, an editable tpusim among them, are not read), so nothing is downloaded."""
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    python = folder / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                    "--quiet", str(built)], check=True, capture_output=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    borrowed = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site / "borrowed-libraries.pth").write_text("".join(f"{path}\n" for path in borrowed))
    return folder


def _environment(**extra: str) -> dict[str, str]:
    """This process's environment without anything that points tpusim at the checkout or at other files."""
    cleared = ("PYTHONPATH", "TPUSIM_CONFIG_DIR", "TPUSIM_TRUSTED_DIRS", "TPUSIM_PLUGINS")
    return {key: value for key, value in os.environ.items() if key not in cleared} | extra


def _installed(venv: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "tpusim"), *argv], cwd=cwd, env=_environment(), capture_output=True,
                          text=True, timeout=600)


def _checkout(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tpusim", *argv], cwd=cwd, env=_environment(PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=600)


def _shipped_files() -> list[Path]:
    return sorted(p for folder in SHIPPED for p in (ROOT / folder).rglob("*") if p.is_file())


def test_every_shipped_file_is_in_the_wheel_once(wheel: zipfile.ZipFile) -> None:
    inside = wheel.namelist()
    shipped = [str(p.relative_to(ROOT)) for p in _shipped_files()]
    # profiles, models, experiment families
    assert len([p for p in shipped if p.endswith(".yaml")]) == 7 + 10 + len(FAMILIES)
    assert {"configs/measurements/calibration.csv", "configs/measurements/README.md"} <= set(shipped)
    assert sorted(name.removeprefix("tpusim/_shipped/") for name in inside
                  if name.startswith("tpusim/_shipped/")) == sorted(shipped)
    assert [name for name in inside if name.startswith(("configs/", "experiments/", "tpusim/data/"))] == []
    table = "configs/measurements/calibration.csv"
    assert wheel.read(f"tpusim/_shipped/{table}") == (ROOT / table).read_bytes()


def test_the_wheel_has_the_entry_points_and_the_version(wheel: zipfile.ZipFile) -> None:
    inside = set(wheel.namelist())
    assert {"tpusim/__main__.py", "tpusim/cli/main.py", "tpusim/collectives/physical/network.py"} <= inside
    (entry,) = [n for n in inside if n.endswith("entry_points.txt")]
    assert "tpusim = tpusim.cli:main" in wheel.read(entry).decode()
    import tpusim

    (metadata,) = [n for n in inside if n.endswith("METADATA")]
    assert f"Version: {tpusim.__version__}" in wheel.read(metadata).decode()


def test_the_extras_bring_dask_and_headless_notebooks(wheel: zipfile.ZipFile) -> None:
    """``.[dask]`` installs the Dask executor's cluster client; ``.[dev]`` includes it and nbconvert, which
    ``jupyter nbconvert --execute`` (README) needs."""
    (metadata,) = [n for n in wheel.namelist() if n.endswith("METADATA")]
    requires = [line for line in wheel.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert 'Requires-Dist: dask[distributed]>=2024.1; extra == "dask"' in requires
    assert 'Requires-Dist: tpusim[dask]; extra == "dev"' in requires
    assert 'Requires-Dist: nbconvert>=7; extra == "dev"' in requires
    assert not [line for line in requires if "dask" in line and "extra" not in line]  # never a core dependency


def test_the_installed_wheel_lists_its_own_copy_of_the_files(venv: Path, tmp_path: Path) -> None:
    site = venv.resolve() / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for what, folder, count in (("hardware", "configs/hardware", 7), ("models", "configs/models", 10),
                                ("experiments", "experiments", len(FAMILIES))):
        listed = _installed(venv, tmp_path, "list", what, "--json")
        assert (listed.returncode, listed.stderr) == (0, "")
        payload = json.loads(listed.stdout)
        assert payload["folder"] == str(site / "tpusim" / "_shipped" / folder)
        assert len(payload[what]) == count
        text = _installed(venv, tmp_path, "list", what)
        assert text.stdout.splitlines()[-1] == f"files in {payload['folder']}"


def test_the_installed_wheel_steps_as_the_checkout_does(venv: Path, tmp_path: Path) -> None:
    installed, checkout = _installed(venv, tmp_path, *STEP), _checkout(tmp_path, *STEP)
    assert (installed.returncode, checkout.returncode) == (0, 0)
    assert json.loads(installed.stdout)["slices"] == [2, 2, 2, 2]
    assert installed.stdout == checkout.stdout


def test_the_installed_wheel_reproduces_a_family_as_the_checkout_does(venv: Path, tmp_path: Path) -> None:
    here, there = tmp_path / "installed", tmp_path / "checkout"
    here.mkdir()
    there.mkdir()
    assert _installed(venv, here, *REPRODUCE).returncode == 0
    assert _checkout(there, *REPRODUCE).returncode == 0
    for name in (f"{FAMILY}.csv", "results.csv", "results.json"):
        assert (here / "out" / FAMILY / name).read_bytes() == (there / "out" / FAMILY / name).read_bytes()
    assert len((here / "out" / FAMILY / "results.csv").read_text().splitlines()) == 1 + 14  # header, 14 points
