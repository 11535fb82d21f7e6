"""The paper-reproduction families, each named after its packaged experiment and listed here explicitly.

A family's ``table`` turns the finished points of ``results.json`` into the rows of ``X.csv`` and its ``plot``
draws ``X.png`` from those rows (``tpusim.experiments.families.family``). Two families may not share a name.
"""

from __future__ import annotations

from types import MappingProxyType

from tpusim.errors import unknown_name
from tpusim.experiments.families.comparisons import BREAKDOWN, HEADLINE
from tpusim.experiments.families.family import Family
from tpusim.experiments.families.pod import POD
from tpusim.experiments.families.scaling import STRONG_SCALING, TUNER_ACCURACY, TUNER_ACCURACY_POD, WEAK_SCALING
from tpusim.experiments.families.sweeps import MESH_SHAPES, SENSITIVITY, SLICE_SWEEP

__all__ = ["FAMILIES", "Family", "family_names", "get_family"]


def _unique(families: tuple[Family, ...]) -> MappingProxyType[str, Family]:
    named: dict[str, Family] = {}
    for family in families:
        if family.name in named:
            raise ValueError(f"two reproduction families are named {family.name!r}")
        named[family.name] = family
    return MappingProxyType(named)


FAMILIES = _unique((HEADLINE, BREAKDOWN, WEAK_SCALING, STRONG_SCALING, TUNER_ACCURACY, TUNER_ACCURACY_POD,
                    SLICE_SWEEP, MESH_SHAPES, SENSITIVITY, POD))


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise unknown_name("reproduction family", name, [*FAMILIES, "all"]) from None


def family_names() -> list[str]:
    return list(FAMILIES)
