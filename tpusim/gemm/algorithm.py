"""The contract every distributed GeMM algorithm fulfils, and the registry that names them.

An algorithm is written once, as a per-chip SPMD ``program`` over the device API that reads the dataflow
role table; the same program computes the exact product with numpy payloads and is timed without them.
``analytic`` is its closed-form twin, built from ``CostModel``. The named algorithms live in
``tpusim.gemm.registry``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import simpy

from tpusim.collectives.device import Device
from tpusim.collectives.early import EarlyTransfer
from tpusim.engine.tensor import Tensor
from tpusim.errors import InfeasibleError
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem, Roles
from tpusim.gemm.params import ALGORITHM_PARAMETERS, GemmParams
from tpusim.gemm.sharding import Sharding, operand_blocks, two_d
from tpusim.units import dtype_bytes
from tpusim.vocabulary import CollectiveOp

DOUBLE_BUFFERED = 2
"""Buffers of one stream a pipelined program holds at once: the one in use and the next, arriving meanwhile."""


@dataclass(frozen=True)
class GemmContext:
    """What a chip program needs to know besides its blocks."""

    problem: GemmProblem
    params: GemmParams
    mesh: tuple[int, int]

    @property
    def roles(self) -> Roles:
        return self.problem.roles

    def axis(self, role_axis: int) -> int:
        """The logical mesh axis playing role axis ``role_axis`` (transposition swaps them)."""
        return self.problem.layout.axis(role_axis)

    def size(self, role_axis: int) -> int:
        return self.mesh[self.axis(role_axis)]


Program = Generator[simpy.Event, Any, Tensor]


class GemmAlgorithm(ABC):
    """Base of every registered algorithm."""

    name: ClassVar[str]
    summary: ClassVar[str]
    takes: ClassVar[MappingProxyType[str, str]] = MappingProxyType({})
    """The parameters of ``GemmParams`` this algorithm reads beyond ``prefetch``, each with what it is to the
    algorithm (``{"slices": "its panel count S"}``); one it does not declare it ignores, or refuses where
    ``ALGORITHM_PARAMETERS`` says so."""
    variants: ClassVar[tuple[str, ...]] = ()
    parallelism: ClassVar[str] = "2d"  # "2d", "1d-feature" (tp1d) or "1d-batch" (fsdp): how a step shards

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.takes) - set(ALGORITHM_PARAMETERS))
        if unknown:
            raise TypeError(f"{cls.__name__}.takes names {unknown}; valid: {', '.join(ALGORITHM_PARAMETERS)}")

    @property
    def uses_slices(self) -> bool:
        """Whether the schedule is sliced (a slice or panel count the tuner searches)."""
        return "slices" in self.takes

    def __str__(self) -> str:
        # an algorithm stands for its name wherever it is shown or keyed (a step's timing-cache key among them)
        return self.name

    def check(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> None:
        """Raise InfeasibleError for a combination this algorithm cannot run."""
        for parameter, refused in ALGORITHM_PARAMETERS.items():
            value = getattr(params, parameter)
            if refused and value is not None and parameter not in self.takes:
                raise not_taken(self, parameter, str(value))
        if params.variant is not None and params.variant not in self.variants:
            valid = ", ".join(self.variants) if self.variants else "none (this algorithm has no variants)"
            raise InfeasibleError(f"unknown variant {params.variant!r} for algorithm {self.name!r}; valid: {valid}")

    def symmetric_safe(self, params: GemmParams, rank_independent: bool) -> bool:
        """Whether every chip runs an identically timed schedule (so representative chips suffice).

        ``rank_independent``: whether the network times a collective the same whatever the root and
        finishes every member together (docs/network.md#fidelity-modes). Algorithms whose schedule depends
        on the chip's position (rotating roots, per-row skews) override this.
        """
        del params, rank_independent
        return True

    def representatives(self, mesh: tuple[int, int], params: GemmParams,
                        rank_independent: bool) -> list[tuple[int, int]]:
        """The chips symmetric fidelity runs: one suffices where every chip behaves alike.

        Algorithms whose chips differ by position but are dominated by a few (Cannon's largest skews)
        return those; a test proves the reduction equals full fidelity.
        """
        del mesh, params, rank_independent
        return [(0, 0)]

    def prefetchable_gathers(self, ctx: GemmContext) -> list[tuple[str, int, int]]:
        """The data-independent all-gathers (operand, logical axis, dim) a step may start early under the
        ``previous-op``, ``previous-gemm`` and ``window`` policies; the program picks them up with
        ``Device.gather_prefetchable``."""
        del ctx
        return []

    def prefetch_part(self, ctx: GemmContext, operand: str, block: Tensor) -> Tensor:
        """The part of the chip's ``operand`` block that the prefetchable gather moves: the whole block, or for
        an algorithm that gathers it in pieces its first piece (MeshSlice's slice 0). One policy serves every
        algorithm: whatever this returns may start as early as the prefetch policy allows
        (docs/algorithms.md#prefetch-policy)."""
        del ctx, operand
        return block

    def early_transfers(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> list[tuple[EarlyTransfer,
                                                                                               Tensor]]:
        """The data-independent first transfers of this chip's program and what each sends, which the step may
        start before the op under the ``previous-op``, ``previous-gemm`` and ``window`` policies; the program
        picks each up with ``Device.take_prefetched``. By default the ``prefetchable_gathers`` of the
        ``prefetch_part`` of their blocks; SUMMA's first panel broadcasts and Cannon's skew override it."""
        del dev
        held = {"x": x, "w": w}
        return [(EarlyTransfer(operand, CollectiveOp.ALL_GATHER, axis, dim=dim),
                 self.prefetch_part(ctx, operand, held[operand]))
                for operand, axis, dim in self.prefetchable_gathers(ctx)]

    def panel_elements(self, ctx: GemmContext) -> int:
        """The most elements of operand buffers one chip holds at once while this GeMM runs beyond its own
        resident shards: what it received from other chips and still needs (gathered or broadcast panels, shifted
        blocks, partial outputs in transit), at the busiest moment of its program
        (docs/workloads.md#working-set). A reduction's result landing in the chip's own output block is the
        output, not a panel.

        The default is the collective 2D GeMM's, every gathered operand whole at once: an algorithm that does
        not declare its own is charged the most a 2D GeMM gathers, never nothing."""
        return sum(whole_panels(self, ctx).values())

    def blocks(self, ctx: GemmContext) -> dict[str, tuple[int, int]]:
        """The per-chip block shapes of ``ctx``'s stored operands under this algorithm's sharding, keyed "x" and
        "w" (``sharding.operand_blocks``)."""
        return operand_blocks(ctx.problem.x_shape, ctx.problem.w_shape, self.sharding(ctx.problem, ctx.mesh), ctx.mesh)

    def panel_bytes(self, ctx: GemmContext) -> float:
        """``panel_elements`` at the operand dtype."""
        return float(self.panel_elements(ctx) * dtype_bytes(ctx.problem.dtype))

    def early_elements(self, ctx: GemmContext) -> int:
        """The elements the ``early_transfers`` fill on one chip: what a prefetch policy that starts them before
        the op holds ahead of this GeMM. By default the ``prefetchable_gathers`` of the ``prefetch_part`` of the
        blocks, as ``early_transfers`` sends them; an algorithm that overrides that overrides this too (the
        contract test checks the two agree)."""
        blocks = self.blocks(ctx)
        return sum(gathered(self.prefetch_part(ctx, operand, Tensor(blocks[operand], ctx.problem.dtype)).size,
                            ctx.mesh[axis]) for operand, axis, _ in self.prefetchable_gathers(ctx))

    def early_bytes(self, ctx: GemmContext) -> float:
        """``early_elements`` at the operand dtype."""
        return float(self.early_elements(ctx) * dtype_bytes(ctx.problem.dtype))

    def slice_options(self, problem: GemmProblem, mesh: tuple[int, int], params: GemmParams) -> list[int] | None:
        """The slice counts this algorithm can run ``problem`` with on ``mesh``, ascending; None where it does
        not slice. The one home of the slice rule: feasibility checks, their error messages, the tuner's
        candidates and a step's fallback all read it."""
        del problem, mesh, params
        return None

    def sharding(self, problem: GemmProblem, mesh: tuple[int, int]) -> Sharding:
        """Where X, W and Y live; 2D algorithms use the layout's placement."""
        del mesh
        return two_d(problem.layout)

    @abstractmethod
    def program(self, dev: Device, ctx: GemmContext, x: Tensor, w: Tensor) -> Program:
        """The per-chip program: consume the chip's X and W blocks, return its Y block."""

    @abstractmethod
    def analytic(self, ctx: GemmContext, costs: CostModel) -> float:
        """The closed-form time (docs/algorithms.md), uncontended."""


def whole_panels(algorithm: GemmAlgorithm, ctx: GemmContext) -> dict[str, int]:
    """Elements of each gathered operand of ``ctx``'s dataflow gathered whole over its role axis: the chip's block
    times the chips of that axis, keyed "x" or "w"."""
    blocks = algorithm.blocks(ctx)
    return {mv.operand: gathered(blocks[mv.operand][0] * blocks[mv.operand][1], ctx.size(mv.axis))
            for mv in ctx.roles.gathers}


def gathered(block: int, chips: int) -> int:
    """Elements a chip receives gathering a ``block`` of elements over an axis of ``chips``: the group's blocks,
    its own among them, in one new buffer; none over an axis of one chip, whose block is the operand itself."""
    return block * chips if chips > 1 else 0


def pipelined_panels(panels: dict[str, int], pieces: int) -> int:
    """What a pipeline of ``pieces`` steps holds of ``panels`` (each gathered operand whole), the next step's
    pieces arriving while the current step's are multiplied: two pieces of each, or the one where there is one
    step (MeshSlice's slices, SUMMA's panels). Every panel splits evenly: its sliced dimension divides into the
    pieces (the algorithms' feasibility rules)."""
    return min(pieces, DOUBLE_BUFFERED) * sum(panel // pieces for panel in panels.values())


def not_taken(algorithm: GemmAlgorithm, parameter: str, shown: str) -> InfeasibleError:
    """The refusal of ``parameter`` (given as ``shown``) by an algorithm that does not declare it, naming every
    registered algorithm that does, with what it is to each."""
    from tpusim.gemm.registry import algorithms  # the registry imports this module

    takers = [f"{name!r} ({other.takes[parameter]})" for name, other in algorithms().items()
              if parameter in other.takes]
    listed = takers[0] if len(takers) == 1 else ", ".join(takers[:-1]) + " and " + takers[-1] if takers else "none"
    return InfeasibleError(f"--{parameter.replace('_', '-')} {shown} does not apply to algorithm "
                           f"{algorithm.name!r}; only {listed} take{'s' if len(takers) == 1 else ''} one")
