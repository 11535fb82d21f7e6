"""Several groups' phased plans merged into one program that the executor runs in a single process.

The groups of a logical axis that start the same collective at the same instant run in lockstep on links
they mostly do not share. Running them as one program lets one wake-up serve every group at each instant
instead of one per group. Phases keep their meaning per group: a group's phase p + 1 starts when its own
phase p has fully arrived (a gate that opens at that group's last arrival), never when every group's has,
so a slow group (a straggler, a degraded link) holds back only itself, exactly as when groups ran apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpusim.collectives.plans import Plan, index_type

__all__ = ["Program", "merge_phases"]


@dataclass(frozen=True, eq=False)
class Program:
    """Messages of every group and phase as arrays (ranks numbered ``slot * size + rank``).

    ``pred``/``succ`` chain messages within a phase; ``gate_in[i]`` is the gate message i counts toward (its
    group's phase barrier), ``gate_release[g]`` the messages gate g releases when all ``gate_count[g]`` of its
    messages have arrived; ``roots`` start at once. ``final`` marks the messages of each group's last phase,
    whose arrivals complete ranks (``incoming`` of them end at each rank).
    """

    size: int
    groups: int
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    route: np.ndarray
    hops: np.ndarray
    succ: np.ndarray
    adds: np.ndarray
    slot: np.ndarray
    final: np.ndarray
    incoming: np.ndarray
    gate_in: np.ndarray
    gate_count: np.ndarray
    gate_release: tuple[np.ndarray, ...]
    roots: np.ndarray
    # transfers of lines a symmetric run leaves out (``tpusim.engine.lines``), counted as if sent
    elsewhere_transfers: int = 0
    # the ranks reported as the program ends, having received nothing in its last phase; None: every such rank
    # (a program that leaves lines out does not report the ranks of those lines)
    idle_reported: np.ndarray | None = None
    # folded rings (``plans.Plan.receiver``): the chip each message's arrival is charged to, -1 where it is the
    # last hop's end; None: every message's is
    receiver: np.ndarray | None = None

    @property
    def empty(self) -> bool:
        return len(self.src) == 0


def merge_phases(per_group: Sequence[Sequence[Plan]], size: int) -> Program:
    """One program from each group's list of phase plans (phases without messages are dropped)."""
    parts: dict[str, list[np.ndarray]] = {key: [] for key in ("src", "dst", "nbytes", "hops", "pred", "adds",
                                                              "slot", "final", "gate", "receiver")}
    routes: list[np.ndarray] = []
    gate_count: list[int] = []
    gate_release: list[np.ndarray] = []
    roots: list[np.ndarray] = []
    base = 0
    total = sum(len(plan.src) for phases in per_group for plan in phases)
    # messages and ranks are renumbered here; routes keep the link ids (and the index type) of their plans
    itype = index_type(total, size * len(per_group))
    for slot, phases in enumerate(per_group):
        used = [plan for plan in phases if len(plan.src)]
        previous_gate = -1
        for index, plan in enumerate(used):
            m = len(plan.src)
            offset = slot * size
            parts["src"].append((plan.src + offset).astype(itype, copy=False))
            parts["dst"].append((plan.dst + offset).astype(itype, copy=False))
            parts["nbytes"].append(plan.nbytes)
            parts["hops"].append(plan.hops)
            parts["pred"].append(np.where(plan.pred >= 0, plan.pred + base, -1).astype(itype, copy=False))
            parts["adds"].append(np.full(m, plan.adds))
            parts["receiver"].append(plan.receiver if plan.receiver is not None else np.full(m, -1, dtype=np.int64))
            parts["slot"].append(np.full(m, slot, dtype=itype))
            last = index == len(used) - 1
            parts["final"].append(np.full(m, last))
            gate = -1 if last else len(gate_count)
            if not last:
                gate_count.append(m)
                gate_release.append(np.zeros(0, dtype=np.int64))  # filled by the next phase
            parts["gate"].append(np.full(m, gate, dtype=itype))
            routes.append(plan.route)
            starters = np.flatnonzero(plan.pred < 0) + base
            if previous_gate < 0:
                roots.append(starters)
            else:
                gate_release[previous_gate] = starters
            previous_gate = gate
            base += m
    if base == 0:
        zeros = np.zeros(0, dtype=np.int64)
        return Program(size, len(per_group), zeros, zeros, np.zeros(0), np.zeros((0, 1), dtype=np.int64), zeros,
                       zeros, np.zeros(0, dtype=bool), zeros, np.zeros(0, dtype=bool),
                       np.zeros(size * len(per_group), dtype=np.int64), zeros, zeros, (), zeros)
    width = max(r.shape[1] for r in routes)
    route = np.concatenate([np.pad(r, ((0, 0), (0, width - r.shape[1])), constant_values=-1) for r in routes])
    arrays = {key: np.concatenate(values) for key, values in parts.items()}
    pred = arrays["pred"]
    succ = np.full(base, -1, dtype=itype)
    has = pred >= 0
    succ[pred[has]] = np.flatnonzero(has)
    final = arrays["final"].astype(bool)
    incoming = np.bincount(arrays["dst"][final], minlength=size * len(per_group)).astype(itype)
    return Program(
        size=size, groups=len(per_group), src=arrays["src"], dst=arrays["dst"], nbytes=arrays["nbytes"],
        route=route, hops=arrays["hops"], succ=succ, adds=arrays["adds"].astype(bool), slot=arrays["slot"],
        final=final, incoming=incoming, gate_in=arrays["gate"], gate_count=np.array(gate_count, dtype=np.int64),
        gate_release=tuple(gate_release), roots=np.concatenate(roots) if roots else np.zeros(0, dtype=np.int64),
        receiver=(arrays["receiver"] if any(plan.receiver is not None for phases in per_group for plan in phases)
                  else None),
    )
