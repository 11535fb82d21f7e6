"""SUMMA (docs/algorithms.md#summa): S steps of panel broadcasts, each pipelined against a panel GeMM.

The dataflow's sliced global dimension (role table: OS k, LS n, RS m) is cut into S contiguous panels,
S = lcm(R, C) by default or, given ``slices``, any panel count with each role axis size n dividing S or
divisible by it (so fewer, wider panels). On a role axis of n chips with n | S each chip's block holds S/n
consecutive panels, so panel s belongs to rank s // (S/n), at local sub-panel s % (S/n); with S | n panel s
spans the whole blocks of the n/S consecutive ranks s (n/S) .. (s+1)(n/S) - 1, each of which broadcasts its
block. Step s broadcasts panel s of every gathered operand along its role axis from its owners, multiplies,
and either accumulates into the stationary output (OS) or reduces the partial output panel along the reduce
axis to the ranks that own output panel s, which keep it in their slots (LS, RS).

Pipeline rules (those under which the DES equals the closed form): step s+1's broadcasts are issued when
GeMM s starts, the MXU runs one GeMM at a time, each axis runs its collectives FIFO, and step s's reduces
are issued when GeMM s finishes. Roots rotate with s; on the calibrated network a broadcast or reduce
costs the same from any root. Panel 0 of the data-independent operand (the weight; RS: the saved
activation) is the algorithm's prefetchable first transfer: under the ``previous-op``, ``previous-gemm``
and ``window`` policies it may start before the GeMM does (docs/algorithms.md#prefetch-policy).
"""

from __future__ import annotations

import math
from types import MappingProxyType

import simpy

from tpusim.collectives.device import Device
from tpusim.collectives.early import EarlyTransfer
from tpusim.engine.tensor import Tensor, concat
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import GemmAlgorithm, GemmContext, Program, pipelined_panels, whole_panels
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem, Move
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.params import GemmParams
from tpusim.vocabulary import CollectiveOp


def default_steps(rows: int, cols: int) -> int:
    """The finest panel count, lcm(R, C): one panel per sub-block on both role axes."""
    return math.lcm(rows, cols)


def panel_counts(rows: int, cols: int) -> list[int]:
    """Every legal panel count S <= lcm(R, C), ascending: each of R and C divides S or is divisible by it."""
    top = default_steps(rows, cols)
    return [s for s in range(1, top + 1)
            if top % s == 0 and all(n % s == 0 or s % n == 0 for n in (rows, cols))]


def step_count(ctx: GemmContext) -> int:
    """S: the given panel count, else lcm of the sizes of role axes 0 and 1."""
    return ctx.params.slices if ctx.params.slices is not None else default_steps(ctx.size(0), ctx.size(1))


def accumulates(ctx: GemmContext) -> bool:
    """Whether the panel GeMMs add into the stationary output (OS over more than one step): the rule every
    algorithm follows (MeshSlice's slices, Cannon's steps)."""
    return ctx.roles.reduce is None and step_count(ctx) > 1


