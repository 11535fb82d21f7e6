"""Collective matmul (Wang et al.): the role-axis-1 collective decomposed into ring shifts under partial GeMMs.

Shared by ``wang`` (2D: role axis 0 on the other mesh axis) and ``tp1d`` (Megatron: role axis 0 unsplit).
The role table's move on role axis 1 names what circulates and along which stored dimension; call that
dimension's logical name L (OS: k, LS: n, RS: m). L is cut into n * ways pieces, piece ``c * ways + h``
belonging to ring rank c; half h travels forward (h = 0) or backward (h = 1), so both directions of
every ring link are busy (``ways`` = 1 on rings of one or two chips, where both directions reach the
same neighbour). The product of piece p uses piece p of every other operand that has L, and either lands
in piece p of the output (L in Y) or accumulates (L contracted).

- Gather ring (OS, RS: X circulates): at step s a chip multiplies the halves it holds, which came from
  ranks r - s and r + s, while passing them on. n - 1 shift steps, n partial-GeMM steps.
- Reduce ring (LS: partial outputs circulate): the n partial products a chip contributes do not depend on
  the ring, so all are issued at once; at step s the chip adds its product to the accumulator it holds
  (timed as the product's GeMM reading and writing an fp32 accumulator, docs/chip.md#gemm-time) and passes it
  on; after n - 1 shifts it holds its own finished output piece.
- Role axis 0 (when split): its gather (OS, LS: the weight) is one blocking all-gather before the ring;
  with prefetch ``ideal`` every partial GeMM takes the pending gathered panel instead (the gather overlaps
  the GeMMs that consume it, as ``collective`` does). Its reduce-scatter (RS) runs after the ring, exposed.

Twin, with A the role-axis-0 gather, D its reduce-scatter, g one step's partial GeMMs, sigma one
half-block shift and S = n - 1 (exact for this schedule on the calibrated network):
    loop = g + S max(sigma, g)
    T = A + loop + D                              (prefetch none or previous-op)
    T = max(A, loop) + D                          (ideal, gather ring)
    T = max(A + S sigma, loop) + D                (ideal, reduce ring: accumulators wait for the weight)
The published form (docs/algorithms.md#wang-collective-matmul) writes n max(sigma, g): it counts a shift after the
last partial GeMM, which this schedule (like Wang et al.'s) does not perform, so it exceeds the above by
max(sigma - g, 0).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import simpy

from tpusim.collectives.device import Device
from tpusim.collectives.handles import Pending, expected_of
from tpusim.engine.tensor import Tensor, add, concat
from tpusim.errors import InfeasibleError
from tpusim.gemm.algorithm import DOUBLE_BUFFERED, gathered
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem, Move, Roles
from tpusim.gemm.local import local_product, product_dims
from tpusim.gemm.sharding import block_shape, operand_blocks
from tpusim.vocabulary import Dataflow, Prefetch

from .placement import RoleAxes, role_sharding, stored_dims

DIRECTIONS = (1, -1)  # half 0 travels to rank r + 1, half 1 to rank r - 1

Operand = Tensor | simpy.Event


def role_moves(roles: Roles) -> tuple[Move, Move]:
    """(move on role axis 1, move on role axis 0): every dataflow has exactly one of each."""
    moves = [mv for mv in (*roles.gathers, roles.reduce) if mv is not None]
    inner = next(mv for mv in moves if mv.axis == 1)
    outer = next(mv for mv in moves if mv.axis == 0)
    return inner, outer


def halves(n: int) -> int:
    """Pieces per chip: two halves in opposite directions, or one where both directions meet."""
    return 2 if n > 2 else 1


def circulated(problem: GemmProblem) -> str:
    """Logical name of the dimension the ring cuts (OS: k, LS: n, RS: m)."""
    inner, _ = role_moves(problem.roles)
    return stored_dims(problem.dataflow, inner.operand)[inner.dim]


def check_ring(problem: GemmProblem, axes: RoleAxes, mesh: tuple[int, int], algorithm: str) -> None:
    """The circulated dimension must cut into ``halves`` equal pieces per ring chip."""
    ring = axes[1]
    assert ring is not None
    n = mesh[ring]
    name = circulated(problem)
    pieces = n * halves(n)
    if problem.dim(name) % pieces:
        raise InfeasibleError(
            f"algorithm {algorithm!r} cuts {name.upper()} = {problem.dim(name)} into {pieces} pieces "
            f"({halves(n)} per chip on the {n}-chip ring of mesh axis {ring}); {name.upper()} must be a multiple "
            f"of {pieces}"
        )


def ring_prefetchable(problem: GemmProblem, axes: RoleAxes) -> list[tuple[str, int, int]]:
    """The blocking role-axis-0 gather, when it gathers a stored operand (the weight for OS and LS)."""
    _, outer = role_moves(problem.roles)
    if outer.operand == "y" or axes[0] is None:
        return []
    return [(outer.operand, axes[0], outer.dim)]


def ring_panel_elements(problem: GemmProblem, axes: RoleAxes, mesh: tuple[int, int]) -> int:
    """What one chip of the ring schedule holds beyond its blocks: the blocking role-axis-0 gather whole (every
    partial GeMM reads a piece of it); on a gather ring, from step 1 on, the halves received in the last step
    while the next ones arrive (on a ring of two chips the one received block); on the reduce ring the arriving
    accumulators, one output block in all."""
    inner, outer = role_moves(problem.roles)
    ring = axes[1]
    assert ring is not None
    n = mesh[ring]
    sharding = role_sharding(axes)
    shapes = operand_blocks(problem.x_shape, problem.w_shape, sharding, mesh)
    held = 0
    if outer.operand != "y" and axes[0] is not None:
        rows, cols = shapes[outer.operand]
        held += gathered(rows * cols, mesh[axes[0]])
    if inner.operand == "y":
        rows, cols = block_shape(problem.y_shape, sharding.y, mesh, "Y")
        return held + rows * cols * min(n - 1, 1)
    rows, cols = shapes[inner.operand]
    return held + rows * cols * min(n - 1, DOUBLE_BUFFERED)


def ring_program(
    dev: Device, problem: GemmProblem, prefetch: Prefetch, axes: RoleAxes, x: Tensor, w: Tensor
) -> Generator[simpy.Event, Any, Tensor]:
    """The per-chip program (see the module docstring)."""
    inner, outer = role_moves(problem.roles)
    ring = axes[1]
    assert ring is not None
    n, rank = dev.size(ring), dev.rank(ring)
    ways = halves(n)
    held: dict[str, Operand] = {"x": x, "w": w}
    if outer.operand != "y" and axes[0] is not None:
        handle = dev.gather_prefetchable(outer.operand, x if outer.operand == "x" else w, axes[0], outer.dim)
        if prefetch is Prefetch.IDEAL:
            held[outer.operand] = handle
        else:
            (held[outer.operand],) = yield dev.wait(handle)
    name = circulated(problem)
    fixed = {operand: value for operand, value in held.items() if operand != inner.operand}
    parts = _Pieces(dev, problem.dataflow, name, n * ways, fixed)
    if inner.operand == "y":
        y = yield from _reduce_ring(dev, problem.dataflow, ring, n, rank, ways, parts, inner.dim)
    else:
        y = yield from _gather_ring(dev, problem.dataflow, ring, n, rank, ways, parts, x.split(inner.dim, ways), name)
    if outer.operand == "y" and axes[0] is not None:
        y = yield dev.reduce_scatter(y, axes[0], outer.dim)
    return y


class _Pieces:
    """Piece p (of ``count`` along dimension ``name``) of each stationary or gathered operand that has it."""

    def __init__(self, dev: Device, dataflow: Dataflow, name: str, count: int, held: dict[str, Operand]) -> None:
        self.dataflow = dataflow
        self.cut: dict[str, list[Operand]] = {}
        self.whole = held
        for operand, value in held.items():
            dims = stored_dims(dataflow, operand)
            if name in dims:
                self.cut[operand] = _split(dev, value, dims.index(name), count)

    def get(self, operand: str, piece: int) -> Operand:
        return self.cut[operand][piece] if operand in self.cut else self.whole[operand]


def _split(dev: Device, value: Operand, dim: int, count: int) -> list[Operand]:
    """``count`` pieces of a tensor, or of a pending gather (each piece pending until the gather lands)."""
    if isinstance(value, Tensor):
        whole: list[Operand] = list(value.split(dim, count))
        return whole
    pieces = [Pending(dev.env, expected) for expected in expected_of(value).split(dim, count)]

    def deliver(done: simpy.Event) -> None:
        gathered = done.value
        assert isinstance(gathered, Tensor)
        for piece, part in zip(pieces, gathered.split(dim, count), strict=True):
            piece.succeed(part)

    value.callbacks.append(deliver)
    return list(pieces)


def _gather_ring(
    dev: Device, dataflow: Dataflow, ring: int, n: int, rank: int, ways: int, parts: _Pieces,
    mine: list[Tensor], name: str,
) -> Generator[simpy.Event, Any, Tensor]:
    held: list[Tensor] = mine
    arriving: list[simpy.Event] = []
    acc: simpy.Event | None = None
    placed: dict[int, simpy.Event] = {}
    out_dim = stored_dims(dataflow, "y").index(name) if name in ("m", "n") else None
    for step in range(n):
        if step:
            held = yield dev.wait(*arriving)
        if step < n - 1:  # pass the halves on before multiplying them: the shift hides under the GeMMs
            arriving = [dev.shift(held[h], ring, DIRECTIONS[h]) for h in range(ways)]
        for h in range(ways):
            piece = ((rank - step * DIRECTIONS[h]) % n) * ways + h
            w = parts.get("w", piece)
            if out_dim is None:
                acc = local_product(dev, dataflow, held[h], w, acc, accumulate=n > 1, name=f"ring step {step}")
            else:
                placed[piece] = local_product(dev, dataflow, held[h], w, name=f"ring step {step}")
    if out_dim is None:
        assert acc is not None
        total: Tensor = yield acc
        return total
    values = yield dev.wait(*(placed[p] for p in range(n * ways)))
    return concat(values, out_dim)


def _reduce_ring(
    dev: Device, dataflow: Dataflow, ring: int, n: int, rank: int, ways: int, parts: _Pieces, dim: int,
) -> Generator[simpy.Event, Any, Tensor]:
    products = []
    for step in range(n):
        for h in range(ways):
            # the accumulator held at this step ends its trip at this rank after n - 1 - step more shifts
            piece = ((rank + (n - 1 - step) * DIRECTIONS[h]) % n) * ways + h
            # each product is added into the accumulator that arrives (timed as the GeMM's accumulate)
            products.append(local_product(dev, dataflow, parts.get("x", piece), parts.get("w", piece),
                                          accumulate=n > 1, name=f"ring step {step}"))
    incoming: list[simpy.Event | None] = [None] * ways
    finished: list[Tensor] = []
    for step in range(n):
        for h in range(ways):
            waits = [products[step * ways + h]]
            if (arriving := incoming[h]) is not None:
                waits.append(arriving)
            total = add((yield dev.wait(*waits)))
            if step < n - 1:
                incoming[h] = dev.shift(total, ring, DIRECTIONS[h])
            else:
                finished.append(total)
    return concat(finished, dim)


@dataclass(frozen=True)
class RingTerms:
    """The twin's components (seconds)."""

    gather: float  # A: the role-axis-0 all-gather (0 when there is none)
    reduce: float  # D: the role-axis-0 reduce-scatter (0 when there is none)
    gemm: float  # g: one step's partial GeMMs (``ways`` pieces)
    shift: float  # sigma: one piece's shift
    steps: int  # n: partial-GeMM steps; n - 1 shift steps
    reduce_ring: bool  # partial outputs circulate (LS) rather than X (OS, RS)

    @property
    def loop(self) -> float:
        return self.gemm + (self.steps - 1) * max(self.shift, self.gemm)

    def time(self, prefetch: Prefetch) -> float:
        """This schedule's time (module docstring)."""
        if prefetch is not Prefetch.IDEAL:
            return self.gather + self.loop + self.reduce
        lead = self.gather + (self.steps - 1) * self.shift if self.reduce_ring else self.gather
        return max(lead, self.loop) + self.reduce

    def reference(self) -> float:
        """The reference's form (docs/algorithms.md#wang-collective-matmul, docs/algorithms.md#1d-tensor-parallelism;
        role-axis-0 gather exposed): A + n max(sigma, g) + D."""
        return self.gather + self.steps * max(self.shift, self.gemm) + self.reduce


