"""Closed-form building blocks for the algorithms' analytic twins: collective and GeMM times.

``CostModel`` answers "how long does this collective take on one group of that axis, uncontended" from
the collectives' twins (calibrated or physical, per the profile) and "how long does this local GeMM
take" from the chip model, so every algorithm's twin is written once for both kinds of network.
"""

from __future__ import annotations

from tpusim.collectives.analytic import calibrated_time, physical_time
from tpusim.collectives.ops import CollectiveCall
from tpusim.config import HardwareProfile
from tpusim.hardware import ChipModel
from tpusim.topology import MeshMapping
from tpusim.units import dtype_bytes
from tpusim.vocabulary import CollectiveOp, Ring


class NoClosedForm(Exception):
    """The twin does not cover this case (e.g. chunked multi-hop rings)."""


class CostModel:
    """Uncontended times on one hardware profile and one mesh mapping."""

    def __init__(self, hardware: HardwareProfile, mapping: MeshMapping, dtype: str = "bf16") -> None:
        self.hardware = hardware
        self.mapping = mapping
        self.chip = ChipModel(hardware.chip)
        self.itemsize = dtype_bytes(dtype)

    def size(self, axis: int) -> int:
        return self.mapping.shape[axis]

    def collective(self, op: CollectiveOp, axis: int, elements: float, **fields: object) -> float:
        """Time of ``op`` whose caller passes a tensor of ``elements`` elements, on one group of ``axis``."""
        n = self.mapping.shape[axis]
        call = CollectiveCall(op, axis, round(elements * self.itemsize), **fields)  # type: ignore[arg-type]
        if self.hardware.kind == "calibrated":
            assert self.hardware.calibration is not None
            return calibrated_time(call, n, self.hardware.calibration)
        axis_map = self.mapping.axes[axis]
        value = physical_time(call, n, closed=axis_map.closed, hops_per_step=axis_map.max_hops,
                              ici=self.hardware.ici)
        if value is None:
            raise NoClosedForm(f"no closed form for {op} on axis {axis}")
        return value

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

    def gemm(self, m: float, n: float, k: float) -> float:
        return self.chip.gemm_time(int(m), int(n), int(k), in_bytes=self.itemsize, out_bytes=self.itemsize)

    @property
    def ring(self) -> Ring:
        return Ring.BIDIRECTIONAL
