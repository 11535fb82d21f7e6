"""Choosing slice counts: each FF layer's for a fixed mesh and fixed dataflows (``step`` without ``--slices``), and
one GeMM's (``gemm`` without ``--slices``).

A layer's three GeMMs slice the same dimension, so one slice count serves all three passes; layers are independent
given their layouts, so each layer takes the feasible count whose simulated forward, backward-data and
backward-weight GeMMs are fastest together (ties: the smaller count). A GeMM on its own is a layer of one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from tpusim.collectives.network import Network
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.model.layer import Pass
from tpusim.model.plan import block_layers
from tpusim.model.step import StepSpec
from tpusim.tuning.space import runs, slice_counts
from tpusim.vocabulary import Fidelity

GemmTimer = Callable[[GemmProblem, GemmParams], float]
"""The time of one GeMM run with given parameters (a slice count among them)."""


def fastest_slice_count(algorithm: GemmAlgorithm, problems: Sequence[GemmProblem], mesh: tuple[int, int],
                        base: GemmParams, time: GemmTimer) -> tuple[int, list[int]] | None:
    """The feasible slice count whose ``problems`` take least ``time`` together (ties: the smaller), with every
    feasible count it was chosen from; None where no count is feasible for all of them."""
    timed: list[tuple[bool, float, int]] = []
    for count in slice_counts(algorithm, list(problems), mesh, base):
        params = replace(base, slices=count)
        if runs(algorithm, problems, mesh, params):
            total = sum(time(problem, params) for problem in problems)
            # a time that overflowed (inf, nan) never wins: among such counts the smallest, whose result says so
            timed.append((not math.isfinite(total), total if math.isfinite(total) else 0.0, count))
    if not timed:
        return None
    return min(timed)[2], [count for _, _, count in timed]


def best_slices(spec: StepSpec, network: Network,
                progress: Callable[[int, int], None] | None = None) -> tuple[int, ...]:
    """The per-layer slice counts that minimise each FF layer's simulated GeMM time on ``network``'s mesh, without
    its link overrides; ``progress`` hears (layers done, layers in all) as each layer's count is chosen."""
    algorithm = get_algorithm(spec.algorithm)
    # one replica's GeMMs on one slice: its share of the batch, as the step simulates them
    replica = replace(spec, batch=spec.batch // (network.mapping.data * spec.dcn_slices))
    network = network.over(network.mapping.tensor_mapping)  # in a pod layout one replica's GeMMs
    mesh = network.mapping.shape
    fidelity = spec.fidelity if spec.fidelity is not Fidelity.ANALYTIC else Fidelity.AUTO

    def time(problem: GemmProblem, params: GemmParams) -> float:
        return simulate_gemm(problem, algorithm.name, params, network, fidelity=fidelity).time_s

    chosen = []
    layers = block_layers(replica, mesh)
    for layer in layers:
        problems = [layer.gemm(which, spec.dtype) for which in Pass]
        fastest = fastest_slice_count(algorithm, problems, mesh, GemmParams(spec.prefetch, variant=spec.variant),
                                      time)
        if fastest is None:
            raise InfeasibleError(f"no slice count is feasible for layer {layer.name} on mesh {mesh[0]}x{mesh[1]}; "
                                  "give --slices and --allow-infeasible to time the nearest one")
        chosen.append(fastest[0])
        if progress is not None:
            progress(len(chosen), len(layers))
    return tuple(chosen)
