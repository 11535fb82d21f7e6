"""The example notebooks run top to bottom with small parameters and produce their figures and conclusions.

Each notebook's cell tagged ``parameters`` is a plain sequence of ``NAME = value`` lines; the tests replace it
with small settings (16 chips, on which GPT-3 cannot fit in HBM, so memory is ignored) and execute the notebook
in a temporary working directory, where the traces and images it writes land.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

import tpusim.api as tp
from tests.small_model import SMALL_MODEL_YAML

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
COMPARE = "compare_algorithms.ipynb"
EXPLORE = "explore_mesh_and_slices.ipynb"

SMALL: dict[str, dict[str, Any]] = {
    COMPARE: {"MODEL": "gpt3-175b", "HARDWARE": "meshslice-sim", "CHIPS": 16, "MESH": "4x4", "SLICES": 2,
              "SMALL": True, "IGNORE_MEMORY": True},
    EXPLORE: {"MODEL": "gpt3-175b", "HARDWARE": "meshslice-sim", "CHIPS": 16, "SLICE_CANDIDATES": [1, 2, 4],
              "IGNORE_MEMORY": True},
}
BEST = re.compile(r"Best configuration: mesh (\d+)x(\d+), S = (\d+), step time ([0-9.]+) s")

# A model that is not packaged, with an FF width other than 4 x hidden, so that the notebook must read every
# dimension from the model file (tp.model) instead of knowing the shipped models.
TINY_MODEL = SMALL_MODEL_YAML
# every label of the step-time bar chart must sit inside its axes, below the title
LABELS_INSIDE = """
from matplotlib.backends.backend_agg import FigureCanvasAgg
_renderer = FigureCanvasAgg(fig).get_renderer()
_box = ax.get_window_extent(_renderer)
_inside = [_box.y0 <= t.get_window_extent(_renderer).y0 and t.get_window_extent(_renderer).y1 <= _box.y1
           for t in ax.texts]
print("labels inside the axes:", all(_inside), len(_inside))
"""
BAR_CHART = ('savefig("step_time_by_algorithm.png"', LABELS_INSIDE)
# the colour each timeline span was drawn in, by track
TIMELINE = ('savefig("meshslice_ff1_timeline.png"',
            'print("timeline kinds:", sorted({(s["track"], kind(s)) for s in spans}), "legend:", used)')


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    cells = [cell for cell in nb.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(cells) == 1, "exactly one cell must be tagged 'parameters'"
    return cells[0]


def assigned_names(source: str) -> list[str]:
    """The names a parameters cell assigns; fails unless every statement is ``NAME = literal``."""
    names = []
    for statement in ast.parse(source).body:
        assert isinstance(statement, ast.Assign), f"not a simple assignment: {ast.unparse(statement)}"
        assert len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name), ast.unparse(statement)
        ast.literal_eval(statement.value)
        names.append(statement.targets[0].id)
    return names


def execute(name: str, workdir: Path, parameters: dict[str, Any] | None = None,
            probes: tuple[tuple[str, str], ...] = ()) -> nbformat.NotebookNode:
    """Run notebook ``name`` in ``workdir`` with ``parameters`` (default: its SMALL settings); each probe is
    (text of a code cell, code) to run right after that cell."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    parameters_cell(nb).source = "\n".join(f"{key} = {value!r}"
                                           for key, value in (parameters or SMALL[name]).items())
    for marker, code in probes:
        index = next(i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and marker in cell.source)
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(code))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [output for cell in nb.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]


def stdout(nb: nbformat.NotebookNode) -> str:
    return "".join(o.text for o in outputs(nb) if o.output_type == "stream" and o.name == "stdout")


def count(nb: nbformat.NotebookNode, mime: str) -> int:
    return sum(1 for o in outputs(nb) if mime in o.get("data", {}))


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, Path]:
    workdir = tmp_path_factory.mktemp("compare")
    return execute(COMPARE, workdir, probes=(BAR_CHART, TIMELINE)), workdir


@pytest.fixture(scope="module")
def explore_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[nbformat.NotebookNode, Path]:
    workdir = tmp_path_factory.mktemp("explore")
    return execute(EXPLORE, workdir), workdir


@pytest.mark.parametrize("name", [COMPARE, EXPLORE])
def test_stored_notebook_is_clean_and_parameterisable(name: str) -> None:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code[0] is parameters_cell(nb), "the parameters cell must be the first code cell"
    assert sorted(assigned_names(parameters_cell(nb).source)) == sorted(SMALL[name])
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "commit notebooks with outputs cleared"


