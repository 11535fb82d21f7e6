"""Choosing each FF layer's slice count for a fixed mesh and fixed dataflows (``step`` without ``--slices``).

A layer's three GeMMs slice the same dimension, so one K serves all three passes; layers are independent
given their layouts, so each layer takes the feasible K whose simulated forward, backward-data and
backward-weight GeMMs are fastest together (ties: the smaller K).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tpusim.collectives.network import Network
from tpusim.errors import InfeasibleError
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import check_gemm, simulate_gemm
from tpusim.model.layer import Pass
from tpusim.model.plan import block_layers
from tpusim.model.step import StepSpec
from tpusim.tuning.space import slice_counts
from tpusim.vocabulary import Fidelity


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
    chosen = []
    layers = block_layers(replica, mesh)
    for layer in layers:
        problems = [layer.gemm(which, spec.dtype) for which in Pass]
        base = GemmParams(spec.prefetch, variant=spec.variant)
        timed: list[tuple[float, int]] = []
        for k in slice_counts(algorithm, problems, mesh, base):
            params = replace(base, slices=k)
            try:
                for problem in problems:
                    check_gemm(algorithm, problem, mesh, params)
            except InfeasibleError:
                continue
            total = sum(simulate_gemm(p, algorithm.name, params, network, fidelity=fidelity).time_s for p in problems)
            timed.append((total, k))
        if not timed:
            raise InfeasibleError(f"no slice count is feasible for layer {layer.name} on mesh {mesh[0]}x{mesh[1]}; "
                                  "give --slices and --allow-infeasible to time the nearest one")
        chosen.append(min(timed)[1])
        if progress is not None:
            progress(len(chosen), len(layers))
    return tuple(chosen)
