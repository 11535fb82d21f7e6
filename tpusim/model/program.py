"""The one per-chip program of a training step, and running a sequence of its ops on a network.

Every chip runs the same sequence of ops: the once-per-step ops before the blocks, each block forward, the
ops between the passes, each block backward in reverse, the ops after; in a D x R x C layout the data-parallel
collectives join that sequence where ``tpusim.model.data_parallel`` says. A distributed GeMM runs its
algorithm's own chip program; local work runs on the MXU or against HBM; LayerNorm statistics are one small
all-reduce (XLA fuses the row means and mean-squares). Under ``previous-op`` prefetch the coming GeMM's
data-independent gathers start when the op before it starts; under ``previous-gemm`` when the GeMM before it
starts, queued behind that GeMM's own collectives; under ``window`` when the op ``window`` places earlier starts,
within a budget of gathered bytes. The tuner prices the non-FF part of a step with this same
program, so the two never diverge.

Offloaded activations (``HostSchedule``) travel on the chip's host link while compute goes on: a tensor's copy to
the host starts as the forward op producing it ends (the block's input as the block starts); the copies back of
block l's tensors are issued as the backward pass of block l + 1 starts (one block ahead; the last block's as its
own backward starts), each once its copy out has ended, and the first backward op of block l that reads a tensor
waits until it is back.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.accounting import RunAccount, account
from tpusim.collectives.dcn import DcnFabric
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.early import EarlyTransfer
from tpusim.collectives.link_busy import run_link_busy
from tpusim.collectives.network import Network
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.host import HostDirection
from tpusim.engine.lines import LineSymmetry, with_lines
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.engine.trace import Tracer
from tpusim.errors import InfeasibleError
from tpusim.model.data_parallel import (
    GRADIENTS,
    PART_JOIN,
    SYNCED_DTYPE,
    WEIGHTS,
    DataParallelPlan,
    DataSyncOp,
    DataWaitOp,
)
from tpusim.model.labels import op_label
from tpusim.model.layer import OPTIMIZER, RECOMPUTE_PREFIX, GemmOp, LocalOp, NormStatsOp, Op, Pass
from tpusim.model.plan import PreparedGemm, StepPlan
from tpusim.model.remat import HostCopy
from tpusim.topology.mapping import DATA_AXIS
from tpusim.units import dtype_bytes, parse_size
from tpusim.vocabulary import EARLY_PREFETCH, CollectiveOp, Prefetch

__all__ = ["Entry", "HostSchedule", "HostTime", "OpsRun", "PrefetchWindow", "held_panels", "panel_peak",
           "prefetch_budget", "run_ops", "step_sequence"]

StepOp = Op | DataSyncOp | DataWaitOp
Entry = tuple[StepOp, int]
"""One op of the sequence and the layer it belongs to (-1: once per step)."""

Timeline = list[tuple[str, int, float, float]]
"""(op name, layer, start, end) of every op a chip ran."""


def step_sequence(plan: StepPlan, layers: int) -> list[Entry]:
    """The ops of a step with ``layers`` blocks, in the order every chip runs them."""
    data = plan.data
    if data is None:
        sequence: list[Entry] = [(op, -1) for op in plan.before]
        sequence += [(op, layer) for layer in range(layers) for op in plan.forward]
        sequence += [(op, -1) for op in plan.middle]
        sequence += [(op, layer) for layer in reversed(range(layers)) for op in plan.backward]
        return sequence + [(op, -1) for op in plan.after]
    # each collective's weights are gathered one ahead, and its gradients leave with its last backward-weight GeMM
    embedding = data.embedding_elements > 0
    sequence = [(data.weights(-1), -1)] if data.gathers_forward and embedding else []
    forward: list[Entry] = [(op, layer) for layer in range(layers) for op in plan.forward]
    backward: list[Entry] = [(op, layer) for layer in reversed(range(layers)) for op in plan.backward]
    forward_ops = _gathered_pass(data, forward) if data.gathers_forward else forward
    backward_ops = _gathered_pass(data, backward) if data.gathers_backward else backward
    if data.gathers_forward:  # the pass's first gather, issued before anything runs
        sequence.append(forward_ops.pop(0))
    if data.gathers_forward and embedding:
        sequence.append((DataWaitOp(WEIGHTS, -1), -1))
    sequence += [(op, -1) for op in plan.before]
    sequence += forward_ops
    if data.gathers_backward:
        sequence.append(backward_ops.pop(0))
    sequence += [(op, -1) for op in plan.middle]
    for op, layer in backward_ops:
        sequence.append((op, layer))
        if data.syncs_gradients and isinstance(op, GemmOp) and op.which is Pass.BACKWARD_WEIGHT:
            part = data.part_of(op.layer)
            if part.split(PART_JOIN)[0] == op.layer:  # the bucket leaves with its last gradient (backward order)
                sequence.append((data.gradients(layer, part), layer))
    # the embedding's gradient is complete once its own backward (in ``after``) has run; the update waits for all
    update = [op for op in plan.after if op.name == OPTIMIZER]
    sequence += [(op, -1) for op in plan.after if op.name != OPTIMIZER]
    if data.syncs_gradients:
        if embedding:
            sequence.append((data.gradients(-1), -1))
        sequence.append((DataWaitOp(GRADIENTS, None), -1))
    return sequence + [(op, -1) for op in update]


def _weight_uses(data: DataParallelPlan, ops: Sequence[Entry]) -> list[tuple[int, tuple[int, str]]]:
    """(position, (block, collective)) of every op of a pass that reads a gathered weight matrix: its forward
    GeMMs (recomputed ones too) and backward-data GeMMs; a backward-weight GeMM reads activations and gradients
    only. The collective is the one of ``data.parts`` that gathers the matrix."""
    return [(index, (layer, data.part_of(op.layer.removeprefix(RECOMPUTE_PREFIX))))
            for index, (op, layer) in enumerate(ops) if isinstance(op, GemmOp) and op.which is not Pass.BACKWARD_WEIGHT]


def _gathered_pass(data: DataParallelPlan, ops: list[Entry]) -> list[Entry]:
    """``ops`` with each collective's weights gathered one ahead: the pass's first gather first, then each next
    one's as the one before it is first used, and a wait before every first use."""
    uses = _weight_uses(data, ops)
    seen: set[tuple[int, str]] = set()
    first = []
    for k, (_, unit) in enumerate(uses):
        if unit not in seen:
            seen.add(unit)
            first.append(k)
    # op position -> the unit whose gather starts there: the pass's first one before anything, each next one as
    # the one before it is first used
    issue_at = {uses[first[n - 1]][0] if n else -1: uses[k][1] for n, k in enumerate(first)}
    waits = {uses[k][0]: uses[k][1] for k in first}
    out: list[Entry] = []
    if -1 in issue_at:
        block, part = issue_at[-1]
        out.append((data.weights(block, part), block))
    for index, (op, layer) in enumerate(ops):
        if index in waits:
            block, part = waits[index]
            out.append((DataWaitOp(WEIGHTS, block, part), layer))
        if index in issue_at:
            block, part = issue_at[index]
            out.append((data.weights(block, part), layer))
        out.append((op, layer))
    return out