@pytest.mark.slow
def test_compare_algorithms_runs_with_small_settings(compare_run: tuple[nbformat.NotebookNode, Path]) -> None:
    nb, workdir = compare_run
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    assert count(nb, "image/png") >= 2  # the stacked bar chart and the GeMM timeline
    assert count(nb, "text/html") >= 1  # the results table
    text = stdout(nb)
    for label in ("collective", "wang", "summa", "cannon", "meshslice S=2", "tp1d"):  # 4x4 is square: Cannon runs
        assert re.search(rf"{re.escape(label)} on +\S+: +[0-9.]+ s/step", text), label
    assert "skipped" not in text
    assert "labels inside the axes: True 6" in text  # no bar clipped here: the tallest bars' labels clear the title
    assert (workdir / "step_time_by_algorithm.png").stat().st_size > 0
    assert (workdir / "meshslice_ff1_timeline.png").stat().st_size > 0
    assert (workdir / "meshslice_ff1_trace.json").stat().st_size > 0
    overlap = re.search(r"(\d+) GeMM slices; (\d+) of (\d+) collectives run entirely under a GeMM", text)
    assert overlap, text
    slices, hidden, total = map(int, overlap.groups())
    assert slices == SMALL[COMPARE]["SLICES"]
    assert 0 < hidden < total  # slice 1's all-gathers hide under slice 0's GeMM; slice 0's fill the pipeline
    # every MXU span (MeshSlice's "S1/2 gemm", "S2/2 gemm") is drawn as a GeMM, every collective as its kind
    assert ("timeline kinds: [('MXU', 'gemm'), ('collectives axis 0', 'all-gather'), ('collectives axis 1', "
            "'all-gather')] legend: ['gemm', 'all-gather']") in text


def test_compare_algorithms_pads_tp1d_where_the_chips_do_not_divide_the_heads(tmp_path: Path) -> None:
    # GPT-3's 96 heads over 64 chips, as over the 256 of the default parameters: tp1d runs padded, not skipped
    parameters = {**SMALL[COMPARE], "CHIPS": 64, "MESH": "8x8"}
    text = stdout(execute(COMPARE, tmp_path, parameters))
    assert "skipped" not in text
    assert "     tp1d (padded) on 64x1: 64 does not divide the 96 heads of gpt3-175b (heads are split over the 64 " \
           "chips of the feature axis)" in text
    assert re.search(r"tp1d \(padded\) on +64x1: +[0-9.]+ s/step", text)
    assert re.search(r"meshslice S=2 on +8x8: +[0-9.]+ s/step", text)


@pytest.mark.slow
def test_explore_mesh_and_slices_runs_with_small_settings(
        explore_run: tuple[nbformat.NotebookNode, Path]) -> None:
    nb, workdir = explore_run
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    assert count(nb, "image/png") >= 1
    assert count(nb, "text/markdown") >= 1  # the computed conclusion
    assert (workdir / "mesh_slices_heatmap.png").stat().st_size > 0
    best = BEST.search(stdout(nb))
    assert best, stdout(nb)
    rows, cols, k = (int(g) for g in best.groups()[:3])
    params = SMALL[EXPLORE]
    assert rows * cols == params["CHIPS"] and rows >= 2 and cols >= 2
    assert k in params["SLICE_CANDIDATES"]
    # the printed best is what the API gives for that cell
    again = tp.step(model=params["MODEL"], hardware=params["HARDWARE"], mesh=f"{rows}x{cols}", algorithm="meshslice",
                    slices=k, ignore_memory=params["IGNORE_MEMORY"])
    assert again.step_time_s == pytest.approx(float(best.group(4)), abs=5e-4)


@pytest.mark.slow
def test_compare_algorithms_takes_a_custom_model_file(tmp_path: Path) -> None:
    model = tmp_path / "tiny.yaml"
    model.write_text(TINY_MODEL)
    parameters = {**SMALL[COMPARE], "MODEL": str(model), "IGNORE_MEMORY": False}
    nb = execute(COMPARE, tmp_path, parameters, probes=(BAR_CHART,))
    assert not [o for o in outputs(nb) if o.output_type == "error"]
    text = stdout(nb)
    for label in ("collective", "wang", "summa", "cannon", "meshslice S=2", "tp1d"):
        assert re.search(rf"{re.escape(label)} on +\S+: +[0-9.]+ s/step", text), label
    # FF1: M = batch 16 x sequence 512, K = hidden, N = the model's ffn (not 4 x hidden = 4096)
    assert "FF1 GeMM M=8192 K=1024 N=3072 on 4x4, 2 slices:" in text
    assert "labels inside the axes: True 6" in text  # one label per bar, tp1d's clipped one inside its bar
