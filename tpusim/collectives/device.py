"""The device API that SPMD chip programs are written against, in the spirit of JAX ``shard_map``.

A program is a generator: it yields the events this API returns and receives their values. Compute
(``matmul``, ``vector``) queues on the chip's MXU; collectives return a handle at once and complete in the
background, so a program overlaps communication with compute simply by waiting late. With tensors that
carry numpy data the same program computes real results.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.early import EarlyTransfer
from tpusim.collectives.handles import expected_of
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.hbm import SpanDone
from tpusim.engine.host import HostDirection
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import SimulationError
from tpusim.vocabulary import CollectiveOp

Program = Callable[..., Generator[simpy.Event, Any, Any]]


class AllValues(simpy.Event):
    """Succeeds with the list of its events' values once all of them have succeeded."""

    def __init__(self, env: simpy.Environment, events: Sequence[simpy.Event]) -> None:
        super().__init__(env)
        self._events = list(events)
        self._left = len(self._events)
        if self._left == 0:
            self.succeed([])
            return
        for event in self._events:
            if event.callbacks is None:  # already processed
                self._one_done(event)
            else:
                event.callbacks.append(self._one_done)

    def _one_done(self, event: simpy.Event) -> None:
        if not event.ok:
            failure = event.value
            self.fail(failure if isinstance(failure, Exception) else RuntimeError(repr(failure)))
            return
        self._left -= 1
        if self._left == 0 and not self.triggered:
            self.succeed([e.value for e in self._events])


