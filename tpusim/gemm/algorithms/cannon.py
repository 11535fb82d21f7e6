"""Cannon's algorithm on a square mesh (docs/algorithms.md#cannon): skewed blocks circulating one hop per step.

Notation: n = R = C; a chip's ranks on role axes 0 and 1 are (r0, r1). Every dataflow is read from the
role table: the gathered operands are the *moving* ones (each circulates along its role axis), and for LS
and RS the partial output circulates along the reduce axis, so the stationary operand never moves.

``textbook`` (default). A moving operand on role axis a is skewed by -r_(1-a) (rank r receives from
r + r_(1-a)), so at step s every chip holds contraction block c = r0 + r1 + s of it; after each GeMM it
shifts one hop toward lower rank. OS accumulates into the stationary output. In LS and RS the partial
output block with index c also shifts one hop toward lower rank along the reduce axis B after each GeMM,
and the moving operand's index stays paired with it. A partial output needs no skew (it starts as zeros)
but after the last GeMM it sits r_A - 1 ranks below home along B (A = the moving operand's axis), and no
uniform one-hop circulation can both pair it with the moving blocks and end at home, so the last shift
carries it home directly: offset r_A - 1 on B (at most floor(n/2) hops). Shifts of step s+1 are issued when GeMM s
starts (the GeMM reads the blocks being sent; tensors are immutable, so this is double buffering); an
arriving partial output is added to the next GeMM's product when it lands, the MXU does not wait for it.

``bidirectional-halves`` (the authors' executable version). The skew is replaced by an all-gather of each
moving operand along its axis and a local pick of block (r0 + r1) mod n. The blocks are halved along the
dataflow's sliced dimension; half 0 walks toward lower rank (index c0 + s) and half 1 toward higher rank
(index c0 - s), so both directions of every link carry data. OS moves the X and W halves (the contraction
halves pair up) for n-1 steps; after the gathers every block is already local, but the circulation is the
authors' schedule, so it is what gets timed. LS and RS move only the two half partial outputs; each chip
reads the moving operand's half-blocks from its gathered copy, and a final all-gather along B plus a local
pick returns every half to its home.

The data-independent operand's first move (the weight; RS: the saved activation), its skew in ``textbook`` and its
all-gather in ``bidirectional-halves``, follows the prefetch policy like every algorithm's first transfer: under
``previous-op``, ``previous-gemm`` and ``window`` it may start before the GeMM (docs/algorithms.md#prefetch-policy).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from tpusim.collectives.device import Device
from tpusim.collectives.early import EarlyTransfer
from tpusim.engine.tensor import Tensor, concat
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import DOUBLE_BUFFERED, GemmAlgorithm, GemmContext, Program, gathered
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem, Move
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.params import GemmParams
from tpusim.gemm.sharding import block_shape, operand_blocks
from tpusim.vocabulary import CollectiveOp

TEXTBOOK = "textbook"
HALVES = "bidirectional-halves"
_SQUARES = "valid on 16, 64, 256, 1024 chips as 4x4, 8x8, 16x16, 32x32"


def variant_of(params: GemmParams) -> str:
    return params.variant or TEXTBOOK


class Cannon(GemmAlgorithm):
    name = "cannon"
    summary = "Cannon: skewed blocks (and LS/RS partial outputs) shifted one hop per step; square meshes"
    takes = MappingProxyType({"variant": "how its blocks travel"})
    variants = (TEXTBOOK, HALVES)

    def symmetric_safe(self, params: GemmParams, rank_independent: bool) -> bool:
        # the textbook skew shifts each row and column by its own rank, so chips differ; on a rank-independent
        # network the chips with the longest skews and unskews dominate their groups (see representatives)
        return rank_independent or (params.variant or TEXTBOOK) != TEXTBOOK

    def representatives(self, mesh: tuple[int, int], params: GemmParams,
                        rank_independent: bool) -> list[tuple[int, int]]:
        if (params.variant or TEXTBOOK) != TEXTBOOK:
            return [(0, 0)]
        # skews of ranks n/2 and unskews of rank n/2 + 1 are the longest (at most n/2 hops); the block of
        # chips holding those ranks on both axes finishes last in every group it belongs to
        n = mesh[0]
        ranks = sorted({n // 2 % n, (n // 2 + 1) % n})
        return [(i, j) for i in ranks for j in ranks]

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        super().check(problem, mesh, params)
        rows, cols = mesh
        if rows != cols:
            raise InfeasibleError(
                f"algorithm 'cannon' needs a square mesh; got {rows}x{cols} (R != C); {_SQUARES}"
            )
        sliced = problem.roles.sliced
        size = problem.dim(sliced)
        if variant_of(params) == HALVES and size % (2 * rows):
            raise InfeasibleError(
                f"cannon variant {HALVES!r} halves the {sliced} blocks: {sliced} = {size} must be divisible by "
                f"2 x {rows} = {2 * rows}"
            )

    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        if variant_of(ctx.params) == HALVES:
            return self._halves(dev, ctx, x, w)
        return self._textbook(dev, ctx, x, w)

    def _textbook(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles, dataflow = ctx.roles, ctx.problem.dataflow
        n = ctx.size(0)
        ranks = (dev.rank(ctx.axis(0)), dev.rank(ctx.axis(1)))
        moves = roles.gathers
        held = {"x": x, "w": w}
        # the data-independent operand's skew may have started early (``early_transfers``)
        skews = [dev.take_prefetched(transfer, held[mv.operand]) if mv.operand == roles.prefetchable
                 else dev.start_transfer(transfer, held[mv.operand])
                 for mv in moves for transfer in (self._skew(dev, ctx, mv),)]
        current = dict(zip((mv.operand for mv in moves), (yield dev.wait(*skews)), strict=True))
        acc: Any = None  # OS: the stationary output; LS/RS: the circulating partial output (possibly in flight)
        for s in range(n):
            operands = {**held, **current}
            gemm = local_product(dev, dataflow, operands["x"], operands["w"], acc, accumulate=n > 1,
                                 name=f"gemm[{s}]")
            last = s + 1 == n
            rolls = [] if last else [dev.shift(current[mv.operand], ctx.axis(mv.axis), -1) for mv in moves]
            product = yield gemm
            if roles.reduce is None:
                acc = product
            else:
                home = (ranks[moves[0].axis] - 1) % n  # the last shift brings the output block home
                acc = dev.shift(product, ctx.axis(roles.reduce.axis), home if last else -1)
            if rolls:
                current = dict(zip(current, (yield dev.wait(*rolls)), strict=True))
        if roles.reduce is not None:
            (acc,) = yield dev.wait(acc)
        result: Tensor = acc
        return result

    def _halves(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        roles, dataflow = ctx.roles, ctx.problem.dataflow
        n = ctx.size(0)
        ranks = (dev.rank(ctx.axis(0)), dev.rank(ctx.axis(1)))
        start = (ranks[0] + ranks[1]) % n
        moves = roles.gathers
        held = {"x": x, "w": w}
        gathers = [dev.gather_prefetchable(mv.operand, held[mv.operand], ctx.axis(mv.axis), mv.dim)
                   if mv.operand == roles.prefetchable else dev.all_gather(held[mv.operand], ctx.axis(mv.axis), mv.dim)
                   for mv in moves]
        panels = {mv.operand: p.split(mv.dim, n) for mv, p in zip(moves, (yield dev.wait(*gathers)), strict=True)}
        directions = (-1, 1)  # half 0 walks toward lower rank, half 1 toward higher rank
        if roles.reduce is None:
            halves = {mv.operand: panels[mv.operand][start].split(mv.dim, 2) for mv in moves}
            acc = None
            for s in range(n):
                operands = {**held, **{mv.operand: concat(halves[mv.operand], mv.dim) for mv in moves}}
                gemm = local_product(dev, dataflow, operands["x"], operands["w"], acc, accumulate=n > 1,
                                     name=f"gemm[{s}]")
                rolls = [] if s + 1 == n else [
                    dev.shift(halves[mv.operand][h], ctx.axis(mv.axis), d)
                    for mv in moves for h, d in enumerate(directions)
                ]
                acc = yield gemm
                if rolls:
                    arrived = yield dev.wait(*rolls)
                    halves = {mv.operand: arrived[2 * i:2 * i + 2] for i, mv in enumerate(moves)}
            assert isinstance(acc, Tensor)
            return acc
        (mv,) = moves
        out = roles.reduce
        accs: list[Any] = [None, None]
        for s in range(n):
            gemms = []
            for h, d in enumerate(directions):
                piece = panels[mv.operand][(start - d * s) % n].split(mv.dim, 2)[h]
                operands = {**held, mv.operand: piece}
                gemms.append(local_product(dev, dataflow, operands["x"], operands["w"], accs[h],
                                           accumulate=n > 1, name=f"gemm[{s}.{h}]"))
            for h, d in enumerate(directions):
                product = yield gemms[h]
                accs[h] = product if s + 1 == n else dev.shift(product, ctx.axis(out.axis), d)
        gathered = yield dev.all_gather(concat(accs, out.dim), ctx.axis(out.axis), out.dim)
        blocks = gathered.split(out.dim, n)
        home, p = ranks[out.axis], ranks[mv.axis]
        # half h of this chip's block finished on the chip r_B = home - p - d (see the module docstring)
        return concat([blocks[(home - p - d) % n].split(out.dim, 2)[h] for h, d in enumerate(directions)],
                      out.dim)

    def panel_elements(self, ctx: GemmContext) -> int:
        """textbook: each moving block in hand while its successor arrives (step s+1's shifts are issued as GeMM s
        starts), and for LS / RS the partial output block arriving. bidirectional-halves: each moving operand
        gathered whole (its circulating halves, two blocks, are no more); LS / RS read that copy while two half
        partial outputs arrive, then all-gather the output block over the reduce axis."""
        problem, roles = ctx.problem, ctx.roles
        n = ctx.size(0)
        sharding = self.sharding(problem, ctx.mesh)
        blocks = operand_blocks(problem.x_shape, problem.w_shape, sharding, ctx.mesh)
        moving = [blocks[mv.operand][0] * blocks[mv.operand][1] for mv in roles.gathers]
        rows, cols = block_shape(problem.y_shape, sharding.y, ctx.mesh, "Y")
        output = rows * cols if roles.reduce is not None else 0
        if n == 1:
            return 0  # nothing moves on one chip
        if variant_of(ctx.params) == HALVES:
            gathered = n * sum(moving)
            return max(gathered + output, n * output)
        return min(n, DOUBLE_BUFFERED) * sum(moving) + output

    def early_elements(self, ctx: GemmContext) -> int:
        """The data-independent operand's block, shifted by its skew (textbook) or gathered over its n chips
        (bidirectional-halves), as ``early_transfers`` moves it."""
        blocks = self.blocks(ctx)
        n = ctx.size(0)
        moved = sum(blocks[mv.operand][0] * blocks[mv.operand][1] for mv in ctx.roles.gathers
                    if mv.operand == ctx.roles.prefetchable)
        return gathered(moved, n) if variant_of(ctx.params) == HALVES else (moved if n > 1 else 0)

    @staticmethod
    def _skew(dev: Device, ctx: GemmContext, mv: Move) -> EarlyTransfer:
        """The textbook skew of moving operand ``mv`` on this chip: rank r receives from r + r_(1-a)."""
        n = ctx.size(0)
        return EarlyTransfer(mv.operand, CollectiveOp.SHIFT, ctx.axis(mv.axis),
                             offset=-dev.rank(ctx.axis(1 - mv.axis)) % n)

    def early_transfers(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> list[tuple[EarlyTransfer,
                                                                                                   Tensor]]:
        """The data-independent operand's first move (the weight; RS: the saved activation): its skew
        (textbook) or its all-gather (bidirectional-halves)."""
        held = {"x": x, "w": w}
        moves = [mv for mv in ctx.roles.gathers if mv.operand == ctx.roles.prefetchable]
        if variant_of(ctx.params) == HALVES:
            return [(EarlyTransfer(mv.operand, CollectiveOp.ALL_GATHER, ctx.axis(mv.axis), dim=mv.dim),
                     held[mv.operand]) for mv in moves]
        return [(self._skew(dev, ctx, mv), held[mv.operand]) for mv in moves]

    def terms(self, ctx: GemmContext, costs: CostModel) -> dict[str, float]:
        """Per-operation times: ``g`` (one step's GeMM), ``roll`` (slowest one-step shift), ``skew`` (slowest
        skew: the farthest group, floor(n/2) hops), ``unskew`` (LS/RS: the partial output's last shift
        home), ``gather`` (slowest all-gather of a moving operand), ``half_roll`` (slowest half-block shift),
        ``out_gather`` (LS/RS: the final all-gather of the output block)."""
        problem, roles = ctx.problem, ctx.roles
        n = ctx.size(0)
        blocks = self.blocks(ctx)
        m, nn, k = product_dims(problem.dataflow, blocks["x"], blocks["w"])
        size = {op: shape[0] * shape[1] for op, shape in blocks.items()}
        moving = [(ctx.axis(mv.axis), size[mv.operand]) for mv in roles.gathers]
        out = [(ctx.axis(roles.reduce.axis), m * nn)] if roles.reduce is not None else []
        # every step adds into the stationary (OS) or circulating (LS, RS) partial output
        accumulate = n > 1
        g_halves = costs.gemm(m, nn, k, accumulate=accumulate)
        if roles.reduce is not None:  # two GeMMs, one per half of the sliced dimension
            dims = {"m": m, "n": nn, "k": k}
            dims[roles.sliced] //= 2
            g_halves = 2 * costs.gemm(dims["m"], dims["n"], dims["k"], accumulate=accumulate)
        return {
            "g": costs.gemm(m, nn, k, accumulate=accumulate),
            "roll": max(costs.shift(axis, e, 1) for axis, e in moving + out),
            "skew": max(costs.shift(axis, e, n // 2) for axis, e in moving),
            "unskew": max([costs.shift(axis, e, n // 2) for axis, e in out], default=0.0),
            "gather": costs.together(CollectiveOp.ALL_GATHER, [costs.all_gather(axis, e) for axis, e in moving]),
            "half_roll": max(costs.shift(axis, e / 2, 1) for axis, e in (out or moving)),
            "out_gather": max([costs.all_gather(axis, e) for axis, e in out], default=0.0),
            "g_halves": g_halves,
        }

    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        """textbook: max(skews) + g + (n-1) max(roll, g) (+ unskew for LS/RS);
        bidirectional-halves: max(gathers) + g + (n-1) max(half_roll, g) (+ the output all-gather for LS/RS).

        The reference charges max(skew) + n max(roll, g): n rolls, the last of which no GeMM needs (OS); it
        equals this form whenever g >= roll. For LS/RS it skews the output instead of bringing it home.
        """
        t = self.terms(ctx, costs)
        n = ctx.size(0)
        if variant_of(ctx.params) == HALVES:
            g = t["g_halves"]
            return t["gather"] + g + (n - 1) * max(t["half_roll"], g) + t["out_gather"]
        return t["skew"] + t["g"] + (n - 1) * max(t["roll"], t["g"]) + t["unskew"]
