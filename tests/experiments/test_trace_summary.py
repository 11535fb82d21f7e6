"""Trace summaries on a hand-made trace whose overlap is known: every figure exact, the critical path read from
the times, the chip chosen as documented, and malformed traces refused with one line."""

from __future__ import annotations

from typing import Any

import pytest

from tpusim.experiments.trace_spans import TraceError, chip_spans
from tpusim.experiments.trace_summary import summarize_trace


def us(micro: float) -> float:
    """``micro`` microseconds in seconds, as the summary converts the trace's whole nanoseconds."""
    return round(micro * 1000) / 1e9

TRACKS = {1: "MXU", 2: "vector unit", 3: "HBM stall", 4: "collectives axis 0", 5: "collectives axis 1 (2)",
          6: "ICI +x"}


def _chrome(spans: list[tuple[int, int, str, float, float, dict[str, Any]]], critical: int | None = 0,
            chips: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    """A trace of ``spans`` (chip, tid, name, start us, end us, args) on the tracks of ``TRACKS``."""
    events: list[dict[str, Any]] = []
    for chip in chips:
        events.append({"ph": "M", "name": "process_name", "pid": chip, "args": {"name": f"chip {chip} ({chip},0)"}})
        events += [{"ph": "M", "name": "thread_name", "pid": chip, "tid": tid, "args": {"name": name}}
                   for tid, name in TRACKS.items()]
    events += [{"ph": "X", "pid": chip, "tid": tid, "name": name, "ts": start, "dur": end - start, "args": args}
               for chip, tid, name, start, end, args in spans]
    return {"traceEvents": events, "otherData": {} if critical is None else {"critical_chip": critical}}


# chip 0: GeMM slices [0,10] and [15,25] us, an all-gather [5,15] on axis 0 and a reduce-scatter [10,30] on a
# second lane of axis 1, nothing in [30,33], the optimizer [33,35]; 2 us of HBM stall at the end of the first slice
KNOWN = [
    (0, 1, "L0 fwd ff1 K1/2 gemm", 0.0, 10.0, {"flops": 1.0}),
    (0, 3, "L0 fwd ff1 K1/2 gemm HBM stall", 8.0, 10.0, {"stall_s": 2e-6}),
    (0, 4, "L0 fwd ff1 all-gather", 5.0, 15.0, {"op": "all-gather", "bytes": 1, "group": 0}),
    (0, 5, "L0 fwd ff2 reduce-scatter", 10.0, 30.0, {"op": "reduce-scatter", "bytes": 1, "group": 0}),
    (0, 1, "L0 fwd ff1 K2/2 gemm", 15.0, 25.0, {"flops": 1.0}),
    (0, 2, "step optimizer", 33.0, 35.0, {}),
    (0, 6, "L0 fwd ff2 reduce-scatter", 10.0, 40.0, {"link": 3}),  # a port: the link's time, not the chip's
    (1, 1, "L0 fwd ff1 K1/2 gemm", 0.0, 50.0, {"flops": 1.0}),
]


def test_the_breakdown_and_the_overlap_are_exact() -> None:
    summary = summarize_trace(_chrome(KNOWN))
    assert (summary["chip"], summary["chip_name"], summary["chip_rule"]) == (0, "chip 0 (0,0)", "the critical chip")
    assert summary["end_s"] == us(35)
    # compute [0,10] [15,25] [33,35]; compute idle while a collective runs: [10,15] and [25,30]
    assert (summary["compute_s"], summary["exposed_comm_s"], summary["idle_s"]) == (us(22), us(10), us(3))
    assert summary["hbm_stall_s"] == 2e-6
    assert (summary["comm_s"], summary["hidden_s"], summary["exposed_s"]) == (us(30), us(15), us(15))
    assert summary["overlap_efficiency"] == 0.5
    # [10,15]: both in flight, 2.5 us each; [25,30]: the reduce-scatter alone
    assert summary["collectives"] == [
        {"op": "reduce-scatter", "count": 1, "comm_s": us(20), "hidden_s": us(10), "exposed_s": us(10),
         "exposed_share_s": us(7.5), "overlap_efficiency": 0.5},
        {"op": "all-gather", "count": 1, "comm_s": us(10), "hidden_s": us(5), "exposed_s": us(5),
         "exposed_share_s": us(2.5), "overlap_efficiency": 0.5},
    ]


def test_layers_and_ops_split_the_same_figures() -> None:
    summary = summarize_trace(_chrome(KNOWN))
    row = {"compute_s": us(20), "comm_s": us(30), "hidden_s": us(15), "exposed_s": us(15),
           "exposed_share_s": us(10), "overlap_efficiency": 0.5, "hbm_stall_s": 2e-6}
    quiet = {"comm_s": 0.0, "hidden_s": 0.0, "exposed_s": 0.0, "exposed_share_s": 0.0, "overlap_efficiency": None,
             "hbm_stall_s": 0.0}
    assert summary["layers"] == [{"layer": "L0", **row}, {"layer": "step", "compute_s": us(2), **quiet}]
    assert summary["ops"] == [
        {"op": "fwd ff1", "compute_s": us(20), "comm_s": us(10), "hidden_s": us(5), "exposed_s": us(5),
         "exposed_share_s": us(2.5), "overlap_efficiency": 0.5, "hbm_stall_s": 2e-6},
        {"op": "fwd ff2", "compute_s": 0.0, "comm_s": us(20), "hidden_s": us(10), "exposed_s": us(10),
         "exposed_share_s": us(7.5), "overlap_efficiency": 0.5, "hbm_stall_s": 0.0},
        {"op": "step optimizer", "compute_s": us(2), **quiet},
    ]


def test_the_critical_path_is_read_back_from_the_end() -> None:
    path = summarize_trace(_chrome(KNOWN))["critical_path"]
    # 35 <- the optimizer; nothing ends at 33: idle back to the reduce-scatter's end; it started at 10, when the
    # first slice ended (the second slice and the all-gather are off the path)
    assert path["total_s"] == us(35)
    assert path["by_kind"] == {"reduce-scatter": us(20), "MXU": us(10), "idle": us(3), "vector unit": us(2)}
    assert path["hbm_stall_s"] == 2e-6
    assert [(r["op"], r["start_s"], r["end_s"], r["spans"]) for r in path["runs"]] == [
        ("L0 fwd ff1", 0.0, us(10), 1), ("L0 fwd ff2", us(10), us(30), 1), ("step optimizer", us(30), us(35), 2)]
    assert path["runs"][-1]["by_kind"] == {"idle": us(3), "vector unit": us(2)}  # the wait is the op's it held up


def test_compute_ending_with_a_collective_is_taken_first() -> None:
    spans = [(0, 1, "L0 fwd ff1 K1/2 gemm", 4.0, 10.0, {}),
             (0, 4, "L0 fwd ff1 all-gather", 0.0, 10.0, {"op": "all-gather"}),
             (0, 1, "L0 fwd ff1 K2/2 gemm", 10.0, 12.0, {})]
    path = summarize_trace(_chrome(spans, chips=(0,)))["critical_path"]
    # at 10 both end: the compute queue released the next slice; before 4 nothing ended: idle from 0
    assert path["by_kind"] == {"MXU": us(8), "idle": us(4)}


def test_spans_that_meet_within_a_nanosecond_meet() -> None:
    spans = [(0, 1, "a", 0.0, 10.0004, {}), (0, 1, "b", 10.0, 20.0, {})]
    path = summarize_trace(_chrome(spans, chips=(0,)))["critical_path"]
    assert path["by_kind"] == {"MXU": us(20)}


def test_a_collective_runs_from_when_the_chip_joined_it() -> None:
    # the chip joined at 4 us and waited 3 us for the group's other members: waiting on the collective, not idle
    spans = [(0, 1, "a", 0.0, 4.0, {}), (0, 4, "b", 7.0, 10.0, {"op": "all-gather", "waited_s": 3e-6}),
             (0, 1, "c", 10.0, 12.0, {})]
    summary = summarize_trace(_chrome(spans, chips=(0,)))
    assert (summary["exposed_comm_s"], summary["idle_s"], summary["comm_s"]) == (us(6), 0.0, us(6))
    assert summary["critical_path"]["by_kind"] == {"MXU": us(6), "all-gather": us(6)}


def test_the_chip_is_the_one_asked_for_else_the_critical_else_the_lowest() -> None:
    assert summarize_trace(_chrome(KNOWN), chip=1)["end_s"] == us(50)
    chosen = summarize_trace(_chrome(KNOWN, critical=5))
    assert (chosen["chip"], chosen["chip_rule"]) == (0, "the lowest traced chip (the critical chip 5 was not traced)")
    assert summarize_trace(_chrome(KNOWN, critical=None))["chip_rule"] == "the lowest traced chip"
    with pytest.raises(TraceError, match=r"^--chip 7: trace file 't.json' has no chip 7; valid: 0-1 \(the traced "
                                         r"chips\)$"):
        chip_spans(_chrome(KNOWN), 7, "t.json")


@pytest.mark.parametrize(("chrome", "message"), [
    ({"traceEvents": 3}, "has no 'traceEvents' list"),
    ({"traceEvents": [5]}, "event 0 is not an object"),
    ({"traceEvents": []}, "has no compute or collective spans of any chip"),
    ({"traceEvents": [*_chrome([], chips=(0,))["traceEvents"],
                      {"ph": "X", "pid": 0, "tid": 1, "name": "a", "ts": "0", "dur": 1}]},
     "event 7 has ts '0', dur 1: not a span with a start and a duration >= 0 in microseconds"),
    (_chrome([(0, 1, "a", 5.0, 1.0, {})]), "has ts 5.0, dur -4.0"),
])
def test_malformed_traces_are_one_line(chrome: dict[str, Any], message: str) -> None:
    with pytest.raises(TraceError) as raised:
        summarize_trace(chrome, shown="t.json")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert str(raised.value).endswith("valid: a trace file written by tpusim's --trace or --trace-best")
