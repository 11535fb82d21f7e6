"""Closed-form twins of every collective: the contention-free reference the DES must reproduce.

Two families. ``physical_time`` follows reference §4.2 for rings and lines of directed links with
bandwidth ``B`` per direction, per-hop latency ``a`` and launch overhead ``o``, including chunked
store-and-forward pipelining. ``calibrated_time`` is the MeshSlice authors' per-axis model (reference
§4.1): alpha + (n-1)(s/beta[d] + lambda) for gathers and reductions, cut-through broadcast and reduce,
send/recv on beta_SR of the configured axis. On calibrated profiles the engine charges exactly these
durations, so the twin is the definition there and the DES adds only queueing.

Bytes follow ``CollectiveCall.unit_bytes``: the per-rank shard for all-gather, the output shard for
reduce-scatter and all-reduce, one part for all-to-all, the message for the rest.
"""

from __future__ import annotations

from tpusim.collectives.ops import CollectiveCall
from tpusim.config import Calibration, IciSpec, OpCalibration
from tpusim.vocabulary import CollectiveOp, Ring


def ring_distance(n: int, src: int, dst: int, closed: bool, forward_only: bool) -> int:
    """Ring steps from src to dst: the shorter way on a closed ring (or forward only), straight on a line."""
    if not closed:
        return abs(dst - src)
    ahead = (dst - src) % n
    return ahead if forward_only else min(ahead, n - ahead)


def _chain(nbytes: float, hops: int, chunks: int, bandwidth: float, latency: float) -> float:
    """One message through ``hops`` store-and-forward links in ``chunks`` pipelined chunks."""
    if hops == 0:
        return 0.0
    return (nbytes / bandwidth) * (1 + (hops - 1) / chunks) + hops * latency


def _ring(steps: int, nbytes: float, chunks: int, bandwidth: float, latency: float) -> float:
    """``steps`` one-hop ring steps of ``nbytes``, each chunk forwarded as soon as it arrives."""
    if steps == 0:
        return 0.0
    t = nbytes / chunks / bandwidth
    return (steps - 1) * max(t + latency, chunks * t) + chunks * t + latency


def physical_time(
    call: CollectiveCall, n: int, *, closed: bool, hops_per_step: int, ici: IciSpec
) -> float | None:
    """Contention-free time of ``call`` on one group, or None where no closed form is claimed.

    ``hops_per_step`` is the longest route between ring neighbours (1 on wrapped rings, snakes and lines);
    multi-hop embeddings, chunked all-to-all and chunked multi-hop shifts have no claimed form.
    """
    if n == 1:
        return 0.0
    bw, lat, o, c = ici.link_bandwidth, ici.hop_latency, ici.launch_overhead, call.chunks
    s = call.unit_bytes(n)
    h = hops_per_step
    if h > 1:
        # multi-hop embeddings (split axes) mix route lengths and share links between groups
        return None
    uni = call.ring is Ring.UNIDIRECTIONAL and closed
    op = call.op
    if op is CollectiveOp.ALL_REDUCE:
        rs = CollectiveCall(CollectiveOp.REDUCE_SCATTER, call.axis, call.nbytes, ring=call.ring, chunks=c)
        ag = CollectiveCall(CollectiveOp.ALL_GATHER, call.axis, call.nbytes // n, ring=call.ring, chunks=c)
        parts = [physical_time(x, n, closed=closed, hops_per_step=h, ici=ici) for x in (rs, ag)]
        return None if None in parts else parts[0] + parts[1]  # type: ignore[operator]
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
        if closed:
            return o + _ring(n - 1, s if uni else s / 2, c, bw, lat)
        if op is CollectiveOp.ALL_GATHER:
            return o + _ring(n - 1, s, c, bw, lat)
        # line reduce-scatter: chains to every rank start at the ends and queue on the end links
        longest = _chain(s, n - 1, c, bw, lat)
        shortest = (n - 2) * s / bw + _chain(s, 1, c, bw, lat)
        return o + max(longest, shortest)
    if op is CollectiveOp.ALL_TO_ALL:
        if c > 1 or h > 1:
            return None
        part = s
        if closed:
            ahead = n - 1 if uni else n // 2
            return o + sum(lat + (ahead - k) * part / bw for k in range(ahead))
        return o + (n - 1) * lat + n * (n - 1) / 2 * part / bw
    if op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
        root = call.root % n
        if closed:
            reach = n - 1 if uni else n // 2
        else:
            reach = max(root, n - 1 - root)
        return o + _chain(s, reach, c, bw, lat)
    if op in (CollectiveOp.SHIFT, CollectiveOp.SEND_RECV):
        if op is CollectiveOp.SHIFT:
            offset = call.offset % n
            if offset == 0:
                return 0.0
            if closed:
                reach = ring_distance(n, 0, offset, True, uni)
                shared = reach > 1
            else:
                reach = max(offset, n - offset)
                shared = 1 < offset < n - 1
            if shared and c > 1:
                # several messages then cross each link and their chunks interleave: no closed form claimed
                return None
        else:
            reach = ring_distance(n, call.root % n, call.offset % n, closed, uni)
            if reach == 0:
                return 0.0
        return o + _chain(s, reach, c, bw, lat)
    raise AssertionError(op)


def calibrated_time(call: CollectiveCall, n: int, calibration: Calibration) -> float:
    """The authors' closed form on logical axis ``call.axis`` of size ``n`` (reference §4.1)."""
    if n == 1:
        return 0.0
    d = call.axis
    s = call.unit_bytes(n)
    op = call.op
    if op is CollectiveOp.ALL_GATHER:
        return _steps(calibration.all_gather, d, n - 1, s)
    if op is CollectiveOp.REDUCE_SCATTER:
        return _steps(calibration.reduce_scatter, d, n - 1, s)
    if op is CollectiveOp.ALL_REDUCE:
        return _steps(calibration.reduce_scatter, d, n - 1, s) + _steps(calibration.all_gather, d, n - 1, s)
    if op is CollectiveOp.ALL_TO_ALL:
        # [ASSUME] the artifact has no all-to-all constants: a ring of n-1 steps of one part on the AG fit
        return _steps(calibration.all_gather, d, n - 1, s)
    if op is CollectiveOp.BROADCAST:
        return _pipelined(calibration.all_gather, d, n - 1, s)
    if op is CollectiveOp.REDUCE:
        return _pipelined(calibration.reduce_scatter, d, n - 1, s)
    if op is CollectiveOp.SHIFT:
        hops = ring_distance(n, 0, call.offset % n, True, False)
    elif op is CollectiveOp.SEND_RECV:
        hops = ring_distance(n, call.root % n, call.offset % n, True, False)
    else:
        raise AssertionError(op)
    if hops == 0:
        return 0.0
    return _steps(calibration.send_recv, calibration.send_recv_axis, hops, s)


def _steps(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    return fit.launch_overhead + steps * (nbytes / fit.bandwidth[axis] + fit.step_latency)


def _pipelined(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    return fit.launch_overhead + nbytes / fit.bandwidth[axis] + steps * fit.step_latency


def calibrated_channels(call: CollectiveCall, n: int) -> tuple[str, ...]:
    """Which directions of the abstract axis ring the operation holds."""
    if call.op in (CollectiveOp.SHIFT, CollectiveOp.SEND_RECV):
        src, dst = (0, call.offset % n) if call.op is CollectiveOp.SHIFT else (call.root % n, call.offset % n)
        ahead = (dst - src) % n
        return ("+",) if ahead <= n - ahead else ("-",)
    return ("+", "-")