def ring_terms(problem: GemmProblem, axes: RoleAxes, mesh: tuple[int, int], costs: CostModel) -> RingTerms:
    """The twin's components for this problem on this mesh."""
    inner, outer = role_moves(problem.roles)
    ring = axes[1]
    assert ring is not None
    n = mesh[ring]
    ways = halves(n)
    shapes = operand_blocks(problem.x_shape, problem.w_shape, role_sharding(axes), mesh)
    gather = 0.0
    if outer.operand != "y" and axes[0] is not None:
        block = shapes[outer.operand]
        gather = costs.all_gather(axes[0], block[0] * block[1])
        shapes[outer.operand] = _scaled(block, outer.dim, mesh[axes[0]])
    whole = product_dims(problem.dataflow, _scaled(shapes["x"], inner.dim, n) if inner.operand == "x"
                         else shapes["x"], shapes["w"])
    name = circulated(problem)
    piece = dict(zip("mnk", whole, strict=True))
    piece[name] //= n * ways
    # contracted pieces (a gather ring over k) and the reduce ring's partial outputs add into an accumulator
    accumulate = (inner.operand == "y" or name == "k") and n > 1
    g = ways * costs.gemm(piece["m"], piece["n"], piece["k"], accumulate=accumulate)
    if inner.operand == "x":
        other = next(d for d in stored_dims(problem.dataflow, "x") if d != name)
        moved = piece[name] * piece[other]
    else:
        moved = piece["m"] * piece["n"]
    sigma = costs.shift(ring, moved, 1)
    reduce = 0.0
    if outer.operand == "y" and axes[0] is not None:
        reduce = costs.reduce_scatter(axes[0], whole[0] * whole[1])
    return RingTerms(gather, reduce, g, sigma, n, inner.operand == "y")


def _scaled(shape: tuple[int, int], dim: int, factor: int) -> tuple[int, int]:
    out = list(shape)
    out[dim] *= factor
    return (out[0], out[1])
