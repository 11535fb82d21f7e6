"""scripts/figures.py: one recipe for every figure in docs/, and a recipe that draws what it claims."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "figures.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("figures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("figures", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_figure_in_docs_has_exactly_one_recipe() -> None:
    names = [figure.name for figure in _script().FIGURES]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(path.stem for path in (ROOT / "docs").glob("*.png"))


def test_a_family_figure_is_resumed_in_its_own_run_folder() -> None:
    figure = next(f for f in _script().FIGURES if f.name == "slice-sweep-tpuv4")
    assert figure.command(Path("R"), 3) == ["reproduce", "slice-sweep", "--quick", "--hardware", "tpuv4", "--out", "R",
                                            "--resume", "--jobs", "3"]
    assert figure.drawing(Path("R")) == Path("R/slice-sweep/slice-sweep.png")


def test_a_link_map_is_drawn_and_copied(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "linkmap-allgather-4x4x4", "--runs",
                           str(tmp_path / "runs"), "--docs", str(tmp_path / "docs")],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("linkmap-allgather-4x4x4.png: redrawn in ")
    drawn = (tmp_path / "docs" / "linkmap-allgather-4x4x4.png").read_bytes()
    assert drawn[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == (tmp_path / "runs" / "linkmap-allgather-4x4x4" / "linkmap-allgather-4x4x4.png").read_bytes()


def test_an_unknown_figure_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--only", "headline,nope", "--runs", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("--only: unknown figure 'nope'; valid: breakdown, ")
    assert not any(tmp_path.iterdir())
