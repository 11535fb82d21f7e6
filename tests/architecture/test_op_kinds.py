"""Op kinds are told apart by the ops themselves (``model.op_kinds``): code that acts on every kind is a visitor, so
no module dispatches on an op's class with an ``isinstance`` chain. What is left are filters that pick one kind out
of a sequence (the GeMMs a prefetch looks ahead to, the statistics 1D parallelism moves), counted here so that a
new one is a decision."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tpusim"
KINDS = r"(?:GemmOp|LocalOp|NormStatsOp|DataSyncOp|DataWaitOp)"
TEST = re.compile(rf"\bisinstance\([^()]*(?:\([^()]*\))?[^()]*,\s*{KINDS}\)")
CHAIN = re.compile(rf"\belif\s+(?:not\s+)?isinstance\([^,]*,\s*{KINDS}\)")

FILTERS = {
    "tpusim/model/plan.py": 2,  # the GeMMs a plan prepares; the LayerNorm statistics 1D parallelism moves
    "tpusim/model/program.py": 5,  # the GeMMs the data-parallel syncs and the prefetch attach to
    "tpusim/model/step.py": 1,  # a GeMM is timed through the GeMM cache
    "tpusim/tuning/layer_costs.py": 2,  # a layer's GeMMs, and the non-FF ops that are not
}


def _count(pattern: re.Pattern[str]) -> dict[str, int]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        count = len(pattern.findall(path.read_text(encoding="utf-8")))
        if count:
            found[str(path.relative_to(PACKAGE.parent))] = count
    return found


def test_no_module_dispatches_on_an_op_kind_by_its_class() -> None:
    assert _count(CHAIN) == {}


def test_the_kind_filters_left_are_the_ones_listed() -> None:
    assert _count(TEST) == FILTERS


def test_the_patterns_see_a_chain_and_a_filter() -> None:
    chain = "if isinstance(op, GemmOp):\n    pass\nelif isinstance(op, LocalOp):\n    pass\n"
    assert len(CHAIN.findall(chain)) == 1 and len(TEST.findall(chain)) == 2
    assert TEST.findall("ahead = next(i for i in it if isinstance(sequence[i][0], GemmOp))")
    assert not TEST.findall("isinstance(value, int)")
