"""MeshSlice (docs/algorithms.md#meshslice): sliced partial collectives, software-pipelined against sliced GeMMs.

The dataflow's sliced global dimension (role table: OS k, LS n, RS m) is cut into K strided slices:
slice k of a local dimension holds runs of ``block`` elements strided by ``block * K``. Because every
chip's block starts at a multiple of ``block * K`` (feasibility: D divisible by lcm(R, C) * block * K),
slice k gathered over any number of chips holds exactly the global indices {block*K*g + block*k + e} in
ascending order, so an X slice gathered over C chips and a W slice gathered over R chips cover the same
contraction indices even when R != C; and a reduce-scatter of a slice's partial output hands each chip
precisely the strided slot k of its own output block.

Per slice: all-gather the slice of each gathered operand, multiply, and (LS, RS) reduce-scatter the
partial output into its slot; OS accumulates into the stationary output. Pipeline rules (the ones under
which the DES equals the `main`-branch closed form): the gathers of slice k+1 are issued when GeMM k
starts, the MXU runs one GeMM at a time, each axis runs its collectives FIFO, and a slice's
reduce-scatter is issued as soon as its GeMM finishes. The pipeline is itself the prefetch, so the
``prefetch`` policy does not apply here: the slice-0 gathers are always exposed.
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np
import simpy

from tpusim.collectives.device import Device
from tpusim.engine.tensor import Tensor, assign_strided
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program, pipelined_panels, whole_panels
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.params import GemmParams
from tpusim.vocabulary import CollectiveOp


def slice_count(params: GemmParams) -> int:
    """The slice count S; an unset ``slices`` means one slice (no pipelining: the collective schedule, sliced once)."""
    return 1 if params.slices is None else params.slices


def accumulates(ctx: GemmContext) -> bool:
    """Whether the slice GeMMs add into the stationary output (OS with more than one slice)."""
    return ctx.roles.reduce is None and slice_count(ctx.params) > 1


def divisors(n: int) -> list[int]:
    """The divisors of n >= 1, ascending."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
    return small + large[::-1]


