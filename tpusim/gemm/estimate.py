"""What simulating one GeMM will cost, before it runs: its events from cheap probes (``engine.footprint``).

A probe runs the algorithm's chip program on one representative chip, and on two, with timing-only operands (the
symmetric fidelity's machinery, whatever the fidelity asked), on a network that runs each distinct collective once
(``collectives.physical.probe``). The full-fidelity count follows from the probes
(``full_events``): exact where symmetric fidelity is exact, approximate where chips drift apart (SUMMA's and
Cannon's position-dependent schedules, lines without wraparound; docs/limits.md#cost-estimate gives the factors
measured). A symmetric run costs what its representatives' probe cost; an analytic one simulates nothing.
"""

from __future__ import annotations

from tpusim.collectives.device import run_spmd
from tpusim.collectives.network import Network
from tpusim.collectives.physical.probe import probe_network
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.footprint import Estimate, full_events, full_fidelity_bytes
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import check_gemm
from tpusim.vocabulary import Fidelity

__all__ = ["gemm_estimate", "second_representative"]


def second_representative(mesh: tuple[int, int]) -> tuple[int, int]:
    """The chip a two-chip probe adds to chip (0, 0): its row neighbour, or its column neighbour on one column."""
    return (0, 1) if mesh[1] > 1 else (1, 0)


def _probe(algorithm: GemmAlgorithm, problem: GemmProblem, params: GemmParams, network: Network,
           representatives: list[tuple[int, int]]) -> tuple[int, tuple[int, int]]:
    """(events, (those the link programs brought, those had each group run apart)) of the GeMM run on
    ``representatives`` only."""
    mesh = network.mapping.shape
    ctx = GemmContext(problem, params, mesh)
    blocks = operand_blocks(problem.x_shape, problem.w_shape, algorithm.sharding(problem, mesh), mesh)
    x, w = Tensor(blocks["x"], problem.dtype), Tensor(blocks["w"], problem.dtype)
    sim = Simulation(network)
    runtime = CollectiveRuntime(sim, network, representatives=representatives)
    run_spmd(sim, runtime, algorithm.program, lambda dev: (ctx, x, w))
    env = sim.env
    return sim.events + env.link_events, (env.link_events, env.link_events_apart)


def gemm_estimate(algorithm: GemmAlgorithm, problem: GemmProblem, params: GemmParams, network: Network,
                  fidelity: Fidelity) -> Estimate:
    """The cost of simulating ``problem`` with ``algorithm`` on ``network`` at ``fidelity`` (as ``auto`` resolves
    it); an infeasible request costs nothing here and is refused by the run. ``network`` is best a
    ``probe_network`` shared by the estimates of one request, so that each distinct collective runs once."""
    network = probe_network(network)
    try:
        check_gemm(algorithm, problem, network.mapping.shape, params)
    except InfeasibleError:
        return Estimate(0)
    obstacle = symmetric_obstacle(algorithm, params, network)
    resolved = resolve_fidelity(fidelity, obstacle)[0] if fidelity is not Fidelity.SYMMETRIC else fidelity
    if resolved is Fidelity.ANALYTIC:
        return Estimate(0)
    mesh = network.mapping.shape
    if resolved is Fidelity.SYMMETRIC:
        events, links = _probe(algorithm, problem, params, network, representative_chips(algorithm, params, network))
        return Estimate(events, links[0])
    chips = mesh[0] * mesh[1]
    one, links = _probe(algorithm, problem, params, network, [(0, 0)])
    alike = obstacle is None
    # the second probe only matters where chips behave alike (``full_events``)
    two = _probe(algorithm, problem, params, network, [(0, 0), second_representative(mesh)])[0] \
        if alike and chips > 1 else one
    return full_events(one, two, links, chips, alike=alike, floor_bytes=full_fidelity_bytes(chips))
