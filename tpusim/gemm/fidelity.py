"""Choosing the fidelity of a GeMM or step run: where ``symmetric`` is exact, and ``auto``'s choice."""

from __future__ import annotations

from tpusim.collectives.network import Network
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.params import GemmParams
from tpusim.vocabulary import Fidelity


def symmetric_obstacle(algorithm: GemmAlgorithm, params: GemmParams, network: Network, *,
                       overrides: bool = False, payload: bool = False) -> str | None:
    """Why ``symmetric`` would not be exact here, or None."""
    if payload:
        return "numpy payloads need every chip's data (full fidelity)"
    reason = network.asymmetry(overrides=overrides)
    if reason is not None:
        return reason
    if not _local(network) and not algorithm.symmetric_safe(params, network.rank_independent):
        return f"algorithm {algorithm.name!r} schedules chips differently by position"
    return None


def resolve_fidelity(requested: Fidelity, obstacle: str | None) -> tuple[Fidelity, str | None]:
    """The fidelity to run and a note saying why, given what stands in symmetric's way."""
    if requested is Fidelity.AUTO:
        if obstacle is None:
            return Fidelity.SYMMETRIC, None
        return Fidelity.FULL, f"fidelity auto chose full: {obstacle}"
    if requested is Fidelity.SYMMETRIC and obstacle is not None:
        raise InfeasibleError(f"--fidelity symmetric is not exact here: {obstacle}",
                              "use --fidelity auto or full")
    return requested, None


def representative_chips(algorithm: GemmAlgorithm, params: GemmParams, network: Network) -> list[tuple[int, int]]:
    """The chips a symmetric run simulates."""
    if _local(network):
        return [(0, 0)]
    return algorithm.representatives(network.mapping.shape, params, network.rank_independent)


def _local(network: Network) -> bool:
    """Whether the tensor mesh is 1 x 1: every GeMM is one chip's local product, with no collective whose root or
    skew could depend on the chip's place, so every algorithm runs the same schedule on every chip."""
    return network.mapping.shape == (1, 1)