def owners(step: int, steps: int, size: int) -> tuple[list[int], int, int]:
    """(ranks, pieces, local) of panel ``step`` of ``steps`` on a role axis of ``size`` chips: the ranks whose
    blocks hold it, in order, and which of ``pieces`` equal parts of each such block it is."""
    if steps >= size:
        per_chip = steps // size
        return [step // per_chip], per_chip, step % per_chip
    span = size // steps
    return list(range(step * span, (step + 1) * span)), 1, 0


class Summa(GemmAlgorithm):
    name = "summa"
    summary = "SUMMA: S <= lcm(R, C) panel broadcasts (and, LS/RS, panel reduces) pipelined against panel GeMMs"
    takes = MappingProxyType({"slices": "its panel count S"})

    def symmetric_safe(self, params: GemmParams, rank_independent: bool) -> bool:
        # rotating roots: where the root matters, each rank receives a broadcast at its own time
        del params
        return rank_independent

    def slice_options(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> list[int]:
        """The panel counts S (docs/algorithms.md#summa): every S <= lcm(R, C) that each role axis size divides
        or is divisible by, where the sliced dimension splits over both axes (none otherwise)."""
        del params
        layout = problem.layout
        rows, cols = mesh[layout.axis(0)], mesh[layout.axis(1)]
        if problem.dim(problem.roles.sliced) % default_steps(rows, cols):
            return []
        return panel_counts(rows, cols)

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        layout, sliced = problem.layout, problem.roles.sliced
        rows, cols = mesh[layout.axis(0)], mesh[layout.axis(1)]
        steps = default_steps(rows, cols)
        size = problem.dim(sliced)
        if size % steps:
            raise InfeasibleError(
                f"summa: the panel dimension {sliced} = {size} is not divisible by lcm({rows}, {cols}) = {steps} "
                f"(one panel per step); use a multiple of {steps}"
            )
        if params.slices is not None and params.slices not in panel_counts(rows, cols):
            raise InfeasibleError(
                f"--slices {params.slices}: summa's panel count must divide lcm({rows}, {cols}) = {steps} with "
                f"{rows} and {cols} each dividing it or divisible by it; feasible panel counts: "
                f"{', '.join(map(str, panel_counts(rows, cols)))}"
            )

    def _panel(self, dev: Device, ctx: GemmContext, mv: Move, block: Tensor, s: int) -> list[simpy.Event]:
        """The broadcasts that bring panel ``s`` of a gathered operand to every chip of its axis (panel 0 of the
        data-independent operand possibly started early, ``early_transfers``)."""
        first = s == 0 and mv.operand == ctx.roles.prefetchable
        return [dev.take_prefetched(transfer, piece) if first else dev.start_transfer(transfer, piece)
                for transfer, piece in self._broadcasts(ctx, mv, block, s)]

    def _broadcasts(self, ctx: GemmContext, mv: Move, block: Tensor, s: int) -> list[tuple[EarlyTransfer, Tensor]]:
        """Panel ``s``'s broadcasts of a gathered operand: one per owner, each sending its part of ``block``."""
        ranks, pieces, local = owners(s, step_count(ctx), ctx.size(mv.axis))
        piece = block.split(mv.dim, pieces)[local]
        return [(EarlyTransfer(mv.operand, CollectiveOp.BROADCAST, ctx.axis(mv.axis), root=root), piece)
                for root in ranks]

    def early_transfers(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> list[tuple[EarlyTransfer,
                                                                                                   Tensor]]:
        """Panel 0's broadcasts of the data-independent operand (the weight; RS: the saved activation)."""
        del dev
        held = {"x": x, "w": w}
        return [pair for mv in ctx.roles.gathers if mv.operand == ctx.roles.prefetchable
                for pair in self._broadcasts(ctx, mv, held[mv.operand], 0)]

    def panel_elements(self, ctx: GemmContext) -> int:
        """Two of the S panels of every gathered operand (panel s of an axis of n chips is its whole panel / S,
        from one owner or from n / S of them): step s+1's broadcasts are issued as GeMM s starts."""
        return pipelined_panels(whole_panels(self, ctx), step_count(ctx))

    def early_elements(self, ctx: GemmContext) -> int:
        """Panel 0 of the data-independent operand, as ``early_transfers`` broadcasts it (on an axis of one chip,
        its own block: nothing received)."""
        blocks = self.blocks(ctx)
        return sum(piece.size for mv in ctx.roles.gathers
                   if mv.operand == ctx.roles.prefetchable and ctx.size(mv.axis) > 1
                   for _, piece in self._broadcasts(ctx, mv, Tensor(blocks[mv.operand], ctx.problem.dtype), 0))

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles, dataflow = ctx.roles, ctx.problem.dataflow
        steps = step_count(ctx)
        held = {"x": x, "w": w}

        def broadcasts(s: int) -> list[list[simpy.Event]]:
            return [self._panel(dev, ctx, mv, held[mv.operand], s) for mv in roles.gathers]

        acc: Tensor | None = None
        reductions = []
        pending = broadcasts(0)
        for s in range(steps):
            arrived = yield dev.wait(*(handle for handles in pending for handle in handles))
            values, start = [], 0
            for mv, handles in zip(roles.gathers, pending, strict=True):  # each panel, its owners in rank order
                values.append(concat(arrived[start:start + len(handles)], mv.dim))
                start += len(handles)
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
                ranks, _, _ = owners(s, steps, ctx.size(roles.reduce.axis))
                for root, part in zip(ranks, product.split(roles.reduce.dim, len(ranks)), strict=True):
                    reductions.append(dev.reduce(part, ctx.axis(roles.reduce.axis), root))
        if roles.reduce is None:
            assert acc is not None
            return acc
        panels = yield dev.wait(*reductions)
        mine = [p for p in panels if p is not None]  # this chip's output panels, in step (= local slot) order
        return concat(mine, roles.reduce.dim)

    def terms(self, ctx: GemmContext, costs: CostModel) -> tuple[list[float], float, float]:
        """Per-step times: the broadcasts of each gathered operand's panel (one per owner, FIFO on the axis),
        the reduces (0 for OS), the panel GeMM."""
        problem, roles = ctx.problem, ctx.roles
        steps = step_count(ctx)
        blocks = self.blocks(ctx)
        panels = dict(blocks)
        broadcasts = []
        for mv in roles.gathers:
            ranks, pieces, _ = owners(0, steps, ctx.size(mv.axis))
            piece = list(blocks[mv.operand])
            piece[mv.dim] //= pieces
            broadcasts.append(len(ranks) * costs.broadcast(ctx.axis(mv.axis), piece[0] * piece[1]))
            piece[mv.dim] *= len(ranks)
            panels[mv.operand] = (piece[0], piece[1])
        m, n, k = product_dims(problem.dataflow, panels["x"], panels["w"])
        r = 0.0
        if roles.reduce is not None:
            ranks, _, _ = owners(0, steps, ctx.size(roles.reduce.axis))
            r = len(ranks) * costs.reduce(ctx.axis(roles.reduce.axis), m * n / len(ranks))
        return broadcasts, r, costs.gemm(m, n, k, accumulate=accumulates(ctx))

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        """OS: max(B) + (S-1) max(B, g) + g; LS, RS: (B + R_o) + (S-1) max(R_o, B, g) + g (docs/algorithms.md#summa)."""
        broadcasts, r, g = self.terms(ctx, costs)
        steps = step_count(ctx)
        return max(broadcasts) + r + (steps - 1) * max(*broadcasts, r, g) + g
