"""1D tensor parallelism, Megatron with Wang overlap (docs/algorithms.md#1d-tensor-parallelism), over the P chips of
a P x 1 mesh.

Activations are split on features and weights on their output features over all P chips, as one ring;
the other role axis is unsplit, so this is the ``ring`` schedule with role axis 1 on the P chips and no
role-axis-0 collective:
- ``os`` (column-parallel, QKV / FF1): X [M, K] split on K, W [K, N] split on N; X's halves circulate
  (the all-gather of X as P - 1 bidirectional shift steps) under the partial GeMMs; Y is M x N/P.
- ``ls`` (row-parallel, out-proj / FF2): Y = X W^T, X [M, K] and W [N, K] split on K; the partial
  M x N output's reduce-scatter becomes circulating accumulators; Y is M x N/P.
- ``rs`` (the weight gradient dW = X^T dY): X [K, M] is the saved activation (K tokens, M input features,
  split on M as in the forward pass), W [K, N] the output gradient split on N like the weight; X's halves
  circulate while each chip assembles its M x N/P slice of dW, which is sharded like the weight.
The mesh axis is whichever holds the P chips, so ``transpose`` (a swap of two axes) does not apply and is
ignored.
"""

from __future__ import annotations

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import Sharding

from .placement import RoleAxes, line_axis, role_sharding
from .ring import check_ring, ring_panel_elements, ring_program, ring_terms


def _axes(mesh: tuple[int, int]) -> RoleAxes:
    return (None, line_axis(Tp1dGemm.name, mesh))


class Tp1dGemm(GemmAlgorithm):
    name = "tp1d"
    summary = "Megatron 1D tensor parallelism over a P x 1 ring with bidirectional Wang-style overlap"
    parallelism = "1d-feature"  # features (and heads) split over all P chips; tokens whole on every chip

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        check_ring(problem, _axes(mesh), mesh, self.name)

    def sharding(self, problem: GemmProblem, mesh: tuple[int, int]) -> Sharding:
        return role_sharding(_axes(mesh))

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        return ring_program(dev, ctx.problem, ctx.params.prefetch, _axes(ctx.mesh), x, w)

    def panel_elements(self, ctx: GemmContext) -> int:
        return ring_panel_elements(ctx.problem, _axes(ctx.mesh), ctx.mesh)

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        return ring_terms(ctx.problem, _axes(ctx.mesh), ctx.mesh, costs).time(ctx.params.prefetch)
