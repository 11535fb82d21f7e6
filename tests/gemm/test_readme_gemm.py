"""The README's verified GeMM example runs as written, in seconds, and prints what its comment says."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
# from the gemm call to its print line, whose comment holds the output
EXAMPLE = re.compile(r"^(gemm = tp\.gemm\(.*?\nprint\(.*?\))  # (.*?)(?: \(in about .*\))?$", re.S | re.M)


def test_readme_gemm_example_prints_what_the_readme_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = EXAMPLE.search(README.read_text())
    assert found, "README lost its tp.gemm(..., verify=True) example"
    code, shown = found.groups()
    assert "verify=True" in code and "m=2048, n=2048, k=2048" in code  # small enough to verify in seconds
    monkeypatch.chdir(tmp_path)  # the example writes its trace to the working folder
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile("import tpusim.api as tp\n" + code, str(README), "exec"), {})
    assert printed.getvalue().strip() == shown
    assert (tmp_path / "meshslice.json").stat().st_size > 0
