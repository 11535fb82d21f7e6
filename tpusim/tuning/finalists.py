"""The tuner's final choice: the searched plans timed as whole steps, the fastest simulated step kept.

Every mesh whose options the search priced by simulation is a finalist with its best plan, every plan tied with it in
priced ops (up to ``TIED_PLANS``), and its second plan when it is the only mesh. Plans with equal ops are not equal
steps: a GeMM's collectives share the chip's overlap slots with the data-parallel all-gathers and reduce-scatters,
so which axis a plan's collectives take decides how much of the data-parallel time hides (on 16 TPUv4 chips, MT-NLG
under the collective 2D GeMM: four tied plans of the 4x1x4 layout take 35.02 to 39.13 s). Each finalist is
simulated as a whole step, its data-parallel synchronisation, overlap limits and all, so no closed-form tail
(``data_tail``) decides between them; the answer is the fastest step simulated, and the runner-up the fastest of
another mesh (the second plan of the same mesh when only one mesh is left).

A finalist is left untimed only when it can be neither the answer nor the runner-up: its bound (``ops_bound``)
already reaches the fastest step simulated and, unless it is of the best's own mesh, the fastest of another mesh
(the first finalist of a second mesh is therefore always timed, as is a single mesh's second plan). A chip
runs its ops one after another and its data-parallel transfers only add exposed time, but a prefetch policy that
starts a GeMM's early transfers (its weight gather, MeshSlice's first slice, SUMMA's first panel, Cannon's skew)
behind the ops before it can make the GeMM shorter inside the step than alone: the bound therefore sums every op
over every layer and micro-batch with each GeMM timed from when its early transfers have arrived (``gemm.hoisted``),
which no step undercuts (the step model: docs/workloads.md#the-autotuner). Under ``exhaustive`` the same bound
drives a branch and bound over every plan of every mesh: plans are timed in increasing order of the bound (the DP on
the hoisted prices) until it reaches the fastest step, so the answer is the whole-step optimum of the space the
search states, unless a mesh has more than ``EXHAUSTIVE_STEPS`` plans below the bound (a note then names it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.tuning.dp import Plan, tied
from tpusim.tuning.result import Choice

if TYPE_CHECKING:
    from concurrent.futures import Future

    from tpusim.collectives.network import Network
    from tpusim.tuning.layer_costs import PricingContext
    from tpusim.tuning.parallel import Entries, SimulationPool
    from tpusim.tuning.space import MeshCandidate

__all__ = ["TIED_PLANS", "Finalist", "Searched", "Timed", "mesh_finalists", "ops_bound", "time_exhaustively",
           "time_finalists"]

TIED_PLANS = 4
"""Plans of one mesh, its best included, timed as whole steps when the DP finds them tied in priced ops (equal to
``dp.TIE`` relative). Ties are common where a tensor axis is short (its dataflows cost alike); past this many a mesh's
tied plans are left untimed, a bound on the default search's work that ``exhaustive`` does not have. The ones timed
are chosen to differ most (``_spread``), since the DP's own order (by the options' text) only varies the last
layers."""

TIED_CANDIDATES = 64
"""Tied plans of one mesh that ``_spread`` chooses among."""


class Searched(Protocol):
    """What the final timing needs of one mesh's search (``mesh_search.MeshSearch``)."""

    candidate: MeshCandidate
    context: PricingContext
    tail: float
    simulations: Entries
    whole: StepSpec  # the whole step its plans are timed as

    @property
    def step_network(self) -> Network: ...

    def plans(self, simulated: bool, keep: int) -> list[Plan]: ...

    def bounded_plans(self, keep: int) -> list[Plan]: ...

    def lower_bound(self, plan: Plan) -> float: ...


@dataclass(frozen=True)
class Finalist:
    """A plan of a searched mesh, to be timed as a whole step."""

    search: Searched
    plan: Plan

    @property
    def key(self) -> tuple[str, str]:
        """(slice shape, mesh label): one logical mesh on two slice shapes is two meshes (``MeshCandidate.key``)."""
        return self.search.candidate.key


@dataclass(frozen=True)
class Timed:
    """A finalist and its simulated whole step."""

    finalist: Finalist
    result: StepResult

    @property
    def step_time_s(self) -> float:
        return self.result.step_time_s


