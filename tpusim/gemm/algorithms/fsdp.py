"""FSDP baseline (docs/algorithms.md#fsdp) over the P chips of a P x 1 mesh.

Activations are split on the batch over all P chips and every stored matrix is split on its dimension 0
there: role axis 0 spans the P chips and role axis 1 is unsplit, so the role table's role-axis-0 moves
are the whole story (the role-axis-1 moves have nothing to move):
- ``os`` (forward): X [M, K] split on M (batch), W [K, N] split on K; all-gather W, then the local
  (M/P) x N x K GeMM.
- ``ls`` (backward data, dX = dY W^T in LS form): X [M, K] split on M, W [N, K] split on N; gather W
  again, then the local GeMM.
- ``rs`` (backward weight, dW = X^T dY): X [K, M] and W [K, N] both split on K, which is the batch here
  (the contraction), so no operand is gathered: each chip computes the full M x N partial dW and
  reduce-scatters it along M, leaving dW split like the weight.
The weight gather follows the prefetch policy as in ``collective`` (``ideal``: it overlaps the GeMM that
consumes it). A dimension split over both axes of an R x C mesh is not expressible as a ``Placement``, so
the 2D (dimension-ordered) form is not offered. ``transpose`` does not apply and is ignored.

Twin: T = A + g + D, or max(A, g) + D under ``ideal``, with A the weight gather (os, ls), g the local GeMM
and D the reduce-scatter of dW (rs).
"""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program, gathered
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import Sharding
from tpusim.vocabulary import Prefetch

from .placement import line_axis, role_sharding


class FsdpGemm(GemmAlgorithm):
    name = "fsdp"
    summary = "FSDP: batch-split activations, weight all-gathered over all P chips of a P x 1 mesh"
    parallelism = "1d-batch"  # tokens (whole sequences) split over all P chips; features whole on every chip

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        line_axis(self.name, mesh)

    def sharding(self, problem: GemmProblem, mesh: tuple[int, int]) -> Sharding:
        return role_sharding((line_axis(self.name, mesh), None))

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        axis = line_axis(self.name, ctx.mesh)
        roles = ctx.roles
        operands: dict[str, object] = {"x": x, "w": w}
        for mv in roles.gathers:
            if mv.axis != 0:
                continue
            handle = dev.gather_prefetchable(mv.operand, x if mv.operand == "x" else w, axis, mv.dim)
            if ctx.params.prefetch is Prefetch.IDEAL and mv.operand == roles.prefetchable:
                operands[mv.operand] = handle  # pending: the GeMM starts now and the gather overlaps it
            else:
                (operands[mv.operand],) = yield dev.wait(handle)
        y: Tensor = yield local_product(dev, ctx.problem.dataflow, operands["x"], operands["w"])  # type: ignore[arg-type]
        if roles.reduce is not None and roles.reduce.axis == 0:
            y = yield dev.reduce_scatter(y, axis, roles.reduce.dim)
        return y

    def panel_elements(self, ctx: GemmContext) -> int:
        """The weight gathered whole over the P chips (os, ls); rs gathers nothing."""
        axis = line_axis(self.name, ctx.mesh)
        shapes = self.blocks(ctx)
        return sum(gathered(shapes[mv.operand][0] * shapes[mv.operand][1], ctx.mesh[axis]) for mv in ctx.roles.gathers
                   if mv.axis == 0)

    def prefetchable_gathers(self, ctx: GemmContext) -> list[tuple[str, int, int]]:
        axis = line_axis(self.name, ctx.mesh)
        return [(mv.operand, axis, mv.dim) for mv in ctx.roles.gathers if mv.axis == 0]

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        problem, roles = ctx.problem, ctx.roles
        axis = line_axis(self.name, ctx.mesh)
        shapes = self.blocks(ctx)
        gather = 0.0
        for mv in roles.gathers:
            if mv.axis == 0:
                block = shapes[mv.operand]
                gather = costs.all_gather(axis, block[0] * block[1])
                full = list(block)
                full[mv.dim] *= ctx.mesh[axis]
                shapes[mv.operand] = (full[0], full[1])
        m, n, k = product_dims(problem.dataflow, shapes["x"], shapes["w"])
        g = costs.gemm(m, n, k)
        reduce = 0.0
        if roles.reduce is not None and roles.reduce.axis == 0:
            reduce = costs.reduce_scatter(axis, m * n)
        if ctx.params.prefetch is Prefetch.IDEAL:
            return max(gather, g) + reduce
        return gather + g + reduce
