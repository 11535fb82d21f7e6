"""The layout-flag DP finds exactly what brute force over every consistent combination finds."""

from __future__ import annotations

import itertools
import random

import pytest

from tpusim.tuning.dp import STAGES, best_plans, count_plans, output_flag
from tpusim.tuning.space import LayerOption
from tpusim.vocabulary import Dataflow


def synthetic(seed: int) -> dict[tuple[int, LayerOption], float]:
    """Random costs for every (layer, dataflow, transpose, K in 1..3)."""
    rng = random.Random(seed)
    return {(index, LayerOption(d, t, k)): rng.uniform(1.0, 10.0)
            for index in range(len(STAGES)) for d in Dataflow for t in (False, True) for k in (1, 2, 3)}


def brute_force(costs: dict[tuple[int, LayerOption], float], start_costs: dict[bool, float],
                attention_ok: bool) -> list[tuple[float, tuple[LayerOption, ...]]]:
    """Every plan that obeys the rules, written out directly from the rules."""
    per_layer = [[o for (i, o) in costs if i == index] for index in range(len(STAGES))]
    found = []
    for start, base in start_costs.items():
        for combo in itertools.product(*per_layer):
            flag, ok = start, True
            for index, option in enumerate(combo):
                if option.transpose != flag:
                    ok = False
                    break
                flag = flag != (option.dataflow is Dataflow.RS)
                if index == 0 and flag and not attention_ok:
                    ok = False
                if STAGES[index].closes_residual and flag != start:
                    ok = False
            if ok:
                found.append((base + sum(costs[(i, o)] for i, o in enumerate(combo)), combo))
    return sorted(found, key=lambda item: item[0])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("attention_ok", [True, False])
def test_dp_equals_brute_force(seed: int, attention_ok: bool) -> None:
    costs = synthetic(seed)
    start_costs = {False: 0.5, True: 0.7}

    def priced(index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
        return [(o, c) for (i, o), c in costs.items() if i == index and o.transpose == flag]

    plans = best_plans(priced, start_costs, flips=True, attention_ok=lambda f: attention_ok or not f, keep=3)
    expected = brute_force(costs, start_costs, attention_ok)
    assert [p.cost for p in plans] == pytest.approx([c for c, _ in expected[:3]])
    assert plans[0].options == expected[0][1]

    def options(index: int, flag: bool, required: bool | None) -> list[LayerOption]:
        return [o for o, _ in priced(index, flag, required)]

    assert count_plans(options, list(start_costs), flips=True,
                       attention_ok=lambda f: attention_ok or not f) == len(expected)


def test_rs_comes_in_pairs_and_transposes_its_partner() -> None:
    # RS is far cheaper everywhere: the best plan must pair it so that each residual sees its own layout
    costs = {(i, LayerOption(d, t, None)): (0.1 if d is Dataflow.RS else 1.0)
             for i in range(4) for d in Dataflow for t in (False, True)}

    def priced(index: int, flag: bool, required: bool | None) -> list[tuple[LayerOption, float]]:
        return [(o, c) for (i, o), c in costs.items() if i == index and o.transpose == flag]

    plan = best_plans(priced, {False: 0.0}, flips=True, attention_ok=lambda f: True, keep=1)[0]
    assert [o.dataflow for o in plan.options] == [Dataflow.RS] * 4
    assert [o.transpose for o in plan.options] == [False, True, False, True]
    assert plan.cost == pytest.approx(0.4)


def test_without_flips_nothing_is_transposed() -> None:
    option = LayerOption(Dataflow.RS, False, None)
    assert output_flag(False, option, flips=False) is False
    assert output_flag(False, option, flips=True) is True
