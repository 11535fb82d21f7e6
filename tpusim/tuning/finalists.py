"""The tuner's final choice: the searched plans timed as whole steps, the fastest simulated step kept.

Every mesh whose options the search priced by simulation is a finalist with its best plan (and its second plan when
it is the only mesh). Each finalist is simulated as a whole step, its data-parallel synchronisation, overlap limits
and all, so no closed-form tail (``data_tail``) decides between them; the answer is the fastest step simulated, and
the runner-up the fastest of another mesh (the second plan of the same mesh when only one mesh is left).

Past the first two (the second is the runner-up), a finalist is left untimed only when it cannot win: its ops
alone (the plan's per-layer cost over every layer and
micro-batch, ``ops_bound``) already reach the fastest step simulated. A chip runs its ops one after another and its
data-parallel transfers only add exposed time, so a whole step is never shorter than that sum (the step model:
docs/workloads.md#the-autotuner). Under ``exhaustive`` the same bound drives a branch and bound over every plan of
every mesh: plans are timed in increasing order of the bound until it reaches the fastest step, so the answer is
the whole-step optimum of the space the search states, unless a mesh has more than ``EXHAUSTIVE_STEPS`` plans below
the bound (a note then names it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.tuning.dp import Plan
from tpusim.tuning.result import Choice

if TYPE_CHECKING:
    from concurrent.futures import Future

    from tpusim.collectives.network import Network
    from tpusim.tuning.layer_costs import PricingContext
    from tpusim.tuning.parallel import Entries, SimulationPool
    from tpusim.tuning.space import MeshCandidate

__all__ = ["Finalist", "Searched", "Timed", "ops_bound", "time_exhaustively", "time_finalists"]


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
    """The least a whole step of ``plan`` (of ``search``'s mesh) can take: its priced ops over every layer and
    micro-batch."""
    return plan.cost * layers * search.whole.microbatches


def estimate(finalist: Finalist, layers: int) -> float:
    """The search's estimate of a finalist's whole step: its ops plus the closed-form data-parallel tail."""
    return ops_bound(finalist.plan, finalist.search, layers) + finalist.search.tail


def bound(finalist: Finalist, layers: int) -> float:
    """``ops_bound`` of a finalist."""
    return ops_bound(finalist.plan, finalist.search, layers)


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
    the earlier finalist), and those left untimed because their ops alone reach the fastest step."""
    order = sorted(finalists, key=lambda f: (bound(f, layers), f.key))
    futures: list[Future[StepResult] | None] = [
        pool.step(step_spec(f), f.search.step_network, f.search.simulations)
        if pool is not None and number > 0 else None for number, f in enumerate(order)]
    timed: list[Timed] = []
    untimed: list[Finalist] = []
    fastest = math.inf
    for finalist, future in zip(order, futures, strict=True):
        # the first two are always timed: the second is the runner-up the result reports
        if len(timed) >= 2 and bound(finalist, layers) >= fastest:
            if future is not None:
                future.cancel()
            untimed.append(finalist)
            continue
        result = future.result() if future is not None else _simulate(finalist)  # a worker's error: here
        timed.append(Timed(finalist, result))
        fastest = min(fastest, result.step_time_s)
    return _ranked(timed, finalists), untimed


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
    firsts = [(s.plans(simulated=True, keep=1), s) for s in searches]
    order = sorted(((plans[0], s) for plans, s in firsts if plans),
                   key=lambda item: (ops_bound(item[0], item[1], layers), item[1].candidate.key))
    finalists: list[Finalist] = []
    capped: list[MeshCandidate] = []
    for _, search in order:
        keep, seen, count = 1, 0, 0
        while True:
            plans = search.plans(simulated=True, keep=keep)
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
