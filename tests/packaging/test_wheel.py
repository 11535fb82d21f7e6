"""A normal install carries everything a run needs: the wheel holds every profile, model and experiment."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tpusim" / "data"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out)], check=True, capture_output=True, cwd=out)
    (built,) = out.glob("tpusim-*.whl")
    return zipfile.ZipFile(built)


@pytest.mark.slow
def test_every_data_file_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    inside = set(wheel.namelist())
    shipped = sorted(str(p.relative_to(ROOT)) for p in DATA.rglob("*.yaml"))
    assert len(shipped) == 7 + 10 + 9  # hardware profiles, models, experiment families
    assert [name for name in shipped if name not in inside] == []


def test_the_measured_runs_are_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    inside = set(wheel.namelist())
    assert {"tpusim/data/measurements/calibration.csv", "tpusim/data/measurements/README.md"} <= inside
    assert wheel.read("tpusim/data/measurements/calibration.csv") == (DATA / "measurements" / "calibration.csv"
                                                                      ).read_bytes()


def test_the_wheel_has_the_entry_points_and_the_version(wheel: zipfile.ZipFile) -> None:
    inside = set(wheel.namelist())
    assert {"tpusim/__main__.py", "tpusim/cli/main.py"} <= inside
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
