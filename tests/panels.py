"""The GeMM panels of docs/workloads.md#working-set worked out independently of the package: each algorithm's rule
from M, N, K, the role axes' chip counts and its own parameters, and the busiest GeMM of a step's backward pass
with what its prefetch policy has started early beside it. Tests of memory figures add this term by hand."""

from __future__ import annotations

from math import lcm
from typing import Any

from tpusim.config import TransformerModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.model.layer import GemmOp
from tpusim.model.plan import StepPlan, StepSpec, plan_step
from tpusim.units import dtype_bytes
from tpusim.vocabulary import Dataflow, Prefetch, Recompute

BF16 = dtype_bytes("bf16")


def rule(name: str, problem: GemmProblem, rows: int, cols: int, params: GemmParams) -> tuple[int, int]:
    """(panel elements, early elements) of ``problem`` under algorithm ``name``: ``rows`` and ``cols`` are the
    chips of role axes 0 and 1 (a transposed layer swaps the mesh's), or P and 1 for the 1D algorithms."""
    m, n, k, flow = problem.m, problem.n, problem.k, problem.dataflow
    # gathered whole over their role axis: OS gathers X over role axis 1 and W over role axis 0, LS W over role
    # axis 0, RS X over role axis 1; the prefetchable one is W (RS: X); an axis of one chip receives nothing
    x_whole = m * k // rows if cols > 1 else 0
    w_whole = k * n // cols if rows > 1 else 0
    whole = {Dataflow.OS: (x_whole, w_whole), Dataflow.LS: (0, w_whole), Dataflow.RS: (x_whole, 0)}[flow]
    prefetchable = whole[0] if flow is Dataflow.RS else whole[1]
    blocks = {"x": m * k // (rows * cols), "w": k * n // (rows * cols), "y": m * n // (rows * cols)}
    if name == "collective":
        return sum(whole), prefetchable
    if name in ("meshslice", "summa"):
        pieces = params.slices or (1 if name == "meshslice" else lcm(rows, cols))
        return min(pieces, 2) * sum(whole) // pieces, prefetchable // pieces
    if name == "cannon":
        if rows == 1:
            return 0, 0  # nothing moves on one chip
        moving = blocks["x"] * (flow is not Dataflow.LS) + blocks["w"] * (flow is not Dataflow.RS)
        output = blocks["y"] if flow is not Dataflow.OS else 0
        own = blocks["x"] if flow is Dataflow.RS else blocks["w"]
        if params.variant == "bidirectional-halves":
            return max(rows * moving + output, rows * output), rows * own
        return min(rows, 2) * moving + output, own
    if name in ("wang", "tp1d"):
        # wang gathers the weight over role axis 0 (even of one chip); tp1d has no role axis 0
        outer = whole[1] if flow is not Dataflow.RS and name == "wang" else 0
        ring = blocks["y"] * min(cols - 1, 1) if flow is Dataflow.LS else blocks["x"] * min(cols - 1, 2)
        return outer + ring, outer
    if name == "fsdp":
        weight = k * n if flow is not Dataflow.RS and rows > 1 else 0
        return weight, weight
    raise ValueError(f"no rule for {name!r}")


def role_sizes(name: str, problem: GemmProblem, mesh: tuple[int, int]) -> tuple[int, int]:
    """The chips of role axes 0 and 1: the mesh's (swapped where transposed); tp1d puts all P on role axis 1,
    fsdp on role axis 0."""
    chips = mesh[0] * mesh[1]
    if name == "tp1d":
        return 1, chips
    if name == "fsdp":
        return chips, 1
    return (mesh[1], mesh[0]) if problem.transpose else mesh


def step_panel_bytes(plan: StepPlan, name: str, mesh: tuple[int, int], prefetch: Prefetch,
                     window: int | None = None) -> float:
    """The busiest GeMM of the backward pass (which repeats layer after layer) with the next ones' early transfers
    where ``prefetch`` starts them during it (previous-op: the next op, if a GeMM; previous-gemm: the next GeMM;
    window: every GeMM of the ``window`` ops ahead, unless a budget, None here, bounds them), in bf16 bytes."""
    ops = plan.backward
    figures: list[tuple[int, int] | None] = []
    for op in ops:
        if isinstance(op, GemmOp):
            params = plan.gemms[op.name].ctx.params
            figures.append(rule(name, op.problem, *role_sizes(name, op.problem, mesh), params))
        else:
            figures.append(None)
    most = 0
    for index, figure in enumerate(figures):
        if figure is None:
            continue
        early = 0
        if prefetch is Prefetch.PREVIOUS_OP and (coming := figures[(index + 1) % len(figures)]) is not None:
            early = coming[1]
        if prefetch is Prefetch.PREVIOUS_GEMM:
            early = next(f for f in figures[index + 1:] + figures[:index + 1] if f is not None)[1]
        if prefetch is Prefetch.WINDOW and window is not None:
            early = sum(f[1] for place in range(index + 1, index + window + 1)
                        if (f := figures[place % len(figures)]) is not None)
        most = max(most, figure[0] + early)
    return float(BF16 * most)


def plan_panel_bytes(model: TransformerModel, algorithm: str, batch: int, mesh: tuple[int, int],
                     prefetch: Prefetch, recompute: Recompute, slices: tuple[int | None, ...] | None = None,
                     window: int | None = None, **spec: Any) -> float:
    """``step_panel_bytes`` of the plan a step of ``batch`` sequences per replica runs on ``mesh`` (the dataflows
    the step picks itself unless ``spec`` names them)."""
    plan = plan_step(StepSpec(model, get_algorithm(algorithm), batch, slices, prefetch=prefetch, recompute=recompute,
                              allow_infeasible=True, **spec), mesh)
    return step_panel_bytes(plan, algorithm, mesh, prefetch, window)