class MeshSlice(GemmAlgorithm):
    name = "meshslice"
    summary = "MeshSlice: S strided partial collectives per axis, software-pipelined against sliced GeMMs"
    takes = MappingProxyType({"slices": "its slice count S", "block": "the run length of its strided slices",
                              "compat_mean_overlap": "its twin's (a+b)/2 rule for concurrent collectives"})

    def slice_options(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> list[int]:
        """Every slice count S with the sliced global dimension D divisible by lcm(R, C) x block x S
        (docs/algorithms.md#meshslice); one slice only needs D divisible by lcm(R, C), since a single slice is
        the whole block and has no strided runs."""
        layout, sliced = problem.layout, problem.roles.sliced
        whole = math.lcm(mesh[layout.axis(0)], mesh[layout.axis(1)])
        unit = whole * max(params.block, 1)
        size = problem.dim(sliced)
        if size % whole:
            return []
        return divisors(size // unit) if size % unit == 0 else [1]

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        slices = slice_count(params)
        if slices < 1:
            raise InfeasibleError(f"--slices {slices}: the slice count must be at least 1")
        if params.block < 1:
            raise InfeasibleError(f"block {params.block}: the strided-slice run length must be at least 1")
        options = self.slice_options(problem, mesh, params)
        if slices in options:
            return
        layout, sliced = problem.layout, problem.roles.sliced
        rows, cols = mesh[layout.axis(0)], mesh[layout.axis(1)]
        if params.slices is None:  # no count was asked for: not even one slice divides the dimension
            raise InfeasibleError(
                f"meshslice: the sliced dimension {sliced} = {problem.dim(sliced)} is not divisible by "
                f"lcm({rows}, {cols}) = {math.lcm(rows, cols)}, so no slice count is feasible; use a multiple of "
                f"{math.lcm(rows, cols)}")
        raise InfeasibleError(
            f"--slices {slices}: the sliced dimension {sliced} = {problem.dim(sliced)} is not divisible by "
            f"lcm({rows}, {cols}) x {params.block} x {slices}; feasible slice counts: "
            f"{', '.join(map(str, options)) or 'none'}"
        )

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles, dataflow = ctx.roles, ctx.problem.dataflow
        slices, block = slice_count(ctx.params), ctx.params.block
        held = {"x": x, "w": w}

        def gather(k: int) -> list[simpy.Event]:
            # slice 0 of the data-independent operand may have started early (``prefetch_part``)
            return [dev.gather_prefetchable(mv.operand, piece, ctx.axis(mv.axis), mv.dim)
                    if k == 0 and mv.operand == roles.prefetchable else dev.all_gather(piece, ctx.axis(mv.axis), mv.dim)
                    for mv in roles.gathers
                    for piece in (held[mv.operand].strided_slice(mv.dim, k, slices, block),)]

        acc: Tensor | None = None
        reductions = []
        pending = gather(0)
        for k in range(slices):
            values = yield dev.wait(*pending)
            # Issued here, the moment GeMM k can start (its operands are in, the MXU finished GeMM k-1).
            if k + 1 < slices:
                pending = gather(k + 1)
            operands = dict(held)
            operands.update({mv.operand: v for mv, v in zip(roles.gathers, values, strict=True)})
            product = yield local_product(dev, dataflow, operands["x"], operands["w"],
                                          acc if roles.reduce is None else None, accumulate=accumulates(ctx),
                                          name=f"S{k + 1}/{slices} gemm")
            if roles.reduce is None:
                acc = product
            else:
                reductions.append(dev.reduce_scatter(product, ctx.axis(roles.reduce.axis), roles.reduce.dim))
        if roles.reduce is None:
            assert acc is not None
            return acc
        parts: list[Tensor] = yield dev.wait(*reductions)
        shape = list(parts[0].shape)
        shape[roles.reduce.dim] *= slices
        out = parts[0].like(shape, np.zeros(shape) if parts[0].has_data else None)
        for k, part in enumerate(parts):
            out = assign_strided(out, part, roles.reduce.dim, k, slices, block)
        return out

    def panel_elements(self, ctx: GemmContext) -> int:
        """Two slices of every gathered operand's panel: slice k+1's gathers are issued as GeMM k starts, so the
        slice being multiplied and the one arriving are held together (one, unsliced)."""
        return pipelined_panels(whole_panels(self, ctx), slice_count(ctx.params))

    def prefetchable_gathers(self, ctx: GemmContext) -> list[tuple[str, int, int]]:
        """The first slice's gather of the data-independent operand (the weight; RS: the saved activation)."""
        roles = ctx.roles
        return [(mv.operand, ctx.axis(mv.axis), mv.dim) for mv in roles.gathers if mv.operand == roles.prefetchable]

    def prefetch_part(self, ctx: GemmContext, operand: str, block: Tensor) -> Tensor:
        mv = next(mv for mv in ctx.roles.gathers if mv.operand == operand)
        return block.strided_slice(mv.dim, 0, slice_count(ctx.params), ctx.params.block)

    def terms(self, ctx: GemmContext, costs: CostModel) -> tuple[list[float], float, float]:
        """Per-slice times: the gathers (one per gathered operand), the reduce-scatter (0 for OS), the GeMM."""
        problem, roles = ctx.problem, ctx.roles
        slices = slice_count(ctx.params)
        blocks = self.blocks(ctx)
        gathered = dict(blocks)
        gathers = []
        for mv in roles.gathers:
            piece = list(blocks[mv.operand])
            piece[mv.dim] //= slices
            gathers.append(costs.all_gather(ctx.axis(mv.axis), piece[0] * piece[1]))
            piece[mv.dim] *= ctx.size(mv.axis)
            gathered[mv.operand] = (piece[0], piece[1])
        m, n, k = product_dims(problem.dataflow, gathered["x"], gathered["w"])
        r = costs.reduce_scatter(ctx.axis(roles.reduce.axis), m * n) if roles.reduce is not None else 0.0
        return gathers, r, costs.gemm(m, n, k, accumulate=accumulates(ctx))

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        """`main` branch: prologue c (+ r), epilogue g, K-1 steady steps of max(c, r, g), with c the slice's gathers
        together: the slowest, or their sum where the overlap limit admits one all-gather at a time.

        With ``compat_mean_overlap`` (the `simulation` branch), concurrent collectives cost their mean c:
        c + g + (K-1) max(c, g), c over both gathers (OS) or the gather and the reduce-scatter (LS, RS).
        """
        gathers, r, g = self.terms(ctx, costs)
        slices = slice_count(ctx.params)
        if ctx.params.compat_mean_overlap:
            concurrent = gathers + ([r] if ctx.roles.reduce is not None else [])
            c = sum(concurrent) / len(concurrent)
            return c + g + (slices - 1) * max(c, g)
        c = costs.together(CollectiveOp.ALL_GATHER, gathers)
        return c + r + g + (slices - 1) * max(c, r, g)
