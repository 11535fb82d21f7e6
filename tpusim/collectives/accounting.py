"""What one simulated run amounts to: its critical chip, that chip's time breakdown, and what the links carried.

Shared by every kind of run (a collective, a GeMM, a training step), so they all pick the critical chip the
same way: the chip whose last activity (MXU work or a collective it waits on) ends latest, the lowest id among
equals. Its MXU and communication spans split the run into compute, exposed communication and idle
(``tpusim.engine.accounting``). Symmetric runs simulate representative chips only, so their link totals are
not reported.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tpusim.collectives.network import LinkTotals
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.accounting import TimeBreakdown, breakdown
from tpusim.engine.simulation import Simulation

__all__ = ["RunAccount", "account"]

Spans = list[tuple[float, float]]


@dataclass(frozen=True)
class RunAccount:
    """The critical chip of a run and its breakdown over ``[0, elapsed]``."""

    elapsed: float
    critical: int
    parts: TimeBreakdown
    mxu: Spans
    comm: Spans
    flops: float
    hbm_stall: float  # seconds the critical chip's ops ran longer because DMA shared HBM
    links: LinkTotals | None
    transfers: int
    exposed_data: float = 0.0  # the part of ``parts.exposed`` only data-axis collectives were in flight for
    exposed_dcn: float = 0.0  # the part of ``parts.exposed`` only DCN collectives were in flight for


def account(sim: Simulation, runtime: CollectiveRuntime, *, symmetric: bool, chip: int | None = None) -> RunAccount:
    """The account of a finished run: its breakdown is that of the critical chip, ``chip`` where given (runs
    extrapolated from one another must account the same chip), else the slowest ``--slow-chip`` straggler (it
    gates the run; the neighbour waiting on its last collective may finish an instant later), else the chip that
    finished last (the lowest id among equals)."""
    elapsed = float(sim.now)
    finish = {c.id: max((end for _, end in c.spans), default=0.0) for c in sim.chips}
    for member, spans in runtime.comm_spans.items():
        finish[member] = max(finish.get(member, 0.0), max(end for _, end in spans))
    slowed = {c: factor for c, factor in sim.chips.slowdown.items() if factor > 1.0 and c in finish}
    if chip is None and slowed:
        chip = min(slowed, key=lambda c: (-slowed[c], c))
    critical = chip if chip is not None and chip in finish else (
        max(finish, key=lambda c: (finish[c], -c)) if finish else 0)
    mxu = sim.chips[critical].spans
    comm = runtime.comm_spans.get(critical, [])
    totals = runtime.network.totals(sim, elapsed)
    parts = breakdown(mxu, comm, elapsed)
    return RunAccount(elapsed, critical, parts, mxu, comm, sim.chips[critical].flops,
                      sim.chips[critical].hbm_stall if sim.chips else 0.0,
                      None if symmetric else totals, 0 if totals is None else totals.transfers,
                      _exposed_data(parts.exposed, mxu, comm, runtime.data_spans.get(critical, []), elapsed),
                      _exposed_data(parts.exposed, mxu, comm, runtime.dcn_spans.get(critical, []), elapsed))


def _exposed_data(exposed: float, mxu: Spans, comm: Spans, data: Spans, elapsed: float) -> float:
    """The exposed time of the collectives of ``data`` (those of the data axis, or those over DCN) beyond what the
    other collectives already expose."""
    if not data:
        return 0.0
    others = Counter(comm)
    others.subtract(Counter(data))
    tensor = list(others.elements())
    return max(exposed - breakdown(mxu, tensor, elapsed).exposed, 0.0)
