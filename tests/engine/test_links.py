"""LinkArray: serialization holds a link, latency is pipelined, batches serialize in order, exact accounting.

Bandwidths, sizes and latencies are powers of two so every expected time is exact in floating point.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpusim.engine.links import LinkArray

BW = 2.0**30  # bytes per second
LAT = 2.0**-20  # seconds
B = 2.0**20  # bytes: holds a link for 2**-10 s
HOLD = B / BW


def _links(count: int = 4) -> LinkArray:
    return LinkArray(np.full(count, BW), np.full(count, LAT))


def _send(links: LinkArray, ids: list[int], sizes: list[float], now: float) -> np.ndarray:
    return links.transmit(np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.float64), now)


def test_one_transfer() -> None:
    links = _links()
    arrival = _send(links, [2], [B], 0.5)
    assert arrival.tolist() == [0.5 + HOLD + LAT]
    assert links.free_at.tolist() == [0.0, 0.0, 0.5 + HOLD, 0.0]


def test_back_to_back_on_one_link_pipelines_latency() -> None:
    """The second transfer waits only for the first's serialization, not for its latency."""
    links = _links()
    first = _send(links, [1], [B], 0.0)
    second = _send(links, [1], [B], 0.0)
    assert second[0] - first[0] == HOLD
    assert (first[0], second[0]) == (HOLD + LAT, 2 * HOLD + LAT)


def test_transfer_ready_after_the_link_is_free_starts_when_ready() -> None:
    links = _links()
    _send(links, [0], [B], 0.0)
    later = _send(links, [0], [B], 1.0)
    assert later.tolist() == [1.0 + HOLD + LAT]


def test_transfer_ready_during_latency_of_previous_one_does_not_wait_for_it() -> None:
    links = _links()
    _send(links, [3], [B], 0.0)
    ready = HOLD + LAT / 2  # link already free, previous data still in flight
    assert _send(links, [3], [B], ready).tolist() == [ready + HOLD + LAT]


def test_distinct_links_in_one_batch_are_independent() -> None:
    links = _links()
    arrival = _send(links, [0, 1, 2, 3], [B, 2 * B, B / 2, 4 * B], 0.0)
    assert arrival.tolist() == [HOLD + LAT, 2 * HOLD + LAT, HOLD / 2 + LAT, 4 * HOLD + LAT]


def test_duplicate_links_in_one_batch_serialize_in_batch_order() -> None:
    links = _links()
    _send(links, [2], [B], 0.0)  # link 2 busy until HOLD
    arrival = _send(links, [2, 0, 2, 1, 2, 0], [B, B, 2 * B, B, B / 2, 4 * B], 0.0)
    assert arrival.tolist() == [
        2 * HOLD + LAT,  # link 2 after the earlier transfer
        HOLD + LAT,  # link 0 first
        4 * HOLD + LAT,  # link 2 second
        HOLD + LAT,  # link 1
        4.5 * HOLD + LAT,  # link 2 third
        5 * HOLD + LAT,  # link 0 second
    ]
    assert links.free_at.tolist() == [5 * HOLD, HOLD, 4.5 * HOLD, 0.0]


@pytest.mark.parametrize("count", [10, 200])  # both the small-batch and the numpy duplicate checks
def test_large_batches_match_one_by_one(count: int) -> None:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 8, size=count)
    sizes = rng.integers(1, 64, size=count).astype(np.float64) * 2.0**14
    batched, single = _links(8), _links(8)
    together = batched.transmit(ids, sizes, 0.25)
    alone = [single.transmit(ids[k : k + 1], sizes[k : k + 1], 0.25)[0] for k in range(count)]
    assert together.tolist() == alone
    assert batched.free_at.tolist() == single.free_at.tolist()
    assert batched.bytes.tolist() == single.bytes.tolist()
    assert batched.busy.tolist() == single.busy.tolist()


def test_accounting() -> None:
    links = _links()
    _send(links, [0, 0, 1], [B, 3 * B, B], 0.0)
    _send(links, [1, 3], [2 * B, B / 4], 0.0)
    assert links.bytes.tolist() == [4 * B, 3 * B, 0.0, B / 4]
    assert links.busy.tolist() == [4 * HOLD, 3 * HOLD, 0.0, HOLD / 4]
    assert links.transfers == 5
    assert links.utilisation(8 * HOLD).tolist() == [0.5, 0.375, 0.0, 1 / 32]
    assert links.utilisation(0.0).tolist() == [0.0] * 4


def test_per_link_bandwidth_and_latency() -> None:
    links = LinkArray(np.array([BW, BW / 2]), np.array([LAT, 4 * LAT]))
    assert _send(links, [0, 1], [B, B], 0.0).tolist() == [HOLD + LAT, 2 * HOLD + 4 * LAT]


def test_transfer_hook_sees_every_span() -> None:
    links = _links()
    spans: list[tuple[list[int], list[float], list[float]]] = []
    links.on_transfer = lambda ids, start, end: spans.append((ids.tolist(), start.tolist(), end.tolist()))
    _send(links, [1, 1], [B, B], 0.0)
    assert spans == [([1, 1], [0.0, HOLD], [HOLD, 2 * HOLD])]


def test_background_transfer_is_pre_empted_by_foreground_and_resumes_after_it() -> None:
    """A background transfer holds the link from 0; a foreground one ready halfway takes the link at once and the
    background's rest follows it: it ends one foreground hold later than alone."""
    links = _links()
    reservation = links.transmit_background(0, B, 0.0)
    assert links.background_arrival(reservation) == HOLD + LAT
    foreground = links.transmit_one(0, B, HOLD / 2)
    assert foreground == HOLD / 2 + HOLD + LAT  # as if the background were absent
    assert links.background_arrival(reservation) == 2 * HOLD + LAT
    assert links.busy[0] == 2 * HOLD and links.bytes[0] == 2 * B


def test_background_waits_for_queued_foreground_and_ended_background_is_not_pushed() -> None:
    links = _links()
    _send(links, [1], [B], 0.0)  # foreground holds link 1 until HOLD
    queued = links.transmit_background(1, B, 0.0)
    assert links.background_arrival(queued) == 2 * HOLD + LAT
    later = links.transmit_one(1, B, 3 * HOLD)  # after the background ended: it is not pushed
    assert later == 4 * HOLD + LAT
    assert links.background_arrival(queued) == 2 * HOLD + LAT
    second = links.transmit_background(1, B, 3 * HOLD)  # behind the foreground queued at 3 HOLD
    assert links.background_arrival(second) == 5 * HOLD + LAT