@dataclass(frozen=True)
class PrefetchWindow:
    """How far ahead a step starts data-independent gathers: ``ops`` places, while the gathered buffers issued
    early and not yet consumed stay within ``budget`` bytes (None: no bound). Applies to GeMMs whose policy is
    ``previous-op`` (always one op, no budget) or ``window``."""

    ops: int = 1
    budget: float | None = None


Gathers = dict[EarlyTransfer, simpy.Event]


def held_panels(gemms: Sequence[tuple[float, float] | None], prefetch: Prefetch, window: PrefetchWindow) -> float:
    """The most bytes of operand panels a chip holds at once over a pass that repeats ``gemms`` (each op's
    (panel bytes, early bytes) if it is a GeMM, else None; ``GemmAlgorithm.panel_bytes`` and ``early_bytes``): one
    GeMM runs at a time, holding its own panels and whatever the prefetch policy has started early for the GeMMs
    ahead, as ``_start_early_gathers`` and ``_gather_for_next_gemm`` start them. ``previous-op``: the next op's
    where it is a GeMM; ``previous-gemm``: the next GeMM's; ``window``: those of the GeMMs within ``window.ops``
    places, unless a budget bounds them (it is set aside from the capacity already, ``model.memory``). The pass
    wraps around: the last GeMM of a layer's backward is followed by the first of the layer below's."""
    count = len(gemms)
    most = 0.0
    for index, entry in enumerate(gemms):
        if entry is None:
            continue
        ahead: range | list[int] = []
        if prefetch is Prefetch.PREVIOUS_OP:
            ahead = [index + 1]
        elif prefetch is Prefetch.PREVIOUS_GEMM:
            ahead = [next(place for place in range(index + 1, index + count + 1) if gemms[place % count] is not None)]
        elif prefetch is Prefetch.WINDOW and window.budget is None:
            ahead = range(index + 1, index + window.ops + 1)
        early = sum(coming[1] for place in ahead if (coming := gemms[place % count]) is not None)
        most = max(most, entry[0] + early)
    return most


