"""docs/extending.md's examples run: the algorithm it defines registers, computes X @ W and equals its twin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpusim import api
from tpusim.gemm import registry

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("dataflow", ["os", "ls", "rs"])
def test_the_example_algorithm_computes_the_product_and_equals_its_twin(dataflow: str) -> None:
    definition, usage = _python_blocks()
    saved = dict(registry._ALGORITHMS)
    try:
        exec(compile(definition, str(DOC), "exec"), {})
        namespace: dict[str, object] = {}
        exec(compile(usage.replace('dataflow="os"', f'dataflow="{dataflow}"'), str(DOC), "exec"), namespace)
        result = namespace["result"]
        collective = api.gemm(algorithm="collective", dataflow=dataflow, m=512, n=512, k=512, mesh="4x4",
                              hardware="tpuv4-wire", topology="torus:4x4", prefetch="none")
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(saved)
    assert result.max_abs_error is not None and result.max_abs_error < 1e-9  # type: ignore[attr-defined]
    assert result.analytic_time_s is not None  # type: ignore[attr-defined]
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)  # type: ignore[attr-defined]
    assert result.time_s >= collective.time_s  # type: ignore[attr-defined]
