"""The README's pandas example runs as written: its ``tpusim run`` command, then its Python block on the result.

The two code blocks after the README comment naming this file are taken verbatim: the shell line is run (with
this interpreter's ``python -m tpusim``) in a temporary working directory, the Python block is executed there
with matplotlib's Agg backend, and the frame it loads is checked column by column.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tpusim.config.requests import FF_LAYERS

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- the two blocks below are run by tests/experiments/test_readme_pandas.py -->"
BLOCKS = re.compile(r"```bash\n(?P<shell>.*?)```\s*```python\n(?P<python>.*?)```", re.DOTALL)


def example() -> tuple[str, str]:
    text = README.read_text()
    assert text.count(MARKER) == 1, "the README must mark its pandas example exactly once"
    found = BLOCKS.match(text, text.index(MARKER) + len(MARKER) + 1)
    assert found is not None, "the marker must be followed by a bash block and then a python block"
    return found["shell"], found["python"]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    shell, python = example()
    folder = tmp_path_factory.mktemp("readme")
    command = shlex.split(shell.strip())
    assert command[:2] == ["tpusim", "run"] and "\n" not in shell.strip()
    done = subprocess.run([sys.executable, "-m", "tpusim", *command[1:], "--quiet"], cwd=folder,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    namespace: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        exec(compile(python, "README.md (pandas example)", "exec"), namespace)
    return folder, namespace


def test_the_example_loads_the_sweep_and_plots_it(ran: tuple[Path, dict[str, Any]]) -> None:
    folder, namespace = ran
    runs = namespace["runs"]
    assert isinstance(runs, pd.DataFrame)
    assert len(runs) == 14  # the slice sweep: 7 slice counts for each model, none failing
    assert runs["point.model"].tolist() == ["gpt3-175b"] * 7 + ["megatron-nlg-530b-ms"] * 7
    assert runs["slices_ff1"].tolist() == [3, 4, 6, 8, 12, 16, 24, 4, 5, 8, 10, 16, 20, 40]
    for layer in FF_LAYERS:  # one K for every layer, as asked
        assert (runs[f"slices_{layer}"] == runs[f"point.slices_{layer}"]).all()
    dtypes = {column: str(runs[column].dtype) for column in runs.columns}
    assert {c: dtypes[c] for c in ("index", "slices_ff1", "point.batch", "layers")} == dict.fromkeys(
        ("index", "slices_ff1", "point.batch", "layers"), "int64")
    assert {c: dtypes[c] for c in ("step_time_s", "mfu", "compute_s", "point.scale.beta")} == dict.fromkeys(
        ("step_time_s", "mfu", "compute_s", "point.scale.beta"), "float64")
    assert {c: dtypes[c] for c in ("feasible", "point.ignore_memory", "transposes_qkv")} == dict.fromkeys(
        ("feasible", "point.ignore_memory", "transposes_qkv"), "bool")
    text = ["error", "point.model", "point.hardware", "point.topology", "point.prefetch", "point.slow_chips",
            "fidelity", "mesh", "recompute", "dataflows_qkv", "dataflows_ff2"]
    for column in text:
        assert pd.api.types.is_string_dtype(runs[column]), column
        assert runs[column].map(type).eq(str).all(), column
    assert set(runs["error"]) == {"none"} and set(runs["fidelity"]) == {"symmetric"}
    assert set(runs["point.topology"]) == {"default"}
    assert all(dtype in ("int64", "float64", "bool") or pd.api.types.is_string_dtype(runs[column])
               for column, dtype in dtypes.items())  # no mixed 'object' columns
    assert (runs["step_time_s"] > runs["compute_s"]).all()
    figure = folder / "slice-sweep.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = namespace["ax"].get_lines()
    assert [line.get_label() for line in lines] == ["gpt3-175b", "megatron-nlg-530b-ms"]
    assert list(lines[0].get_xdata()) == [3, 4, 6, 8, 12, 16, 24]
    assert list(lines[0].get_ydata()) == runs["step_time_s"][:7].tolist()