class Device:
    """One chip as its program sees it: identity, compute and collectives."""

    def __init__(self, sim: Simulation, runtime: CollectiveRuntime, index: tuple[int, ...]) -> None:
        self.sim = sim
        self.env = sim.env
        self.runtime = runtime
        self.index = (index[0], index[1])  # (i, j) on the tensor mesh
        self.replica = index[2] if len(index) > 2 else 0  # d, on the data axis of a pod layout
        self.mesh = sim.mapping.shape
        self.chip_id = sim.mapping.chip(*index)
        self.chip = sim.chips[self.chip_id]
        self.model = sim.chip_model
        if sim.hbm is not None:
            sim.hbm.ledger.watch(self.chip_id)
        # transfers a step started early for the coming op (prefetch policies that start them early)
        self.prefetched: dict[EarlyTransfer, simpy.Event] = {}

    # -- identity ------------------------------------------------------------------------------------
    def rank(self, axis: int) -> int:
        """This chip's rank on logical axis ``axis`` (its position on that axis's ring)."""
        return self.index[axis] if axis < 2 else self.replica

    def size(self, axis: int) -> int:
        return self.mesh[axis] if axis < 2 else self.sim.mapping.size(axis)

    def tensor(self, shape: Sequence[int], dtype: str = "bf16", data: np.ndarray | None = None) -> Tensor:
        return Tensor(tuple(int(s) for s in shape), dtype, data)

    # -- compute -------------------------------------------------------------------------------------
    def _busy(self, seconds: float, name: str, flops: float, value: Any, hbm_bytes: float) -> simpy.Event:
        if self.sim.hardware.overlap_slowdown != 1.0 and self.runtime.in_flight.get(self.chip_id, 0):
            seconds *= self.sim.hardware.overlap_slowdown
        traced = self._traced(seconds, name, flops)
        hbm = self.sim.hbm
        if hbm is not None:
            return hbm.occupy(self.chip, seconds, hbm_bytes, flops, value, traced)
        start, end = self.chip.reserve_mxu(self.env.now, seconds, flops)
        if traced is not None:
            traced(start, end)
        return self.env.timeout(end - self.env.now, value)

    def _traced(self, seconds: float, name: str, flops: float) -> SpanDone | None:
        """What records a compute op of ``seconds`` uncontended in the tracer once it ran; None untraced."""
        tracer = self.sim.tracer
        if tracer is None:
            return None
        label = tracer.label(self.chip_id, name)  # the op issuing it, while it is current

        def traced(start: float, end: float) -> None:
            tracer.compute(self.chip_id, label, start, end, flops, end - start - self.chip.slowdown * seconds)

        return traced

    def matmul(
        self,
        a: Tensor | simpy.Event,
        b: Tensor | simpy.Event,
        acc: Tensor | simpy.Event | None = None,
        *,
        trans_a: bool = False,
        trans_b: bool = False,
        accumulate: bool = False,
        name: str = "gemm",
    ) -> simpy.Event:
        """``op(a) @ op(b)`` (+ ``acc``) on the MXU, op transposing where asked; the value is the product.

        ``accumulate`` times the product as one of several adding into a partial output kept in HBM (its
        accumulator read and written, docs/chip.md#gemm-time); the algorithm says so for every GeMM of such a
        loop, the first included, so that its twin charges one GeMM time per step.

        An operand may be a collective handle still in flight: the MXU starts now and the product is
        delivered when both the MXU and the operand are done. That is the authors' ``ideal`` prefetch
        accounting (a gather overlapping the GeMM that consumes it), not something hardware can do.
        """
        pending = [t for t in (a, b, acc) if isinstance(t, simpy.Event)]
        ta, tb = _shape_of(a, trans_a), _shape_of(b, trans_b)
        m, k = ta.shape
        k2, n = tb.shape
        if k != k2:
            raise ValueError(f"matmul shapes {ta.shape} @ {tb.shape} do not agree")
        seconds = self.model.gemm_time(m, n, k, in_bytes=ta.itemsize, out_bytes=ta.itemsize, accumulate=accumulate)
        flops = self.model.gemm_flops(m, n, k)
        moved = (self.model.gemm_hbm_bytes(m, n, k, in_bytes=ta.itemsize, out_bytes=ta.itemsize,
                                           accumulate=accumulate) if self.model.gemm_model == "roofline" else 0.0)
        if not pending:
            return self._busy(seconds, name, flops, _product(ta, tb, acc), moved)  # type: ignore[arg-type]
        busy = self._busy(seconds, name, flops, None, moved)
        done = self.env.event()

        def deliver(values: simpy.Event) -> None:
            arrived = values.value
            assert arrived is not None
            resolved: dict[int, Tensor] = {id(e): v for e, v in zip(pending, arrived[1:], strict=True)}
            lhs, rhs, base = (t if isinstance(t, Tensor | None) else resolved[id(t)] for t in (a, b, acc))
            assert lhs is not None and rhs is not None
            done.succeed(_product(lhs.transpose() if trans_a else lhs, rhs.transpose() if trans_b else rhs, base))

        AllValues(self.env, [busy, *pending]).callbacks.append(deliver)
        return done

    def vector(self, hbm_bytes: float, *, name: str = "vector", value: Any = None) -> simpy.Event:
        """HBM-bound elementwise work of ``hbm_bytes`` read plus written."""
        return self._busy(self.model.hbm_time(hbm_bytes), name, 0.0, value, hbm_bytes)

    def compute(self, flops: float, hbm_bytes: float, vector_ops: float = 0.0, *, name: str = "op",
                value: Any = None) -> simpy.Event:
        """Work bounded by the slowest of its MXU FLOPs, vector operations and HBM traffic (attention, norms...)."""
        return self._busy(self.model.op_time(flops, hbm_bytes, vector_ops), name, flops, value, hbm_bytes)

    # -- collectives ---------------------------------------------------------------------------------
    def _collective(self, op: CollectiveOp, tensor: Tensor, axis: int, **fields: Any) -> simpy.Event:
        axes = len(self.sim.mapping.axes)
        if axis not in range(axes):
            raise ValueError(f"axis {axis} is out of range; valid: {', '.join(str(a) for a in range(axes))}")
        fields.setdefault("ring", self.runtime.ring)
        fields.setdefault("chunks", self.runtime.chunks)
        call = CollectiveCall(op, axis, tensor.nbytes, **fields)
        return self.runtime.submit(self.chip_id, call, tensor)

    def all_gather(self, t: Tensor, axis: int, dim: int = 0, **opts: Any) -> simpy.Event:
        return self._collective(CollectiveOp.ALL_GATHER, t, axis, dim=dim, **opts)

    def gather_prefetchable(self, operand: str, t: Tensor, axis: int, dim: int) -> simpy.Event:
        """A data-independent all-gather: the one started early for this op if any, else a new one."""
        return self.take_prefetched(EarlyTransfer(operand, CollectiveOp.ALL_GATHER, axis, dim=dim), t)

    def take_prefetched(self, transfer: EarlyTransfer, t: Tensor) -> simpy.Event:
        """A data-independent transfer of ``t``: the one started early for this op if any, else a new one."""
        handle = self.prefetched.pop(transfer, None)
        return handle if handle is not None else self.start_transfer(transfer, t)

    def start_transfer(self, transfer: EarlyTransfer, t: Tensor, background: bool = False) -> simpy.Event:
        """Issue ``transfer`` of ``t`` now; ``background``: it only uses the link time on-demand traffic leaves
        (a prefetch, docs/network.md#prefetch-traffic-yields)."""
        if transfer.op is CollectiveOp.BROADCAST:
            return self.broadcast(t, transfer.axis, transfer.root, background=background)
        if transfer.op is CollectiveOp.SHIFT:
            return self.shift(t, transfer.axis, transfer.offset, background=background)
        return self.all_gather(t, transfer.axis, transfer.dim, background=background)

    def reduce_scatter(self, t: Tensor, axis: int, dim: int = 0, **opts: Any) -> simpy.Event:
        return self._collective(CollectiveOp.REDUCE_SCATTER, t, axis, dim=dim, **opts)

    def all_reduce(self, t: Tensor, axis: int, **opts: Any) -> simpy.Event:
        return self._collective(CollectiveOp.ALL_REDUCE, t, axis, **opts)

    def all_to_all(self, t: Tensor, axis: int, dim: int = 0, **opts: Any) -> simpy.Event:
        return self._collective(CollectiveOp.ALL_TO_ALL, t, axis, dim=dim, **opts)

    def broadcast(self, t: Tensor, axis: int, root: int, **opts: Any) -> simpy.Event:
        """Every member passes a tensor of the message's shape; the root's is the one delivered."""
        return self._collective(CollectiveOp.BROADCAST, t, axis, root=root, **opts)

    def reduce(self, t: Tensor, axis: int, root: int, **opts: Any) -> simpy.Event:
        """The root receives the sum; the others receive None."""
        return self._collective(CollectiveOp.REDUCE, t, axis, root=root, **opts)

    def shift(self, t: Tensor, axis: int, offset: int, **opts: Any) -> simpy.Event:
        """Data moves ``offset`` ranks forward along the axis ring: rank r receives from rank r - offset."""
        return self._collective(CollectiveOp.SHIFT, t, axis, offset=offset, **opts)

    def send_recv(self, t: Tensor, axis: int, src: int, dst: int, **opts: Any) -> simpy.Event:
        """Rank ``dst`` receives rank ``src``'s tensor; every member of the group takes part."""
        return self._collective(CollectiveOp.SEND_RECV, t, axis, root=src, offset=dst, **opts)

    # -- host memory ---------------------------------------------------------------------------------
    def host_copy(self, direction: HostDirection, nbytes: float) -> simpy.Event:
        """Copy ``nbytes`` between HBM and host memory over this chip's host link (``engine.host``), starting now
        or when the link's earlier copies in that direction are done; fires when the copy ends. The copy is DMA:
        it reads (to the host) or writes (from it) each byte in HBM once, charged as collective DMA is."""
        host = self.sim.host
        if host is None:
            raise SimulationError(f"{self.sim.hardware.name!r} has no host link (host.link_bandwidth) to copy over")
        start, end = host.reserve(self.chip_id, direction, nbytes, self.env.now)
        if self.sim.hbm is not None:
            self.sim.hbm.ledger.record(self.chip_id, start, end, nbytes)
        return self.env.timeout(end - self.env.now)

    def wait(self, *events: simpy.Event) -> simpy.Event:
        """An event whose value is the list of the given events' values."""
        return AllValues(self.env, events)