def panel_peak(plan: StepPlan, window: PrefetchWindow) -> float:
    """The panel bytes a chip holds at the step's busiest moment, the backward pass of the last layer: the most
    over its GeMMs (recomputed forward ones and backward ones) of ``held_panels`` (docs/workloads.md#working-set)."""
    gemms: list[tuple[float, float] | None] = []
    for op in plan.backward:
        job = plan.gemms[op.name] if isinstance(op, GemmOp) else None
        gemms.append(None if job is None else (job.algorithm.panel_bytes(job.ctx), job.algorithm.early_bytes(job.ctx)))
    return held_panels(gemms, plan.params.prefetch, window)


@dataclass(frozen=True)
class HostSchedule:
    """A block's offloaded tensors and the ops that pace their copies (see the module docstring)."""

    copies: tuple[HostCopy, ...]
    block_start: str  # the block's first forward op: the block's input leaves as it starts
    backward_start: str  # the block's first backward op: the copies back of the block below are issued then

    @staticmethod
    def of(plan: StepPlan) -> HostSchedule | None:
        """The schedule of ``plan``'s offloaded tensors; None where nothing is offloaded."""
        if not plan.offload:
            return None
        return HostSchedule(plan.offload, plan.forward[0].name, plan.backward[0].name)


class _HostTraffic:
    """One chip's host copies in flight, by (tensor, block), and the seconds its program waited for them."""

    def __init__(self, dev: Device, schedule: HostSchedule) -> None:
        self.dev = dev
        self.schedule = schedule
        self.out: dict[tuple[str, int], simpy.Event] = {}
        self.back: dict[tuple[str, int], simpy.Event] = {}
        self.fetched: set[int] = set()
        self.waited = 0.0

    def before(self, name: str, layer: int) -> Generator[simpy.Event, Any, None]:
        """As op ``name`` of block ``layer`` is about to start: copies it starts, and those it waits for."""
        if layer < 0:
            return
        if name == self.schedule.block_start:
            self._send(None, layer)
        if name == self.schedule.backward_start:
            for block in (layer, layer - 1):
                if block >= 0 and block not in self.fetched:
                    self._fetch(block)
        needed = [self.back.pop((copy.tensor, layer)) for copy in self.schedule.copies if copy.read_by == name]
        if needed:
            start = self.dev.env.now
            yield self.dev.wait(*needed)
            self.waited += self.dev.env.now - start

    def after(self, name: str, layer: int) -> None:
        """As op ``name`` of block ``layer`` has ended: the copies out of the tensors it produced."""
        if layer >= 0:
            self._send(name, layer)

    def _send(self, writer: str | None, layer: int) -> None:
        for copy in self.schedule.copies:
            if copy.written_after == writer:
                self.out[(copy.tensor, layer)] = self.dev.host_copy(HostDirection.TO_HOST, copy.nbytes)

    def _fetch(self, layer: int) -> None:
        self.fetched.add(layer)
        for copy in self.schedule.copies:
            self.back[(copy.tensor, layer)] = self.dev.env.process(self._copy_back(copy, layer))

    def _copy_back(self, copy: HostCopy, layer: int) -> Generator[simpy.Event, Any, None]:
        yield self.out.pop((copy.tensor, layer))  # a tensor comes back only once it has reached the host
        yield self.dev.host_copy(HostDirection.FROM_HOST, copy.nbytes)