def ops_bound(plan: Plan, search: Searched, layers: int) -> float:
    """The least a whole step of ``plan`` (of ``search``'s mesh) can take: its ops over every layer and micro-batch,
    each GeMM timed from when its early transfers have arrived (``MeshSearch.lower_bound``)."""
    return search.lower_bound(plan) * layers * search.whole.microbatches


def estimate(finalist: Finalist, layers: int) -> float:
    """The search's estimate of a finalist's whole step: its priced ops plus the closed-form data-parallel tail."""
    return finalist.plan.cost * layers * finalist.search.whole.microbatches + finalist.search.tail


def bound(finalist: Finalist, layers: int) -> float:
    """``ops_bound`` of a finalist."""
    return ops_bound(finalist.plan, finalist.search, layers)


def mesh_finalists(search: Searched, plans: Sequence[Plan], second: bool) -> list[Finalist]:
    """A refined mesh's finalists: its best plan of ``plans`` (the DP's, cheapest first) with the plans tied with it
    in priced ops, up to ``TIED_PLANS``, and its second plan when ``second`` asks for it (the only mesh left)."""
    # a one-chip replica moves nothing over its tensor axes, so its tied plans are one step; otherwise the same DP
    # on the same prices, whose first plan is ``plans[0]``
    one_chip = math.prod(search.candidate.mesh) == 1
    ties = [plans[0]] if one_chip else tied(search.plans(simulated=True, keep=TIED_CANDIDATES), plans[0])
    chosen = _spread(ties, TIED_PLANS)
    if second and len(plans) > 1 and plans[1] not in chosen:
        chosen.append(plans[1])
    return [Finalist(search, plan) for plan in chosen]


def _spread(plans: Sequence[Plan], count: int) -> list[Plan]:
    """``count`` of ``plans`` (the first always) chosen one by one as the plan whose nearest chosen one differs from it
    in the most layers (the earlier plan on ties): the tied plans that take their collectives most differently."""
    chosen = list(plans[:1])
    rest = list(plans[1:])
    while rest and len(chosen) < count:
        far = max(rest, key=lambda p: (min(_differing(p, c) for c in chosen), -rest.index(p)))
        chosen.append(far)
        rest.remove(far)
    return chosen


def _differing(one: Plan, other: Plan) -> int:
    return sum(a != b for a, b in zip(one.options, other.options, strict=True))


def step_spec(finalist: Finalist) -> StepSpec:
    """The whole step of a finalist's plan."""
    plan, uses_slices = finalist.plan, finalist.search.context.algorithm.uses_slices
    return replace(finalist.search.whole, dataflows=tuple(o.dataflow for o in plan.options),
                   transposes=tuple(o.transpose for o in plan.options),
                   slices=tuple(o.slices for o in plan.options) if uses_slices else None)


def _simulate(finalist: Finalist) -> StepResult:
    return simulate_step(step_spec(finalist), finalist.search.step_network)


def time_finalists(pool: SimulationPool | None, finalists: Sequence[Finalist],
                   layers: int) -> tuple[list[Timed], list[Finalist]]:
    """Time each finalist that can still win as a whole step, in increasing order of its bound (the first in this
    process, the others meanwhile on the workers when there are any). Returns the timed ones, fastest first (ties:
    the earlier finalist), and those left untimed because their bound shows they can be neither the answer nor the
    runner-up."""
    order = sorted(finalists, key=lambda f: (bound(f, layers), f.key))
    futures: list[Future[StepResult] | None] = [
        pool.step(step_spec(f), f.search.step_network, f.search.simulations)
        if pool is not None and number > 0 else None for number, f in enumerate(order)]
    timed: list[Timed] = []
    untimed: list[Finalist] = []
    one_mesh = len({f.key for f in order}) == 1
    for finalist, future in zip(order, futures, strict=True):
        if not _may_place(finalist, timed, layers, one_mesh):
            if future is not None:
                future.cancel()
            untimed.append(finalist)
            continue
        result = future.result() if future is not None else _simulate(finalist)  # a worker's error: here
        timed.append(Timed(finalist, result))
    return _ranked(timed, finalists), untimed


