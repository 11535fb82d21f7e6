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
from tpusim.engine.footprint import Estimate
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.estimate import gemm_estimate
from tpusim.gemm.params import GemmParams
from tpusim.gemm.simulate import analytic_gemm, simulate_gemm
from tpusim.model.layer import Pass
from tpusim.model.plan import block_layers
from tpusim.model.step import StepSpec
from tpusim.tuning.space import feasible_slices
from tpusim.vocabulary import Fidelity

GemmTimer = Callable[[GemmProblem, GemmParams], float]
"""The time of one GeMM run with given parameters (a slice count among them)."""


def fastest_slice_count(algorithm: GemmAlgorithm, problems: Sequence[GemmProblem], mesh: tuple[int, int],
                        base: GemmParams, time: GemmTimer) -> tuple[int, list[int]] | None:
    """The feasible slice count whose ``problems`` take least ``time`` together (ties: the smaller), with every
    feasible count it was chosen from; None where no count is feasible for all of them."""
    timed: list[tuple[bool, float, int]] = []
    for params in feasible_slices(algorithm, problems, mesh, base):
        assert params.slices is not None
        total = sum(time(problem, params) for problem in problems)
        # a time that overflowed (inf, nan) never wins: among such counts the smallest, whose result says so
        timed.append((not math.isfinite(total), total if math.isfinite(total) else 0.0, params.slices))
    if not timed:
        return None
    return min(timed)[2], [count for _, _, count in timed]


def best_slices(spec: StepSpec, network: Network,
                progress: Callable[[int, int], None] | None = None) -> tuple[int, ...]:
    """The per-layer slice counts that minimise each FF layer's simulated GeMM time on ``network``'s mesh, without
    its link overrides; ``progress`` hears (layers done, layers in all) as each layer's count is chosen."""
    algorithm = spec.algorithm
    # one replica's GeMMs on one slice: its share of the batch, as the step simulates them
    replica = replace(spec, batch=spec.batch // (network.mapping.data * spec.dcn_slices))
    network = network.over(network.mapping.tensor_mapping)  # in a pod layout one replica's GeMMs
    mesh = network.mapping.shape
    fidelity = spec.fidelity if spec.fidelity is not Fidelity.ANALYTIC else Fidelity.AUTO

    def time(problem: GemmProblem, params: GemmParams) -> float:
        return simulate_gemm(problem, algorithm, params, network, fidelity=fidelity).time_s

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


def slice_search_estimate(spec: StepSpec, network: Network, data: int) -> Estimate:
    """What ``best_slices`` will cost on a layout of ``data`` replicas: every feasible count of every FF layer,
    three GeMMs each, at the spec's fidelity, on ``network`` (one replica's; ``gemm.estimate``)."""
    fidelity = spec.fidelity if spec.fidelity is not Fidelity.ANALYTIC else Fidelity.AUTO
    algorithm = spec.algorithm
    cost = Estimate(0)
    for problems, options in _options(spec, network, data):
        for params in options:
            for problem in problems:
                cost = cost + gemm_estimate(algorithm, problem, params, network, fidelity)
    return cost


def likely_slices(spec: StepSpec, network: Network, data: int) -> tuple[int, ...]:
    """The counts ``best_slices`` will most likely choose, for estimating the step that follows: each FF layer's
    fastest by the closed forms (its smallest feasible count where a form is missing; 1 where none is)."""
    algorithm = spec.algorithm
    chosen = []
    for problems, options in _options(spec, network, data):
        priced: list[tuple[float, int]] = []
        for params in options:
            twins = [analytic_gemm(algorithm, p, params, network) for p in problems]
            assert params.slices is not None
            priced.append((math.inf if None in twins else sum(t for t in twins if t is not None), params.slices))
        chosen.append(min(priced)[1] if priced else 1)
    return tuple(chosen)


def _options(spec: StepSpec, network: Network, data: int) -> list[tuple[list[GemmProblem], list[GemmParams]]]:
    """Per FF layer of one of ``data`` replicas on ``network``: its three GeMMs and the feasible slice counts'
    parameters ``best_slices`` times them with."""
    algorithm = spec.algorithm
    replica = replace(spec, batch=spec.batch // (data * spec.dcn_slices))
    mesh = network.mapping.shape
    base = GemmParams(spec.prefetch, variant=spec.variant)
    layers = []
    for layer in block_layers(replica, mesh):
        problems = [layer.gemm(which, spec.dtype) for which in Pass]
        layers.append((problems, feasible_slices(algorithm, problems, mesh, base)))
    return layers
