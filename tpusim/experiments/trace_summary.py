"""Trace summaries (``tpusim summarize``, ``step --json``'s ``summary``): where one traced chip's time went.

From the chip's spans (``tpusim.experiments.trace_spans``): its breakdown into compute, exposed communication and
idle (the same split as a result's, ``tpusim.engine.accounting``), and per collective kind, per layer and per op
how much communication ran, how much of it compute hid, how much was exposed, and each collective's share of the
exposed time; HBM stalls; and the critical path (``tpusim.experiments.critical_path``). Every quantity is defined
in docs/results.md#trace-summaries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.config.loader import display_path
from tpusim.engine.accounting import breakdown
from tpusim.experiments.critical_path import critical_path, path_runs
from tpusim.experiments.trace_spans import NS, ChipSpans, TraceSpan, chip_spans, read_trace

__all__ = ["summarize_file", "summarize_trace"]

_ABOUT = ("model", "algorithm", "hardware", "mesh", "fidelity", "traced_layers")
"""What a summary repeats of the trace's ``otherData``, where the trace says it."""


@dataclass(frozen=True)
class _Overlap:
    """One collective span split by what the chip's compute did meanwhile, in nanoseconds."""

    hidden: int  # compute ran
    exposed: int  # compute was idle
    share: float  # its part of the exposed time: each instant split evenly over the collectives in flight


@dataclass
class _Tally:
    """Sums over spans, in nanoseconds (the HBM stall in seconds, as the chip model recorded it)."""

    count: int = 0
    compute: int = 0
    comm: int = 0
    hidden: int = 0
    exposed: int = 0
    share: float = 0.0
    hbm_stall_s: float = 0.0

    def fields(self, with_compute: bool) -> dict[str, Any]:
        shown: dict[str, Any] = {"compute_s": self.compute / NS} if with_compute else {"count": self.count}
        shown |= {"comm_s": self.comm / NS, "hidden_s": self.hidden / NS, "exposed_s": self.exposed / NS,
                  "exposed_share_s": self.share / NS, "overlap_efficiency": _efficiency(self)}
        return shown | ({"hbm_stall_s": self.hbm_stall_s} if with_compute else {})


def summarize_file(path: Path | str, chip: int | None = None) -> dict[str, Any]:
    """The summary of ``chip`` (None: the default chip) in the trace file at ``path``."""
    return summarize_trace(read_trace(path), chip, display_path(path))


def summarize_trace(chrome: dict[str, Any], chip: int | None = None, shown: str = "trace") -> dict[str, Any]:
    """The summary of ``chip`` in the Chrome trace object ``chrome`` (as written, or as ``Tracer.to_chrome``
    returns it); ``shown`` names it in errors."""
    spans = chip_spans(chrome, chip, shown)
    overlap = _overlaps(spans.compute, spans.comm)
    parts = breakdown([(s.start, s.end) for s in spans.compute], [(s.start, s.end) for s in spans.comm], spans.end)
    total = _Tally()
    kinds: dict[str, _Tally] = {}
    for span, part in zip(spans.comm, overlap, strict=True):
        for tally in (total, kinds.setdefault(span.kind, _Tally())):
            _add_comm(tally, span, part)
    summary: dict[str, Any] = {
        "chip": spans.chip, "chip_name": spans.name, "chip_rule": spans.why,
        "trace": {key: spans.about[key] for key in _ABOUT if key in spans.about},
        "end_s": spans.end / NS, "compute_s": parts.compute / NS, "exposed_comm_s": parts.exposed / NS,
        "idle_s": parts.idle / NS, "hbm_stall_s": sum((s.stall_s for s in spans.stalls), 0.0),
        "comm_s": total.comm / NS, "hidden_s": total.hidden / NS, "exposed_s": total.exposed / NS,
        "overlap_efficiency": _efficiency(total),
        "collectives": [{"op": kind, **tally.fields(with_compute=False)}
                        for kind, tally in sorted(kinds.items(), key=lambda item: (-item[1].comm, item[0]))],
        "layers": _table(spans, overlap, lambda s: s.layer, "layer", _layer_order),
        "ops": _table(spans, overlap, lambda s: s.label, "op", None),
        "critical_path": _path(spans),
    }
    return summary


