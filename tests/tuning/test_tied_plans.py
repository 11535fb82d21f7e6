"""Plans tied in priced ops: the default search times the ones that differ most, and on a case where only a whole
step tells them apart it lands on the exhaustive optimum."""

from __future__ import annotations

import itertools

import pytest

from tpusim import api
from tpusim.tuning.dp import Plan
from tpusim.tuning.finalists import TIED_PLANS, _spread
from tpusim.tuning.space import LayerOption
from tpusim.vocabulary import Dataflow


def _plan(text: str) -> Plan:
    options = tuple(LayerOption(Dataflow(word.rstrip("T")), word.endswith("T"), None) for word in text.split())
    return Plan(1.0, False, options)


def test_the_tied_plans_timed_are_those_that_differ_most() -> None:
    # the DP's own order (by text) varies the last layers first; the spread takes the first, then the plan farthest
    # from every one taken (layers that differ), the earlier on ties
    ordered = [_plan(" ".join(words)) for words in itertools.product(("ls", "os", "rs"), repeat=4)]
    chosen = _spread(ordered, TIED_PLANS)
    texts = [" ".join(o.describe() for o in p.options) for p in chosen]
    assert texts == ["ls ls ls ls", "os os os os", "rs rs rs rs", "ls ls os os"]  # the 4th: 2 layers from each
    assert _spread(ordered[:2], TIED_PLANS) == ordered[:2]


@pytest.mark.slow
def test_the_default_search_finds_the_exhaustive_plan_among_tied_ones() -> None:
    # MT-NLG with the collective 2D GeMM on 16 tpuv4 chips: the best plan (rs on every layer, two transposed) ties
    # in priced ops with a dozen others on the same layout, and only its whole step is faster
    request = {"model": "megatron-nlg-530b-ms", "hardware": "tpuv4", "chips": 16, "algorithm": "collective",
               "ignore_memory": True}
    default = api.tune(**request)
    exhaustive = api.tune(exhaustive=True, **request)
    assert default.best.step_time_s == pytest.approx(exhaustive.best.step_time_s, rel=1e-12)
    assert (default.best.mesh, default.best.dataflows) == (exhaustive.best.mesh, exhaustive.best.dataflows)
    assert default.steps_simulated < exhaustive.steps_simulated
