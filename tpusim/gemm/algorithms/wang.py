"""Wang et al. collective matmul in 2D (docs/algorithms.md#wang-collective-matmul): the role-axis-1 collective
becomes ring shifts.

OS: X's halves circulate along role axis 1 under the partial GeMMs; the weight is one blocking
all-gather over role axis 0. LS: the weight gather stays blocking and the output reduce-scatter over
role axis 1 becomes two circulating half-width accumulators. RS: X's halves circulate while the
M x N/C partial output is assembled; its reduce-scatter over role axis 0 runs at the end, exposed.
Whether the blocking weight gather is exposed or overlapped follows the prefetch policy as in
``collective``: ``ideal`` lets every partial GeMM start on the pending gathered panel; otherwise the
ring starts when the gather has landed. The schedule and its twin live in ``ring``.
"""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams

from .placement import RoleAxes
from .ring import check_ring, ring_panel_elements, ring_prefetchable, ring_program, ring_terms


def _axes(problem: GemmProblem) -> RoleAxes:
    return (problem.layout.axis(0), problem.layout.axis(1))


class WangGemm(GemmAlgorithm):
    name = "wang"
    summary = "Wang et al. collective matmul in 2D: role-axis-1 collective as bidirectional half-block shifts"

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        check_ring(problem, _axes(problem), mesh, self.name)

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        return ring_program(dev, ctx.problem, ctx.params.prefetch, _axes(ctx.problem), x, w)

    def prefetchable_gathers(self, ctx: GemmContext) -> list[tuple[str, int, int]]:
        return ring_prefetchable(ctx.problem, _axes(ctx.problem))

    def panel_elements(self, ctx: GemmContext) -> int:
        return ring_panel_elements(ctx.problem, _axes(ctx.problem), ctx.mesh)

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        return ring_terms(ctx.problem, _axes(ctx.problem), ctx.mesh, costs).time(ctx.params.prefetch)
