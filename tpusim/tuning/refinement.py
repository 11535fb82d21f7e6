"""The refinement (default search, step 3; every mesh under ``exhaustive``): each mesh's options priced by DES, on
worker processes when there are any, and its best plans found again on those prices."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tpusim.tuning.dp import Plan
from tpusim.tuning.mesh_search import MeshSearch, mesh_report
from tpusim.tuning.parallel import PendingTimes, SimulationPool
from tpusim.tuning.result import MeshReport
from tpusim.tuning.space import MeshCandidate

Refined = tuple[float, tuple[str, str], MeshSearch, list[Plan]]
"""A mesh with a plan on DES prices: (ranking cost, key, its search, its best plans)."""


def refine(refined: Sequence[MeshSearch], pool: SimulationPool | None, reports: dict[tuple[str, str], MeshReport],
           layers: int, say: Callable[[str], None], done: Callable[[int], None],
           name: Callable[[MeshCandidate], str], bounds: bool = False) -> list[Refined]:
    """The meshes that have a plan on DES prices, cheapest first; every mesh's report is updated, keeping its
    analytic estimate. ``done`` hears the count of meshes refined as each ends; ``bounds`` (the exhaustive search)
    has the workers time the hoisted GeMMs of the whole-step bound too."""
    # every refined mesh's GeMMs go to the workers at once, one task per worker (``parallel``)
    submitted = submit(pool, refined, bounds) if pool is not None else None
    final = []
    for number, search in enumerate(refined, start=1):
        say(f"simulating the best candidates of mesh {name(search.candidate)} ({number} of {len(refined)})")
        if submitted is not None and number == 1:
            collect(refined, submitted)
        plans = search.plans(simulated=True, keep=2)
        if plans:
            final.append((search.ranking_cost(plans[0], layers), search.candidate.key, search, plans))
        report = mesh_report(search, plans, simulated=True, layers=layers)
        previous = reports.get(search.candidate.key)
        report.analytic_step_s = previous.analytic_step_s if previous is not None else None
        reports[search.candidate.key] = report
        done(number)
    final.sort(key=lambda item: item[:2])
    return final


def submit(pool: SimulationPool, searches: Sequence[MeshSearch], bounds: bool) -> PendingTimes:
    """Hand the GeMMs the meshes' DES-priced DPs will simulate (and with ``bounds`` the hoisted ones their bounds
    will time) to the worker processes, in one batch."""
    return pool.gemm_groups([(search.unsimulated(bounds), search.context.algorithm, search.pricer.network,
                              search.context.fidelity)
                             for search in searches])


def collect(searches: Sequence[MeshSearch], pending: PendingTimes) -> None:
    """Store the workers' prices in the searches' cache (a worker's error is raised here), and their simulations
    in its context, where the whole steps timed on these meshes find them as one process would."""
    times, entries = pending.result()
    caches = {id(search.pricer.cache): search.pricer.cache for search in searches}  # the searches share one
    for cache in caches.values():
        for key, value in times:
            cache.store(key, value)
        cache.context.timings.adopt(entries)
    for search in searches:
        search.simulations = entries
