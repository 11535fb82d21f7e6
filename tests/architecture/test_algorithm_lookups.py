"""An algorithm's name is turned into its object once per request: by the registry's ``get_algorithm``, called
only from ``algorithm_named`` (tpusim/experiments/names.py), where the runners and the experiment files' name
check resolve it. Everything below takes the object (a ``StepSpec``'s ``algorithm``, ``simulate_gemm``'s, the
tuner's ``gemm_algorithm``), so no layer looks a name up again."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tpusim"
REGISTRY = PACKAGE / "gemm" / "registry.py"
RESOLVER = PACKAGE / "experiments" / "names.py"
CALL = re.compile(r"\bget_algorithm\(")


def lookups() -> dict[str, int]:
    """The calls of ``get_algorithm`` in each module of the package, outside the registry that defines it."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == REGISTRY:
            continue
        count = len(CALL.findall(path.read_text(encoding="utf-8")))
        if count:
            found[str(path.relative_to(PACKAGE.parent))] = count
    return found


def test_names_are_resolved_in_one_place() -> None:
    assert lookups() == {str(RESOLVER.relative_to(PACKAGE.parent)): 1}


def test_the_count_sees_a_call() -> None:
    assert len(CALL.findall("algorithm = get_algorithm(spec.algorithm)")) == 1
    assert not CALL.findall("def algorithm_named(name: str) -> GemmAlgorithm:")
