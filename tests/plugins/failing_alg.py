"""An example plug-in (``TPUSIM_PLUGINS=failing_alg``) whose chip program refuses to run, saying in which process:
priced by its closed form (the collective GeMM's), it fails as soon as it is simulated. The tests use it to prove
that an error raised in a ``tune --jobs N`` worker reaches the user from that worker (it is not swallowed and met
again in the main process)."""

from __future__ import annotations

import multiprocessing

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmContext, Program
from tpusim.gemm.algorithms.collective import CollectiveGemm
from tpusim.gemm.registry import register_algorithm


class RefusesToRun(CollectiveGemm):
    name = "failing-alg"
    summary = "example plug-in whose simulation always fails"

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        where = "the main process" if multiprocessing.parent_process() is None else "a worker process"
        raise InfeasibleError(f"failing-alg refuses to run (in {where})")
        yield from super().program(dev, ctx, x, w)  # never reached: it only makes this a generator


register_algorithm(RefusesToRun())