def _overlaps(compute: list[TraceSpan], comm: list[TraceSpan]) -> list[_Overlap]:
    """Each collective's hidden and exposed time and its share of the exposed time, in one sweep over the moments
    any span starts or ends."""
    marks = sorted([(s.start, 0, 1, -1) for s in compute] + [(s.end, 0, -1, -1) for s in compute]
                   + [(s.start, 1, 1, k) for k, s in enumerate(comm)] + [(s.end, 1, -1, k) for k, s in enumerate(comm)])
    hidden, exposed, share = [0] * len(comm), [0] * len(comm), [0.0] * len(comm)
    active: set[int] = set()
    computing = 0
    last = marks[0][0] if marks else 0
    for when, is_comm, step, index in marks:
        elapsed = when - last
        if elapsed > 0 and active:
            for k in active:
                if computing:
                    hidden[k] += elapsed
                else:
                    exposed[k] += elapsed
                    share[k] += elapsed / len(active)
        last = when
        if is_comm:
            (active.add if step > 0 else active.discard)(index)
        else:
            computing += step
    return [_Overlap(*parts) for parts in zip(hidden, exposed, share, strict=True)]


def _add_comm(tally: _Tally, span: TraceSpan, part: _Overlap) -> None:
    tally.count += 1
    tally.comm += span.duration
    tally.hidden += part.hidden
    tally.exposed += part.exposed
    tally.share += part.share


def _efficiency(tally: _Tally) -> float | None:
    """Hidden over total communication; None where there was none."""
    return tally.hidden / tally.comm if tally.comm > 0 else None


def _table(spans: ChipSpans, overlap: list[_Overlap], key: Callable[[TraceSpan], str], column: str,
           order: Callable[[str], tuple[int, int]] | None) -> list[dict[str, Any]]:
    """One row per ``key`` of the chip's spans: compute, communication and HBM stall; rows in ``order``, else in
    the order each first starts."""
    rows: dict[str, _Tally] = {}
    first: dict[str, int] = {}
    for span in sorted((*spans.compute, *spans.comm), key=lambda s: s.start):
        first.setdefault(key(span), span.start)
    for span in spans.compute:
        rows.setdefault(key(span), _Tally()).compute += span.duration
    for span, part in zip(spans.comm, overlap, strict=True):
        _add_comm(rows.setdefault(key(span), _Tally()), span, part)
    for span in spans.stalls:
        rows.setdefault(key(span), _Tally()).hbm_stall_s += span.stall_s
    ranked = sorted(rows, key=order) if order is not None else sorted(rows, key=lambda name: first.get(name, spans.end))
    return [{column: name, **rows[name].fields(with_compute=True)} for name in ranked]


def _layer_order(layer: str) -> tuple[int, int]:
    """``L0``, ``L1``, ..., then ``step``, then ``other`` (names that say no layer)."""
    if layer.startswith("L") and layer[1:].isdigit():
        return 0, int(layer[1:])
    return (1, 0) if layer == "step" else (2, 0)


def _path(spans: ChipSpans) -> dict[str, Any]:
    path = critical_path(spans)
    by_kind: dict[str, int] = {}
    for segment in path:
        by_kind[segment.kind] = by_kind.get(segment.kind, 0) + segment.duration
    return {
        "total_s": sum(s.duration for s in path) / NS,
        "by_kind": {kind: time / NS for kind, time in sorted(by_kind.items(), key=lambda item: (-item[1], item[0]))},
        "hbm_stall_s": sum((s.stall_s for s in path), 0.0),
        "runs": [{"op": run.scope, "start_s": run.start / NS, "end_s": run.end / NS, "duration_s": run.duration / NS,
                  "spans": run.spans, "by_kind": {kind: time / NS for kind, time in run.by_kind.items()},
                  "hbm_stall_s": run.stall_s}
                 for run in path_runs(path)],
    }
