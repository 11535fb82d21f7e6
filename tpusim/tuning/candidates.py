"""The planning table: the fastest timed configuration of each algorithm and layout kind, as rows of data.

A layout kind is what a configuration parallelises over: tensor parallelism alone (``tensor``), replicas that shard
all model state at ZeRO 3 with tensor parallelism inside each (``fsdp x tensor``) or without (``fsdp``), and
replicas at ZeRO 0 to 2 with (``data x tensor``, the D x R x C layouts) or without it (``data``). A layout whose
replicas hold a whole copy of every GeMM (tensor mesh 1x1) runs no distributed algorithm: its ``algorithm`` is
None, and it is one candidate whichever algorithm's search found it.

Every candidate is a whole step the tuner simulated (``finalists``); ``bound`` says what limits it: ``compute``
when the critical chip computes for more of the step than it waits on exposed communication, ``exposed comm``
otherwise, and ``memory-infeasible`` when it overflows HBM (a search with memory ignored).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from tpusim.tuning.result import Choice

__all__ = ["Bound", "Candidate", "LayoutKind", "candidate_of", "fastest_per_kind"]


class LayoutKind(StrEnum):
    TENSOR = "tensor"
    FSDP_TENSOR = "fsdp x tensor"
    FSDP = "fsdp"
    DATA_TENSOR = "data x tensor"
    DATA = "data"


class Bound(StrEnum):
    COMPUTE = "compute"
    EXPOSED_COMM = "exposed comm"
    MEMORY = "memory-infeasible"


FSDP_STAGE = 3  # the ZeRO stage at which replicas shard the weights too (model.data_parallel)


@dataclass(frozen=True)
class Candidate:
    """One row of the planning table (field meanings: docs/workloads.md#planning-tpusim-plan)."""

    algorithm: str | None
    layout: str  # a LayoutKind
    named_layout: str
    mesh: str
    slice_shape: str | None  # the slice the mesh is placed on; None on a calibrated profile
    zero_stage: int
    step_time_s: float
    tokens_per_s: float
    mfu: float
    memory_bytes_per_chip: float
    feasible: bool
    bound: str  # a Bound
    compute_s: float
    exposed_comm_s: float
    dataflows: list[str]
    transposes: list[bool]
    slices: list[int | None]
    microbatches: int
    recompute: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def layout_kind(choice: Choice, zero_stage: int) -> LayoutKind:
    """What ``choice`` parallelises over (its mesh is R x C, or D x R x C with D replicas)."""
    rows, cols = (int(v) for v in choice.mesh.split("x")[-2:])
    if choice.data_parallel == 1:
        return LayoutKind.TENSOR
    sharded = zero_stage >= FSDP_STAGE
    if rows * cols == 1:
        return LayoutKind.FSDP if sharded else LayoutKind.DATA
    return LayoutKind.FSDP_TENSOR if sharded else LayoutKind.DATA_TENSOR


def candidate_of(choice: Choice, zero_stage: int) -> Candidate:
    """The row of a timed choice of a search at ``zero_stage``."""
    kind = layout_kind(choice, zero_stage)
    local = kind in (LayoutKind.FSDP, LayoutKind.DATA)  # every GeMM whole on each chip: no algorithm runs
    if not choice.memory_feasible:
        bound = Bound.MEMORY
    else:
        bound = Bound.COMPUTE if choice.compute_s >= choice.exposed_comm_s else Bound.EXPOSED_COMM
    return Candidate(
        algorithm=None if local else choice.algorithm, layout=str(kind), named_layout=choice.layout,
        mesh=choice.mesh, slice_shape=choice.slice_shape, zero_stage=zero_stage if choice.data_parallel > 1 else 0,
        step_time_s=choice.step_time_s, tokens_per_s=choice.tokens_per_s, mfu=choice.mfu,
        memory_bytes_per_chip=choice.memory_bytes_per_chip, feasible=choice.feasible and choice.memory_feasible,
        bound=str(bound), compute_s=choice.compute_s, exposed_comm_s=choice.exposed_comm_s,
        dataflows=list(choice.dataflows), transposes=list(choice.transposes), slices=list(choice.slices),
        microbatches=choice.microbatches, recompute=choice.recompute)


def fastest_per_kind(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The fastest candidate of each (algorithm, layout kind), fastest first (ties: the order given)."""
    kept: dict[tuple[str | None, str], Candidate] = {}
    for candidate in candidates:
        key = (candidate.algorithm, candidate.layout)
        if key not in kept or candidate.step_time_s < kept[key].step_time_s:
            kept[key] = candidate
    order = {key: number for number, key in enumerate(kept)}
    return sorted(kept.values(), key=lambda c: (c.step_time_s, order[(c.algorithm, c.layout)]))
