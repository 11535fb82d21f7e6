"""Each algorithm declares the parameters it takes (``GemmAlgorithm.takes``); the refusal of one it does not take
is written from those declarations, so a new algorithm that declares a slice count is named in it."""

from __future__ import annotations

from collections.abc import Iterator
from types import MappingProxyType

import pytest

from tpusim.errors import InfeasibleError
from tpusim.gemm import registry
from tpusim.gemm.algorithms.collective import CollectiveGemm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import ALGORITHM_PARAMETERS, GemmParams
from tpusim.gemm.registry import algorithms, get_algorithm, register_algorithm
from tpusim.vocabulary import Dataflow

PROBLEM = GemmProblem(64, 64, 64, Dataflow.OS)


class SlicedCollective(CollectiveGemm):
    name = "sliced-collective"
    takes = MappingProxyType({"slices": "its chunk count S"})


@pytest.fixture
def extra() -> Iterator[None]:
    saved = dict(registry._ALGORITHMS)
    try:
        register_algorithm(SlicedCollective())
        yield
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(saved)


def test_the_declarations_of_the_built_in_algorithms() -> None:
    declared = {name: sorted(a.takes) for name, a in algorithms().items() if a.takes}
    assert declared == {"cannon": ["variant"], "meshslice": ["block", "compat_mean_overlap", "slices"],
                        "summa": ["slices"]}
    assert [name for name, a in algorithms().items() if a.uses_slices] == ["meshslice", "summa"]
    assert dict(ALGORITHM_PARAMETERS) == {"slices": True, "block": False, "variant": False,
                                          "compat_mean_overlap": False}


def test_a_slice_count_is_refused_by_an_algorithm_without_one() -> None:
    with pytest.raises(InfeasibleError) as caught:
        get_algorithm("cannon").check(PROBLEM, (4, 4), GemmParams(slices=2))
    assert caught.value.message == ("--slices 2 does not apply to algorithm 'cannon'; only 'meshslice' (its slice "
                                    "count S) and 'summa' (its panel count S) take one")


def test_a_parameter_not_refused_is_ignored() -> None:
    get_algorithm("collective").check(PROBLEM, (4, 4), GemmParams(block=4, compat_mean_overlap=True))


@pytest.mark.usefixtures("extra")
def test_a_new_algorithm_that_declares_slices_is_named_in_the_refusal() -> None:
    with pytest.raises(InfeasibleError) as caught:
        get_algorithm("wang").check(PROBLEM, (4, 4), GemmParams(slices=3))
    assert caught.value.message.endswith("only 'meshslice' (its slice count S), 'sliced-collective' (its chunk count "
                                         "S) and 'summa' (its panel count S) take one")
    assert get_algorithm("sliced-collective").uses_slices


def test_an_unknown_parameter_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(TypeError, match=r"takes names \['slice'\]; valid: slices, block, variant"):
        type("Misspelt", (CollectiveGemm,), {"name": "misspelt", "takes": MappingProxyType({"slice": "S"})})