def prefetch_budget(prefetch: Prefetch, budget: int | str | None) -> float | None:
    """The window policy's budget in bytes; a budget under any other policy is a user error."""
    if budget is None:
        return None
    if prefetch is not Prefetch.WINDOW:
        raise InfeasibleError(f"--prefetch-budget applies to --prefetch window; the prefetch policy is {prefetch}")
    return parse_size(budget, allow_zero=True)


def _start_early_gathers(dev: Device, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm], index: int,
                         window: PrefetchWindow, issued: dict[int, Gathers], held: dict[int, float]) -> None:
    """As op ``index`` starts: the gathers of the GeMMs ahead within the window, in program order, while their
    gathered buffers fit the budget."""
    for ahead in range(index + 1, min(index + window.ops, len(sequence) - 1) + 1):
        coming = sequence[ahead][0]
        if ahead in issued or not isinstance(coming, GemmOp):
            continue
        job = gemms[coming.name]
        policy = job.ctx.params.prefetch
        if policy not in EARLY_PREFETCH or policy is Prefetch.PREVIOUS_GEMM or (
                policy is Prefetch.PREVIOUS_OP and ahead != index + 1):
            continue
        if not _issue_gathers(dev, job, ahead, window.budget if policy is Prefetch.WINDOW else None, issued, held,
                              sequence[ahead]):
            return  # in order: a later GeMM never overtakes one that does not fit yet


def _issue_gathers(dev: Device, job: PreparedGemm, ahead: int, budget: float | None, issued: dict[int, Gathers],
                   held: dict[int, float], entry: Entry) -> bool:
    """Start the data-independent gathers of the GeMM at place ``ahead`` (``entry`` of the sequence); False where
    they would exceed ``budget`` bytes of early-gathered buffers."""
    transfers = job.algorithm.early_transfers(dev, job.ctx, job.x, job.w)
    if not transfers:
        return True
    size = sum(transfer.received_bytes(tensor.nbytes, dev.size(transfer.axis)) for transfer, tensor in transfers)
    if budget is not None and sum(held.values()) + size > budget:
        return False
    tracer = dev.sim.tracer
    current = tracer.scope.get(dev.chip_id, "") if tracer is not None else ""
    if tracer is not None:  # traced as the coming GeMM's, issued early
        tracer.scope[dev.chip_id] = f"{op_label(*entry)} prefetch"
    # a prefetch is background traffic: it uses only what the on-demand collectives leave of each link
    issued[ahead] = {transfer: dev.start_transfer(transfer, tensor, background=True) for transfer, tensor in transfers}
    if tracer is not None:
        tracer.scope[dev.chip_id] = current
    held[ahead] = size
    return True


def _gather_for_next_gemm(dev: Device, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm], index: int,
                          issued: dict[int, Gathers], held: dict[int, float]) -> None:
    """As the GeMM at ``index`` starts: once its own collectives are issued (a zero delay, so they queue first
    under the overlap limit), the gathers of the next GeMM if its policy is ``previous-gemm``."""
    ahead = next((i for i in range(index + 1, len(sequence)) if isinstance(sequence[i][0], GemmOp)), None)
    if ahead is None:
        return
    job = gemms[sequence[ahead][0].name]
    if job.ctx.params.prefetch is not Prefetch.PREVIOUS_GEMM:
        return

    def issue(_: simpy.Event) -> None:
        _issue_gathers(dev, job, ahead, None, issued, held, sequence[ahead])

    dev.env.timeout(0).callbacks.append(issue)


def step_program(dev: Device, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm], timeline: Timeline,
                 window: PrefetchWindow, host: _HostTraffic | None = None) -> Generator[simpy.Event, Any, None]:
    """The per-chip program: run ``sequence`` in order, recording each op's span in ``timeline`` (and moving the
    offloaded tensors with ``host``)."""
    run = _ChipRun(dev, sequence, gemms)
    tracer = dev.sim.tracer
    for index, (op, layer) in enumerate(sequence):
        start = dev.env.now
        if tracer is not None:
            tracer.scope[dev.chip_id] = op_label(op, layer)
        _start_early_gathers(dev, sequence, gemms, index, window, run.issued, run.held)
        if host is not None:
            yield from host.before(op.name, layer)
        run.index = index
        yield from op.accept(run)
        timeline.append((op.name, layer, start, dev.env.now))
        if host is not None:
            host.after(op.name, layer)


