"""SUMMA (docs/algorithms.md#summa): S = lcm(R, C) steps of panel broadcasts, each pipelined against a panel GeMM.

The dataflow's sliced global dimension (role table: OS k, LS n, RS m) is cut into S contiguous panels.
On a role axis of n chips each chip's block holds S/n consecutive panels, so panel s belongs to rank
s // (S/n) on that axis, at local sub-panel s % (S/n). Step s broadcasts panel s of every gathered
operand along its role axis from that owner, multiplies, and either accumulates into the stationary
output (OS) or reduces the partial output panel along the reduce axis to the rank that owns output
panel s, which keeps it in its sub-panel slot (LS, RS).

Pipeline rules (those under which the DES equals the closed form): step s+1's broadcasts are issued when
GeMM s starts, the MXU runs one GeMM at a time, each axis runs its collectives FIFO, and step s's reduce
is issued when GeMM s finishes. Roots rotate with s; on the calibrated network a broadcast or reduce
costs the same from any root. As in MeshSlice the pipeline is the prefetch, so ``prefetch`` does not
apply: the step-0 broadcasts are always exposed.
"""

from __future__ import annotations

import math

import simpy

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor, concat
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import operand_blocks


def step_count(ctx: GemmContext) -> int:
    """S = lcm of the sizes of role axes 0 and 1."""
    return math.lcm(ctx.size(0), ctx.size(1))


def accumulates(ctx: GemmContext) -> bool:
    """Whether the panel GeMMs add into the stationary output (OS over more than one step)."""
    return ctx.roles.reduce is None and step_count(ctx) > 1


def owner(step: int, steps: int, size: int) -> tuple[int, int]:
    """(rank, local sub-panel) of panel ``step`` of ``steps`` on a role axis of ``size`` chips."""
    per_chip = steps // size
    return step // per_chip, step % per_chip


class Summa(GemmAlgorithm):
    name = "summa"
    summary = "SUMMA: lcm(R, C) panel broadcasts (and, LS/RS, panel reduces) pipelined against panel GeMMs"

    def symmetric_safe(self, params: GemmParams, rank_independent: bool) -> bool:
        # rotating roots: where the root matters, each rank receives a broadcast at its own time
        del params
        return rank_independent

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        layout, sliced = problem.layout, problem.roles.sliced
        rows, cols = mesh[layout.axis(0)], mesh[layout.axis(1)]
        steps = math.lcm(rows, cols)
        size = problem.dim(sliced)
        if size % steps:
            raise InfeasibleError(
                f"summa: the panel dimension {sliced} = {size} is not divisible by lcm({rows}, {cols}) = {steps} "
                f"(one panel per step); use a multiple of {steps}"
            )

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles, dataflow = ctx.roles, ctx.problem.dataflow
        steps = step_count(ctx)
        held = {"x": x, "w": w}

        def broadcasts(s: int) -> list[simpy.Event]:
            handles = []
            for mv in roles.gathers:
                size = ctx.size(mv.axis)
                root, local = owner(s, steps, size)
                panel = held[mv.operand].split(mv.dim, steps // size)[local]
                handles.append(dev.broadcast(panel, ctx.axis(mv.axis), root))
            return handles

        acc: Tensor | None = None
        reductions = []
        pending = broadcasts(0)
        for s in range(steps):
            values = yield dev.wait(*pending)
            operands = dict(held)
            operands.update({mv.operand: v for mv, v in zip(roles.gathers, values, strict=True)})
            gemm = local_product(dev, dataflow, operands["x"], operands["w"],
                                 acc if roles.reduce is None else None, accumulate=accumulates(ctx),
                                 name=f"gemm[{s}]")
            # Issued as GeMM s starts: step s+1's panels travel while the MXU works on panel s.
            if s + 1 < steps:
                pending = broadcasts(s + 1)
            product = yield gemm
            if roles.reduce is None:
                acc = product
            else:
                root, _ = owner(s, steps, ctx.size(roles.reduce.axis))
                reductions.append(dev.reduce(product, ctx.axis(roles.reduce.axis), root))
        if roles.reduce is None:
            assert acc is not None
            return acc
        panels = yield dev.wait(*reductions)
        mine = [p for p in panels if p is not None]  # this chip's output panels, in step (= local slot) order
        return concat(mine, roles.reduce.dim)

    def terms(self, ctx: GemmContext, costs: CostModel) -> tuple[list[float], float, float]:
        """Per-step times: one broadcast per gathered operand, the reduce (0 for OS), the panel GeMM."""
        problem, roles = ctx.problem, ctx.roles
        steps = step_count(ctx)
        blocks = operand_blocks(problem.x_shape, problem.w_shape, self.sharding(problem, ctx.mesh), ctx.mesh)
        panels = dict(blocks)
        broadcasts = []
        for mv in roles.gathers:
            panel = list(blocks[mv.operand])
            panel[mv.dim] = panel[mv.dim] * ctx.size(mv.axis) // steps
            panels[mv.operand] = (panel[0], panel[1])
            broadcasts.append(costs.broadcast(ctx.axis(mv.axis), panel[0] * panel[1]))
        m, n, k = product_dims(problem.dataflow, panels["x"], panels["w"])
        r = costs.reduce(ctx.axis(roles.reduce.axis), m * n) if roles.reduce is not None else 0.0
        return broadcasts, r, costs.gemm(m, n, k, accumulate=accumulates(ctx))

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        """OS: max(B) + (S-1) max(B, g) + g; LS, RS: (B + R_o) + (S-1) max(R_o, B, g) + g (docs/algorithms.md#summa)."""
        broadcasts, r, g = self.terms(ctx, costs)
        steps = step_count(ctx)
        return max(broadcasts) + r + (steps - 1) * max(*broadcasts, r, g) + g