def _shape_of(t: Tensor | simpy.Event, transpose: bool = False) -> Tensor:
    tensor = expected_of(t)
    return tensor.transpose() if transpose else tensor


def _product(a: Tensor, b: Tensor, acc: Tensor | None) -> Tensor:
    data = None
    if a.data is not None and b.data is not None:
        data = a.data @ b.data
        if acc is not None and acc.data is not None:
            data = data + acc.data
    return Tensor((a.shape[0], b.shape[1]), a.dtype, data)


def run_spmd(
    sim: Simulation, runtime: CollectiveRuntime, program: Program, args_of: Callable[[Device], tuple[Any, ...]],
    *, only: Sequence[tuple[int, ...]] | None = None,
) -> dict[tuple[int, ...], Any]:
    """Run ``program(dev, *args_of(dev))`` on every chip of the logical mesh, every replica of a pod layout (or
    the ``only`` ones: (i, j) in the first replica, or (i, j, d))."""
    rows, cols = sim.mapping.shape
    processes = {}
    if only is None:
        only = runtime.representatives
    indices = list(only) if only is not None else [
        (i, j) if sim.mapping.data == 1 else (i, j, d)
        for d in range(sim.mapping.data) for i in range(rows) for j in range(cols)]
    for index in indices:
        dev = Device(sim, runtime, index)
        processes[index] = sim.start(dev.chip_id, program(dev, *args_of(dev)))
    sim.run()
    return {index: process.value for index, process in processes.items()}