def _may_place(finalist: Finalist, timed: Sequence[Timed], layers: int, one_mesh: bool) -> bool:
    """Whether ``finalist`` may still be the answer or the runner-up (the fastest step of another mesh than the
    best's; of a single mesh, its second plan) given the steps ``timed`` so far."""
    if not timed or (one_mesh and len(timed) == 1):
        return True
    low = bound(finalist, layers)
    best = min(timed, key=lambda t: t.step_time_s)
    if low < best.step_time_s:
        return True
    if finalist.key == best.finalist.key:
        return False
    others = [t.step_time_s for t in timed if t.finalist.key != best.finalist.key]
    return not others or low < min(others)


EXHAUSTIVE_STEPS = 64
"""Whole steps the exhaustive search times per mesh at most. Where the data-parallel tail is large, thousands of a
mesh's plans (every slice count) can sit below the bound, each a whole step to simulate; past this many the mesh's
remaining plans are left untimed and a note names the mesh, so the answer is then the optimum of what was timed."""


def time_exhaustively(searches: Sequence[Searched], layers: int,
                      heard: Callable[[int], None] | None = None) -> tuple[list[Timed], list[MeshCandidate]]:
    """Branch and bound over every plan of every mesh (DES prices): plans are timed as whole steps in increasing
    order of their bound until it reaches the fastest step simulated, at most ``EXHAUSTIVE_STEPS`` per mesh.
    Returns every timed plan, fastest first, and the meshes the cap stopped before their bound did; ``heard``
    hears the count of whole steps timed so far."""
    fastest = math.inf
    timed: list[Timed] = []
    firsts = [(s.bounded_plans(keep=1), s) for s in searches]
    order = sorted(((plans[0], s) for plans, s in firsts if plans),
                   key=lambda item: (ops_bound(item[0], item[1], layers), item[1].candidate.key))
    finalists: list[Finalist] = []
    capped: list[MeshCandidate] = []
    for _, search in order:
        keep, seen, count = 1, 0, 0
        while True:
            plans = search.bounded_plans(keep=keep)
            for plan in plans[seen:]:
                if ops_bound(plan, search, layers) >= fastest:
                    break
                if count == EXHAUSTIVE_STEPS:
                    capped.append(search.candidate)
                    break
                count += 1
                finalist = Finalist(search, plan)
                finalists.append(finalist)
                result = _simulate(finalist)
                timed.append(Timed(finalist, result))
                fastest = min(fastest, result.step_time_s)
                if heard is not None:
                    heard(len(timed))
            else:
                if len(plans) == keep:  # there may be more plans below the bound: ask the DP for twice as many
                    seen, keep = len(plans), 2 * keep
                    continue
            break
    return _ranked(timed, finalists), capped


def _ranked(timed: list[Timed], finalists: Sequence[Finalist]) -> list[Timed]:
    position = {id(f): number for number, f in enumerate(finalists)}
    return sorted(timed, key=lambda t: (t.step_time_s, position[id(t.finalist)]))


def runner_up(timed: Sequence[Timed]) -> Timed | None:
    """The fastest timed step of another mesh (or the same mesh on another slice shape) than the best's, else the
    next plan of the best's own mesh."""
    if len(timed) < 2:
        return None
    others = [t for t in timed[1:] if t.finalist.key != timed[0].finalist.key]
    return others[0] if others else timed[1]


def choice(timed: Timed, layers: int) -> Choice:
    """The result's record of a timed finalist."""
    result, finalist = timed.result, timed.finalist
    return Choice(
        mesh=finalist.search.candidate.label, slice_shape=finalist.search.candidate.slice_shape,
        layout=result.named_layout, algorithm=result.algorithm, dataflows=result.dataflows,
        transposes=result.transposes, slices=result.slices, step_time_s=result.step_time_s,
        estimate_step_s=estimate(finalist, layers), fidelity=result.fidelity, mfu=result.mfu,
        hfu=result.hfu, tokens_per_s=result.tokens_per_s, seconds_per_sequence=result.seconds_per_sequence,
        compute_s=result.compute_s, exposed_comm_s=result.exposed_comm_s,
        exposed_data_comm_s=result.exposed_data_comm_s, data_parallel=result.data_parallel,
        memory_bytes_per_chip=result.memory_bytes_per_chip,
        memory_feasible=result.memory_feasible, feasible=result.feasible, violations=result.violations,
        microbatches=result.microbatches, recompute=result.recompute,
    )
