"""An example plug-in (``TPUSIM_PLUGINS=wrong_alg``) that is timed like the collective GeMM but computes a wrong
product: every output block comes back scaled by 1.5. tests/gemm/test_contract.py must fail for it."""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmContext, Program
from tpusim.gemm.algorithms.collective import CollectiveGemm
from tpusim.gemm.registry import register_algorithm

WRONG_FACTOR = 1.5


class WrongProduct(CollectiveGemm):
    name = "wrong-alg"
    summary = "example plug-in with a wrong product (the contract test must catch it)"

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        y = yield from super().program(dev, ctx, x, w)
        return y.like(y.shape, None if y.data is None else y.data * WRONG_FACTOR)


register_algorithm(WrongProduct())
