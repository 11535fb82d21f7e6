"""A GeMM's time once its early transfers have arrived: the least a step can charge it.

Under the ``previous-op``, ``previous-gemm`` and ``window`` prefetch policies a step starts a GeMM's data-independent
first transfers (``GemmAlgorithm.early_transfers``: the weight gather, MeshSlice's first slice, SUMMA's first panel,
Cannon's skew) before the GeMM, behind the ops ahead of it, so inside a step the GeMM can take less than it does alone.
At best those transfers have all arrived when it starts: ``hoisted_time`` simulates exactly that (every chip issues
them, the GeMM starts on every chip once all have arrived, and only what follows is timed). Everything else in a
step (contention, data-parallel traffic, overlap slots) only adds to it, so the tuner's whole-step bound sums these
times (``tuning.finalists``). Where the policy starts nothing early, or the algorithm has no early transfer, the
GeMM's own time is the bound.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import partial
from typing import Any

import simpy

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.network import Network
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.cache import cache_key
from tpusim.engine.lines import LineSymmetry, with_lines
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.fidelity import representative_chips, resolve_fidelity, symmetric_obstacle
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.vocabulary import EARLY_PREFETCH, Fidelity

__all__ = ["hoisted_time", "hoists"]


def hoists(algorithm: GemmAlgorithm, problem: GemmProblem, params: GemmParams, mesh: tuple[int, int]) -> bool:
    """Whether a step may start part of this GeMM's communication before it: the policy starts transfers early and
    the algorithm has some."""
    return params.prefetch in EARLY_PREFETCH and algorithm.early_elements(GemmContext(problem, params, mesh)) > 0


def hoisted_time(problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network,
                 fidelity: Fidelity) -> float:
    """The GeMM's time on ``network`` from the moment its early transfers have arrived on every chip (the module
    docstring); its own simulated time where nothing is hoisted. Cached on the network's context."""
    mesh = network.mapping.shape
    if not hoists(algorithm, problem, params, mesh):
        return simulate_gemm(problem, algorithm, params, network, fidelity=fidelity).time_s
    check_gemm(algorithm, problem, mesh, params)
    # slowed links break the symmetry a representative chip stands for, and key the timing, as in ``simulate_gemm``
    overrides = dict(network.link_overrides)
    resolved, _ = resolve_fidelity(fidelity, symmetric_obstacle(algorithm, params, network, overrides=bool(overrides)))
    timings = network.context.timings
    key = cache_key("gemm-hoisted", problem, algorithm.name, params, network.hardware, network.mapping.describe(),
                    resolved, *((overrides,) if overrides else ()))
    cached = timings.get(key)
    if cached is not None:
        return float(cached["time_s"])
    value = _simulate(problem, algorithm, params, network, resolved is Fidelity.SYMMETRIC)
    timings.put(key, {"time_s": value})
    return value


def _simulate(problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network,
              symmetric: bool) -> float:
    if not symmetric:
        return _run(problem, algorithm, params, network, None)
    # representative chips only: the lines and ring positions that run like theirs are left out (engine.lines)
    return with_lines(partial(_run, problem, algorithm, params, network), network.context.memo, network.mapping)


def _run(problem: GemmProblem, algorithm: GemmAlgorithm, params: GemmParams, network: Network,
         lines: LineSymmetry | None) -> float:
    mesh = network.mapping.shape
    ctx = GemmContext(problem, params, mesh)
    blocks = operand_blocks(problem.x_shape, problem.w_shape, algorithm.sharding(problem, mesh), mesh)
    sim = Simulation(network, lines=lines)
    # a run that may leave lines out is a symmetric one (``_simulate``): its representatives run
    representatives = representative_chips(algorithm, params, network) if lines is not None else None
    runtime = CollectiveRuntime(sim, network, representatives=representatives)
    running = len(representatives) if representatives is not None else mesh[0] * mesh[1] * network.mapping.data
    barrier = _Barrier(sim.env, running)

    def program(dev: Device) -> Generator[simpy.Event, Any, Any]:
        x, w = Tensor(blocks["x"], problem.dtype), Tensor(blocks["w"], problem.dtype)
        for transfer, tensor in algorithm.early_transfers(dev, ctx, x, w):
            dev.prefetched[transfer] = dev.start_transfer(transfer, tensor)
        yield simpy.AllOf(sim.env, list(dev.prefetched.values()))
        yield barrier.arrive()
        return (yield from algorithm.program(dev, ctx, x, w))

    run_spmd(sim, runtime, program, lambda dev: ())
    assert barrier.opened is not None
    return float(sim.now) - barrier.opened


class _Barrier:
    """Opens when ``count`` chips have arrived: the GeMM then starts everywhere at once."""

    def __init__(self, env: simpy.Environment, count: int) -> None:
        self.env = env
        self.count = count
        self.event = env.event()
        self.opened: float | None = None

    def arrive(self) -> simpy.Event:
        self.count -= 1
        if self.count == 0:
            self.opened = float(self.env.now)
            self.event.succeed()
        return self.event
