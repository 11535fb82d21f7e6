"""Simulating one collective on every group of a logical axis, with its twin and its link accounting.

This is what ``tpusim collective`` and ``tpusim.collective(...)`` run: each chip of the mesh issues the
same operation on the chosen axis; the result reports the simulated time, the closed-form twin and what
the links carried. ``--bytes`` means the whole tensor of one group for all-gather, reduce-scatter,
all-reduce and all-to-all, and the message for broadcast, reduce, shift and send/recv.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.link_busy import LinkBusy
from tpusim.collectives.network import Network
from tpusim.collectives.operations import operation
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.result import ResultMixin
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.engine.trace import Tracer
from tpusim.errors import InfeasibleError
from tpusim.vocabulary import CollectiveOp, Ring

GROUP_TENSOR_OPS = (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE,
                    CollectiveOp.ALL_TO_ALL)


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective experiment on one logical axis."""

    op: CollectiveOp
    axis: int
    nbytes: int
    ring: Ring = Ring.BIDIRECTIONAL
    chunks: int = 0  # 0: the network's choice (one per message on rings, the fastest count for broadcasts)
    root: int = 0
    offset: int = 1  # shift distance, or send-recv destination rank


@dataclass
class CollectiveResult(ResultMixin):
    """What one simulated collective produced (see docs/results.md#result-fields)."""

    op: str
    axis: int
    group_size: int
    groups: int
    bytes: int
    unit_bytes: float
    ring: str
    chunks: int
    schedule: str
    hardware: str
    fidelity: str
    time_s: float
    analytic_time_s: float | None
    bytes_sent: float | None
    max_link_bytes: float | None
    max_link_utilisation: float | None
    transfers: int
    events: int
    mapping: dict[str, Any]
    notes: list[str] = field(default_factory=list)



def check_spec(spec: CollectiveSpec, n: int) -> None:
    """Ranks named by the spec must exist on the axis."""
    named = []
    if spec.op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE, CollectiveOp.SEND_RECV):
        named.append(("--root", spec.root))
    if spec.op is CollectiveOp.SEND_RECV:
        named.append(("--offset", spec.offset))
    for flag, rank in named:
        if not 0 <= rank < n:
            raise InfeasibleError(f"{flag} {rank} is not a rank of axis {spec.axis}, which has {n} chips; "
                                  f"valid: 0..{n - 1}")


def member_tensor(spec: CollectiveSpec, n: int) -> Tensor:
    """The tensor each member passes: a 1-byte-element buffer of the right size."""
    check_spec(spec, n)
    per_member = spec.nbytes
    if spec.op in (CollectiveOp.ALL_GATHER, CollectiveOp.ALL_TO_ALL):
        if spec.nbytes % n or (spec.op is CollectiveOp.ALL_TO_ALL and spec.nbytes % (n * n)):
            parts = n if spec.op is CollectiveOp.ALL_GATHER else n * n
            raise InfeasibleError(
                f"--bytes {spec.nbytes} does not split into {parts} equal parts for {spec.op} over "
                f"{n} chips; use a multiple of {parts}"
            )
        per_member = spec.nbytes // n
    elif spec.op in (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE) and spec.nbytes % n:
        raise InfeasibleError(
            f"--bytes {spec.nbytes} does not split into {n} equal shards for {spec.op}; use a multiple of {n}"
        )
    return Tensor((per_member,), "int8")


def twin_time(spec: CollectiveSpec, network: Network) -> float | None:
    """The closed form of ``spec`` on one group of its axis of ``network``'s mapping."""
    n = network.mapping.shape[spec.axis]
    return network.twin(_call(spec, member_tensor(spec, n)))


def _call(spec: CollectiveSpec, tensor: Tensor) -> CollectiveCall:
    return CollectiveCall(spec.op, spec.axis, tensor.nbytes, root=spec.root, offset=spec.offset,
                          ring=spec.ring, chunks=spec.chunks)


def simulate_collective(
    spec: CollectiveSpec, network: Network, *, tracer: Tracer | None = None,
    chip_slowdown: dict[int, float] | None = None, link_busy: LinkBusy | None = None,
) -> CollectiveResult:
    """Every chip of ``network`` (the request's model, with its link overrides) issues ``spec`` on its group of
    ``spec.axis``; time it and account the links (per link into ``link_busy`` when given)."""
    hardware, mapping = network.hardware, network.mapping
    n = mapping.shape[spec.axis]
    tensor = member_tensor(spec, n)
    sim = Simulation(network, tracer=tracer, chip_slowdown=chip_slowdown)
    runtime = CollectiveRuntime(sim, network, ring=spec.ring, chunks=spec.chunks, share_hbm=False)  # no compute
    call = _call(spec, tensor)

    def program(dev: Device) -> Generator[simpy.Event, Any, Any]:
        result = yield runtime.submit(dev.chip_id, call, tensor)
        return result

    run_spmd(sim, runtime, program, lambda dev: ())
    elapsed = float(sim.now)
    if link_busy is not None:
        link_busy.fill(runtime, symmetric=False, scope="the collective")
    notes: list[str] = []
    twin = network.twin(call)
    if twin is None:
        notes.append("no closed form is claimed for this case (chunked multi-hop routes or all-to-all)")
    totals = network.totals(sim, elapsed)
    if totals is None:
        notes.append("abstract calibrated network: no per-link accounting")
    if network.link_overrides:
        notes.append("per-link overrides: the closed form describes the network without them")
    if mapping.axes[spec.axis].max_hops > 1:
        notes.append("ring neighbours are several hops apart; routes of different groups may share links")
    return CollectiveResult(
        op=str(spec.op), axis=spec.axis, group_size=n, groups=mapping.shape[1 - spec.axis],
        bytes=spec.nbytes, unit_bytes=operation(spec.op).unit_bytes(call, n), ring=str(spec.ring),
        chunks=network.resolve(call).chunks, schedule=network.schedule(call), hardware=hardware.name,
        fidelity="full", time_s=elapsed, analytic_time_s=twin,
        bytes_sent=None if totals is None else totals.bytes_sent,
        max_link_bytes=None if totals is None else totals.max_link_bytes,
        max_link_utilisation=None if totals is None else totals.max_link_utilisation,
        transfers=0 if totals is None else totals.transfers, events=sim.events, mapping=mapping.describe(),
        notes=notes,
    )
