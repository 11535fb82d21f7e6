"""Closed-form building blocks for the algorithms' analytic twins: collective and GeMM times.

``CostModel`` answers "how long does this collective take on one group of that axis, uncontended" from
the network's collective twins and "how long does this local GeMM
take" from the chip model, so every algorithm's twin is written once for both kinds of network.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import Network
from tpusim.hardware import ChipModel
from tpusim.units import dtype_bytes
from tpusim.vocabulary import CollectiveOp, Ring


class NoClosedForm(Exception):
    """The twin does not cover this case (e.g. chunked multi-hop rings)."""


class CostModel:
    """Uncontended times on ``network``, the request's model of one hardware profile and one mesh mapping."""

    def __init__(self, network: Network, dtype: str = "bf16", *, compute_slowdown: float = 1.0) -> None:
        self.hardware = hardware = network.hardware
        self.compute_slowdown = compute_slowdown
        """Factor on every local product's time (a straggler's ``--slow-chip`` factor)."""
        self.mapping = network.mapping
        self.network = network
        self.chip = ChipModel(hardware.chip)
        self.itemsize = dtype_bytes(dtype)

    def size(self, axis: int) -> int:
        return self.mapping.shape[axis]

    def collective(self, op: CollectiveOp, axis: int, elements: float, **fields: Any) -> float:
        """Time of ``op`` whose caller passes a tensor of ``elements`` elements, on one group of ``axis``."""
        value = self.network.twin(CollectiveCall(op, axis, round(elements * self.itemsize), **fields))
        if value is None:
            raise NoClosedForm(f"no closed form for {op} on axis {axis}")
        return value

    def together(self, op: CollectiveOp, times: Sequence[float]) -> float:
        """When the last of several collectives of ``op`` issued at once on one chip, in this order, ends: at most
        the overlap limit of them run at a time, the next starting when the one ``limit`` places earlier ends
        (docs/network.md#overlap-limits)."""
        if not times:
            return 0.0
        limit = self.hardware.overlap_limits.of(op)
        if limit is None or limit >= len(times):
            return max(times)
        ends: list[float] = []
        for index, time in enumerate(times):
            ends.append((ends[index - limit] if index >= limit else 0.0) + time)
        return max(ends)

    def all_gather(self, axis: int, shard_elements: float) -> float:
        return self.collective(CollectiveOp.ALL_GATHER, axis, shard_elements)

    def reduce_scatter(self, axis: int, input_elements: float) -> float:
        """Reduce-scatter of a partial result of ``input_elements`` (the output shard is 1/n of it)."""
        return self.collective(CollectiveOp.REDUCE_SCATTER, axis, input_elements)

    def shift(self, axis: int, elements: float, offset: int = 1) -> float:
        return self.collective(CollectiveOp.SHIFT, axis, elements, offset=offset)

    def broadcast(self, axis: int, elements: float, root: int = 0) -> float:
        return self.collective(CollectiveOp.BROADCAST, axis, elements, root=root)

    def reduce(self, axis: int, elements: float, root: int = 0) -> float:
        return self.collective(CollectiveOp.REDUCE, axis, elements, root=root)

    def gemm(self, m: float, n: float, k: float, *, accumulate: bool = False) -> float:
        """A local product; ``accumulate``: one of several adding into a partial output kept in HBM."""
        return self.compute_slowdown * self.chip.gemm_time(int(m), int(n), int(k), in_bytes=self.itemsize,
                                                           out_bytes=self.itemsize, accumulate=accumulate)

    @property
    def ring(self) -> Ring:
        return Ring.BIDIRECTIONAL
