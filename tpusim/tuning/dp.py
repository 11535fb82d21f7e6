"""Dynamic programming over the activation-layout flags at the FF layers' boundaries.

On a given mesh the step time is separable: the non-FF ops' time (which depends on the block's layout)
plus, per FF layer, the time of the option it runs. Options interact only through the layout flag
between layers (False: tokens over axis 0 and features over axis 1; True: the two swapped), so the
search is a DP whose state is (start flag, current flag) and whose stages are QKV, out-proj, FF1, FF2.

Flag rules (docs/algorithms.md#training-triplets-and-transposition, restricted to consistent flags):
- a layer runs in its input's layout, so an option is admissible only when its transpose flag equals the
  incoming flag; an RS layer outputs the other layout, every other op keeps its input's;
- each residual Add (after out-proj, after FF2) adds the sub-block's input and output. The DP requires
  them to agree, i.e. each sub-block ends in the flag it started with, so no Transpose is ever inserted
  (its cost is an assumption of the reference, all-to-all or block swap, and never part of the step
  model); the block then also ends in its start flag, as the next identical block requires;
- attention runs in the layout QKV outputs, which must be feasible on the mesh (heads over the feature
  axis, sequences over the token axis).
For 1D algorithms the flags do not apply: every option is untransposed and nothing flips.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tpusim.model.layer import FF_LAYERS
from tpusim.tuning.space import LayerOption
from tpusim.vocabulary import Dataflow


@dataclass(frozen=True)
class Stage:
    name: str
    feeds_attention: bool = False
    closes_residual: bool = False


STAGES = (
    Stage(FF_LAYERS[0], feeds_attention=True),
    Stage(FF_LAYERS[1], closes_residual=True),
    Stage(FF_LAYERS[2]),
    Stage(FF_LAYERS[3], closes_residual=True),
)


TIE = 1e-9
"""Plans whose costs agree to this relative are tied: equal ops, which the DP orders by their options' text."""



@dataclass(frozen=True)
class Plan:
    """A complete choice for one mesh: start layout, one option per FF layer, and its summed cost."""

    cost: float
    start: bool
    options: tuple[LayerOption, ...]

    def sort_key(self) -> tuple[float, bool, tuple[str, ...]]:
        # ties are broken by the options' text so that results do not depend on dict ordering
        return (self.cost, self.start, tuple(o.describe() for o in self.options))


def tied(plans: Sequence[Plan], best: Plan) -> list[Plan]:
    """Those of ``plans`` tied with ``best`` in cost (``TIE``), in their order."""
    return [plan for plan in plans if math.isclose(plan.cost, best.cost, rel_tol=TIE)]


# (stage index, input flag, required output flag or None) -> options with that transpose flag, with costs
PricedOptions = Callable[[int, bool, bool | None], Sequence[tuple[LayerOption, float]]]


def output_flag(flag: bool, option: LayerOption, flips: bool) -> bool:
    """The layout a layer hands on: RS flips it (on 2D meshes), everything else keeps it."""
    return flag != (flips and option.dataflow is Dataflow.RS)


def best_plans(priced: PricedOptions, start_costs: Mapping[bool, float], *, flips: bool,
               attention_ok: Callable[[bool], bool], keep: int) -> list[Plan]:
    """The ``keep`` cheapest plans; ``start_costs`` gives each allowed start flag its non-FF time."""
    frontier: dict[tuple[bool, bool], list[tuple[float, tuple[LayerOption, ...]]]] = {
        (start, start): [(cost, ())] for start, cost in start_costs.items()
    }
    for index, stage in enumerate(STAGES):
        grown: dict[tuple[bool, bool], list[tuple[float, tuple[LayerOption, ...]]]] = defaultdict(list)
        for (start, flag), partials in frontier.items():
            required = start if stage.closes_residual else None
            for option, cost in priced(index, flag, required):
                out = output_flag(flag, option, flips)
                if (required is not None and out != required) or (stage.feeds_attention and not attention_ok(out)):
                    continue
                grown[(start, out)].extend((total + cost, (*chosen, option)) for total, chosen in partials)
        frontier = {state: heapq.nsmallest(keep, items, key=lambda item: (item[0], _text(item[1])))
                    for state, items in grown.items()}
    plans = [Plan(total, start, chosen) for (start, _), items in frontier.items() for total, chosen in items]
    return sorted(plans, key=Plan.sort_key)[:keep]


def count_plans(options: Callable[[int, bool, bool | None], Sequence[LayerOption]], starts: Sequence[bool], *,
                flips: bool, attention_ok: Callable[[bool], bool]) -> int:
    """How many complete plans the rules admit (the size of the space the DP searches implicitly)."""
    counts: dict[tuple[bool, bool], int] = {(start, start): 1 for start in starts}
    for index, stage in enumerate(STAGES):
        grown: dict[tuple[bool, bool], int] = defaultdict(int)
        for (start, flag), n in counts.items():
            required = start if stage.closes_residual else None
            for option in options(index, flag, required):
                out = output_flag(flag, option, flips)
                if (required is not None and out != required) or (stage.feeds_attention and not attention_ok(out)):
                    continue
                grown[(start, out)] += n
        counts = dict(grown)
    return sum(counts.values())


def _text(options: tuple[LayerOption, ...]) -> tuple[str, ...]:
    return tuple(o.describe() for o in options)