class _ChipRun:
    """One chip's run of a step program: each op kind's behaviour (``op_kinds.OpVisitor``), and the state the ops
    share as it goes: the gathers started early, the bytes they hold, the data-parallel collectives in flight."""

    def __init__(self, dev: Device, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm]) -> None:
        self.dev = dev
        self.sequence = sequence
        self.gemms = gemms
        self.index = 0  # the op running
        self.issued: dict[int, Gathers] = {}  # by op index: the gathers started ahead of its GeMM
        self.held: dict[int, float] = {}  # by op index: the bytes those gathers hold
        self.synced: dict[tuple[str, int, str | None], simpy.Event] = {}  # in flight, by kind, block and matrix

    def gemm(self, op: GemmOp) -> Generator[simpy.Event, Any, None]:
        dev, job = self.dev, self.gemms[op.name]
        dev.prefetched = self.issued.pop(self.index, {})
        _gather_for_next_gemm(dev, self.sequence, self.gemms, self.index, self.issued, self.held)
        yield from job.algorithm.program(dev, job.ctx, job.x, job.w)
        dev.prefetched = {}
        self.held.pop(self.index, None)

    def local(self, op: LocalOp) -> Generator[simpy.Event, Any, None]:
        yield self.dev.compute(op.flops, op.hbm_bytes, op.vector_ops, name="")  # traced by the op's label alone

    def norm_stats(self, op: NormStatsOp) -> Generator[simpy.Event, Any, None]:
        if self.dev.size(op.axis) > 1 and op.elements:
            yield self.dev.all_reduce(Tensor((2 * op.elements,), op.dtype), op.axis)

    def data_sync(self, op: DataSyncOp) -> Generator[simpy.Event, Any, None]:
        self.synced[(op.name, op.target, op.part)] = _sync(self.dev, op)
        yield from ()  # started: the program goes on at once

    def data_wait(self, op: DataWaitOp) -> Generator[simpy.Event, Any, None]:
        done = [key for key in self.synced if key[0] == op.key and op.target in (None, key[1])
                and op.part in (None, key[2])]
        if done:
            yield self.dev.wait(*(self.synced.pop(key) for key in done))


def _sync(dev: Device, op: DataSyncOp) -> simpy.Event:
    """Start the data-parallel collective ``op``: a gradient bucket over the data axis, then (where it has some)
    across slices over DCN; a weight gather across sharding slices first, then over the data axis."""
    nbytes = op.dcn_elements * dtype_bytes(SYNCED_DTYPE)
    if op.name == WEIGHTS and op.dcn_elements:
        across = dev.runtime.dcn_collective(dev.chip_id, op.dcn_collective, nbytes, None)
        return across if op.collective is None else dev.runtime.sim.env.process(_then_ici(dev, op, across))
    ici = _sync_ici(dev, op) if op.collective is not None else None
    if not op.dcn_elements:
        assert ici is not None, "a data-parallel op moves something"
        return ici
    return dev.runtime.dcn_collective(dev.chip_id, op.dcn_collective, nbytes, ici)


def _then_ici(dev: Device, op: DataSyncOp, first: simpy.Event) -> Generator[simpy.Event, Any, None]:
    """``op`` over the data axis once ``first`` is done (the shard it gathers is complete only then)."""
    yield first
    yield _sync_ici(dev, op)


