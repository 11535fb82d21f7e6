"""The exact-product check the GeMM algorithm tests share."""

from __future__ import annotations

from collections.abc import Iterable

from tpusim.collectives.factory import network_for
from tpusim.config import HardwareProfile
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.topology import MeshMapping
from tpusim.vocabulary import Dataflow


def assert_exact_products(algorithm: str, hw: HardwareProfile, mapping: MeshMapping, dims: tuple[int, int, int],
                          params: Iterable[GemmParams]) -> None:
    """Every dataflow, plain and transposed, under each of ``params``, reproduces the dense product."""
    for setting in params:
        for dataflow in Dataflow:
            for transpose in (False, True):
                problem = GemmProblem(*dims, dataflow, transpose)
                result = simulate_gemm(problem, get_algorithm(algorithm), setting, network_for(hw, mapping),
                                       verify=True)
                assert result.max_abs_error is not None and result.max_abs_error < 1e-9, (dataflow, transpose)
