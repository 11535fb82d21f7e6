"""Collective 2D GeMM, the GSPMD/XLA baseline (docs/algorithms.md#collective-2d-gemm): gather, multiply, reduce-scatter.

The gathers and the reduce-scatter come from the dataflow's role table. The activation gather (OS's X)
depends on the previous op and is always exposed; the prefetchable gather (the weight, or RS's saved
activation) follows the prefetch policy: ``ideal`` lets it overlap the GeMM that consumes it (the
authors' accounting), otherwise it runs alongside the other gather and must finish before the GeMM. The
output reduce-scatter is always exposed.
"""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program
from tpusim.gemm.costs import CostModel
from tpusim.gemm.local import local_product, product_dims
from tpusim.vocabulary import CollectiveOp, Prefetch


class CollectiveGemm(GemmAlgorithm):
    name = "collective"
    summary = "GSPMD-style collective 2D GeMM: all-gather, local GeMM, reduce-scatter"

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles = ctx.roles
        held = {"x": x, "w": w}
        ideal = ctx.params.prefetch is Prefetch.IDEAL
        early = [mv for mv in roles.gathers if mv.operand != roles.prefetchable]
        late = [mv for mv in roles.gathers if mv.operand == roles.prefetchable]
        first = early if ideal else roles.gathers
        handles = [dev.gather_prefetchable(mv.operand, held[mv.operand], ctx.axis(mv.axis), mv.dim)
                   if mv.operand == roles.prefetchable else dev.all_gather(held[mv.operand], ctx.axis(mv.axis), mv.dim)
                   for mv in first]
        values = yield dev.wait(*handles)
        operands: dict[str, object] = dict(held)
        operands.update({mv.operand: v for mv, v in zip(first, values, strict=True)})
        if ideal:
            for mv in late:  # pending: the GeMM starts now and the gather overlaps it
                operands[mv.operand] = dev.all_gather(held[mv.operand], ctx.axis(mv.axis), mv.dim)
        y: Tensor = yield local_product(dev, ctx.problem.dataflow, operands["x"], operands["w"])  # type: ignore[arg-type]
        if roles.reduce is not None:
            y = yield dev.reduce_scatter(y, ctx.axis(roles.reduce.axis), roles.reduce.dim)
        return y

    def prefetchable_gathers(self, ctx: GemmContext) -> list[tuple[str, int, int]]:
        roles = ctx.roles
        return [(mv.operand, ctx.axis(mv.axis), mv.dim) for mv in roles.gathers if mv.operand == roles.prefetchable]

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        problem, roles = ctx.problem, ctx.roles
        blocks = self.blocks(ctx)
        gathered = dict(blocks)
        times = {}
        for mv in roles.gathers:
            shape = list(blocks[mv.operand])
            shape[mv.dim] *= ctx.size(mv.axis)
            gathered[mv.operand] = (shape[0], shape[1])
            times[mv.operand] = costs.all_gather(ctx.axis(mv.axis), blocks[mv.operand][0] * blocks[mv.operand][1])
        m, n, k = product_dims(problem.dataflow, gathered["x"], gathered["w"])
        g = costs.gemm(m, n, k)
        early = sum(t for op, t in times.items() if op != roles.prefetchable)
        late = times.get(roles.prefetchable, 0.0)
        r = costs.reduce_scatter(ctx.axis(roles.reduce.axis), m * n) if roles.reduce is not None else 0.0
        if ctx.params.prefetch is Prefetch.IDEAL:
            return early + max(g, late) + r
        return costs.together(CollectiveOp.ALL_GATHER, list(times.values())) + g + r