def _sync_ici(dev: Device, op: DataSyncOp) -> simpy.Event:
    degree = dev.size(DATA_AXIS)
    if op.collective is CollectiveOp.REDUCE_SCATTER:
        return dev.reduce_scatter(Tensor((degree, op.elements // degree), SYNCED_DTYPE), DATA_AXIS, 0)
    if op.collective is CollectiveOp.ALL_GATHER:
        return dev.all_gather(Tensor((op.elements,), SYNCED_DTYPE), DATA_AXIS, 0)
    return dev.all_reduce(Tensor((op.elements,), SYNCED_DTYPE), DATA_AXIS)


@dataclass(frozen=True)
class HostTime:
    """Seconds one chip's host link was held in each direction, and seconds its program waited for copies back."""

    to_host: float
    from_host: float
    waited: float


@dataclass(frozen=True)
class OpsRun:
    """A simulated sequence of ops: the run's account and the critical chip's timeline."""

    account: RunAccount
    timeline: Timeline
    link_busy: np.ndarray | None = None  # seconds per directed link, where asked for (``run_ops``)
    host: HostTime | None = None  # the critical chip's host copies, where a ``HostSchedule`` was run
    events: int = 0  # the events the run processed (what its memory grows with, ``engine.footprint``)
    # those the link programs brought, and a cost probe's had each group run apart (``CountingEnvironment``)
    link_events: tuple[int, int] = (0, 0)


def run_ops(network: Network, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm], *,
            representatives: Sequence[tuple[int, ...]] | None = None,
            chip_slowdown: dict[int, float] | None = None, window: PrefetchWindow = PrefetchWindow(),
            keep_link_busy: bool = False, tracer: Tracer | None = None,
            host: HostSchedule | None = None, dcn_slices: int = 1, chip: int | None = None) -> OpsRun:
    """Every chip (or the ``representatives``) runs ``sequence``; the account of the run, of ``chip`` where given
    (else of the chip that finished last; ``accounting.account``), with every directed
    link's busy seconds where ``keep_link_busy``; its spans into ``tracer`` where given; the critical chip's host
    copies where ``host`` offloads tensors). ``dcn_slices`` > 1: the slice simulated is one of that many joined
    over the profile's DCN (representative chips stand for their hosts, ``tpusim.collectives.dcn``). A
    symmetric run without per-link outputs leaves out the dimensional lines that run like a kept one
    (``tpusim.engine.lines``)."""
    run = partial(_run_ops, network, sequence, gemms, representatives=representatives, chip_slowdown=chip_slowdown,
                  window=window, keep_link_busy=keep_link_busy, tracer=tracer, host=host, dcn_slices=dcn_slices,
                  chip=chip)
    if representatives is None or keep_link_busy or tracer is not None:
        return run(None)
    return with_lines(run, network.context.memo, network.mapping)


def _run_ops(network: Network, sequence: Sequence[Entry], gemms: dict[str, PreparedGemm],
             lines: LineSymmetry | None, *, representatives: Sequence[tuple[int, ...]] | None,
             chip_slowdown: dict[int, float] | None, window: PrefetchWindow, keep_link_busy: bool,
             tracer: Tracer | None, host: HostSchedule | None, dcn_slices: int, chip: int | None) -> OpsRun:
    sim = Simulation(network, chip_slowdown=chip_slowdown, tracer=tracer, lines=lines)
    if host is not None and sim.host is None:
        raise InfeasibleError(f"remat_offload needs a host link: hardware profile {network.hardware.name!r} has no "
                              "host.link_bandwidth")
    runtime = CollectiveRuntime(sim, network, representatives=representatives)
    if dcn_slices > 1:
        dcn = network.hardware.slice_network
        if dcn is None:
            raise ValueError("DCN slices need a profile with a dcn block")
        # a slice smaller than a host (a v4 slice of one chip) has only its own chips on its host
        runtime.dcn = DcnFabric(sim.env, dcn, dcn_slices, on_span=runtime.dcn_spent,
                                chips_per_host=min(dcn.chips_per_host, network.mapping.num_chips),
                                stand_in=representatives is not None)
    timelines: dict[int, Timeline] = {}
    traffic: dict[int, _HostTraffic] = {}

    def args(dev: Device) -> tuple[Sequence[Entry], dict[str, PreparedGemm], Timeline, PrefetchWindow,
                                   _HostTraffic | None]:
        timelines[dev.chip_id] = []
        if host is not None:
            traffic[dev.chip_id] = _HostTraffic(dev, host)
        return (sequence, gemms, timelines[dev.chip_id], window, traffic.get(dev.chip_id))

    run_spmd(sim, runtime, step_program, args)
    symmetric = representatives is not None
    result = account(sim, runtime, symmetric=symmetric, chip=chip)
    busy = run_link_busy(runtime, symmetric=symmetric) if keep_link_busy else None
    copies = None
    if sim.host is not None and result.critical in traffic:
        critical = result.critical
        copies = HostTime(sim.host.busy(critical, HostDirection.TO_HOST),
                          sim.host.busy(critical, HostDirection.FROM_HOST), traffic[critical].waited)
    return OpsRun(result, timelines.get(result.critical, []), busy, copies, sim.env.events_processed,
                  (sim.env.link_events, sim.env.link_events_apart))
