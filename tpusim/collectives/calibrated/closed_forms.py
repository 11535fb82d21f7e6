"""The MeshSlice authors' calibrated closed forms of every collective, and the ring directions each one holds.

Each logical axis is one abstract ring with a fitted launch overhead alpha, per-step latency lambda and per-axis
bandwidth beta per collective kind (docs/network.md#the-calibrated-network). A ring collective of ``n`` ranks
takes alpha + (n - 1) (s / beta[axis] + lambda) on its unit bytes ``s`` (``Operation.unit_bytes``); a broadcast
or reduce is cut through: alpha + s / beta[axis] + (n - 1) lambda; a point-to-point message crosses the shorter
way around the ring on the send/recv fit. The operations keep the data semantics (``tpusim.collectives.operations``);
this module is all the calibrated network adds to them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.operations import PointToPoint, operation
from tpusim.config import Calibration, OpCalibration
from tpusim.topology import ring_way
from tpusim.vocabulary import CollectiveOp

__all__ = ["CLOSED_FORMS", "calibrated_time", "channels"]

ClosedForm = Callable[[CollectiveCall, int, Calibration], float]
"""The time of a call on a logical axis of ``size`` > 1 chips under the calibration."""


def _fit_steps(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    """The authors' ring: alpha + steps (s / beta[axis] + lambda)."""
    return fit.launch_overhead + steps * (nbytes / fit.bandwidth[axis] + fit.step_latency)


def _fit_pipelined(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    """The authors' cut-through broadcast and reduce: alpha + s / beta[axis] + steps lambda."""
    return fit.launch_overhead + nbytes / fit.bandwidth[axis] + steps * fit.step_latency


def _unit(call: CollectiveCall, size: int) -> float:
    return operation(call.op).unit_bytes(call, size)


def _all_gather(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    return _fit_steps(calibration.all_gather, call.axis, size - 1, _unit(call, size))


def _reduce_scatter(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    return _fit_steps(calibration.reduce_scatter, call.axis, size - 1, _unit(call, size))


def _all_reduce(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    s = _unit(call, size)
    return (_fit_steps(calibration.reduce_scatter, call.axis, size - 1, s)
            + _fit_steps(calibration.all_gather, call.axis, size - 1, s))


def _all_to_all(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    # an assumption: the authors fitted no all-to-all; a ring of n-1 steps of one part on the AG fit
    return _fit_steps(calibration.all_gather, call.axis, size - 1, _unit(call, size))


def _broadcast(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    return _fit_pipelined(calibration.all_gather, call.axis, size - 1, _unit(call, size))


def _reduce(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    return _fit_pipelined(calibration.reduce_scatter, call.axis, size - 1, _unit(call, size))


def _endpoints(call: CollectiveCall, size: int) -> tuple[int, int]:
    semantics = operation(call.op)
    assert isinstance(semantics, PointToPoint)
    return semantics.endpoints(call, size)


def _point_to_point(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    src, dst = _endpoints(call, size)
    steps = ring_way(size, src, dst, closed=True)[1]  # the abstract ring has no one-way variant
    if steps == 0:
        return 0.0
    return _fit_steps(calibration.send_recv, calibration.send_recv_axis, steps, _unit(call, size))


CLOSED_FORMS: MappingProxyType[CollectiveOp, ClosedForm] = MappingProxyType({
    CollectiveOp.ALL_GATHER: _all_gather,
    CollectiveOp.REDUCE_SCATTER: _reduce_scatter,
    CollectiveOp.ALL_REDUCE: _all_reduce,
    CollectiveOp.ALL_TO_ALL: _all_to_all,
    CollectiveOp.BROADCAST: _broadcast,
    CollectiveOp.REDUCE: _reduce,
    CollectiveOp.SHIFT: _point_to_point,
    CollectiveOp.SEND_RECV: _point_to_point,
})
"""The closed form of every collective operation."""

def calibrated_time(call: CollectiveCall, size: int, calibration: Calibration) -> float:
    """The authors' closed form of ``call`` on a logical axis of ``size`` > 1 chips."""
    return CLOSED_FORMS[call.op](call, size, calibration)


def channels(call: CollectiveCall, size: int) -> tuple[str, ...]:
    """Directions of the abstract axis ring ``call`` holds: a message only the way it goes, the rest both."""
    semantics = operation(call.op)
    if not isinstance(semantics, PointToPoint):
        return ("+", "-")
    src, dst = semantics.endpoints(call, size)
    return ("+",) if ring_way(size, src, dst, closed=True)[0] else ("-",)
