"""An example plug-in (``TPUSIM_PLUGINS=my_alg``): a correct algorithm registered from outside the package.

``my-alg`` is the collective 2D GeMM with its all-gathers one after the other; its closed form adds them up.
"""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program
from tpusim.gemm.costs import CostModel
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.registry import register_algorithm
from tpusim.gemm.sharding import operand_blocks


class MyAlgorithm(GemmAlgorithm):
    name = "my-alg"
    summary = "example plug-in: collective 2D GeMM, one all-gather after the other"

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        operands = {"x": x, "w": w}
        for move in ctx.roles.gathers:
            operands[move.operand] = yield dev.all_gather(operands[move.operand], ctx.axis(move.axis), move.dim)
        y: Tensor = yield local_product(dev, ctx.problem.dataflow, operands["x"], operands["w"])
        if ctx.roles.reduce is not None:
            y = yield dev.reduce_scatter(y, ctx.axis(ctx.roles.reduce.axis), ctx.roles.reduce.dim)
        return y

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        blocks = operand_blocks(ctx.problem.x_shape, ctx.problem.w_shape, self.sharding(ctx.problem, ctx.mesh),
                                ctx.mesh)
        held = dict(blocks)
        total = 0.0
        for move in ctx.roles.gathers:
            rows, cols = blocks[move.operand]
            total += costs.all_gather(ctx.axis(move.axis), rows * cols)
            shape = [rows, cols]
            shape[move.dim] *= ctx.size(move.axis)
            held[move.operand] = (shape[0], shape[1])
        m, n, k = product_dims(ctx.problem.dataflow, held["x"], held["w"])
        total += costs.gemm(m, n, k)
        if ctx.roles.reduce is not None:
            total += costs.reduce_scatter(ctx.axis(ctx.roles.reduce.axis), m * n)
        return total


register_algorithm(MyAlgorithm())
