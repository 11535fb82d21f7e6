"""What a simulated run holds in memory, from measurements (docs/limits.md#memory-estimate).

A process that has loaded tpusim and its libraries holds ``BASE_BYTES`` (peak resident memory of ``tpusim list
hardware``: 48 MB). Above it:

- **a full-fidelity run** grows as chips^1.5 (rings lengthen with the mesh side): full-fidelity ``tpuv4`` steps
  of GPT-3 with the collective algorithm on 8x8, 16x16, 32x16 and 32x32 meshes peaked at 56, 82, 132 and 294 MB,
  7.5 kB x chips^1.5 above the base;
- **a collective** holds its merged per-link program, every transfer of every group that starts it together:
  ``tpusim collective`` all-gathers of 64 MB on ``tpuv4`` peaked 218 MB above the base for a 1024-chip line
  (1,047,552 transfers), 833 MB for a 2048-chip line (4,192,256), 110 MB for axis 0 of a 64x64 torus (516,096)
  and 804 MB for the 1024-chip line in 4 chunks (4,190,208): 192 to 214 bytes per transfer, charged at 215;
- **a run keeps a record of every event it processed** (the chips' compute spans, the collectives' spans, the op
  timelines, the events still queued) until its account is drawn up: full-fidelity ``tpuv4`` steps of a
  1024-wide 16-head decoder with ``--all-layers`` grew by 69 to 100 bytes per processed event (collective on 2x2
  and 4x4 meshes: 95 and 100; MeshSlice with 8 slices on 2x2 and 4x4: 75 and 69), charged at 100.

A step's data-parallel collectives run on every data-axis group at once (one per chip of a replica, whichever
fidelity), so a step is charged the transfers of its data axis's gradient reduce-scatter and weight all-gather
(an all-reduce under ZeRO 0 moves as many), both held at once.
"""

from __future__ import annotations

import math

from tpusim.limits import check_memory
from tpusim.topology import MeshMapping
from tpusim.topology.mapping import DATA_AXIS
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["BASE_BYTES", "BYTES_PER_EVENT", "BYTES_PER_TRANSFER", "CHIP_POWER", "FULL_BYTES_PER_CHIP_POWER",
           "ROOTED_OPS", "check_events_memory", "collective_transfers", "full_fidelity_bytes", "step_footprint"]

BASE_BYTES = 48e6
FULL_BYTES_PER_CHIP_POWER = 7.5e3
CHIP_POWER = 1.5
BYTES_PER_TRANSFER = 215.0
BYTES_PER_EVENT = 100.0
_RING_OPS = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL})
ROOTED_OPS = frozenset({CollectiveOp.BROADCAST, CollectiveOp.REDUCE})
"""Collectives that relay one message down the group (and may choose their own chunking)."""


def full_fidelity_bytes(chips: int) -> float:
    """The peak memory of a full-fidelity run on ``chips`` chips."""
    return BASE_BYTES + FULL_BYTES_PER_CHIP_POWER * math.pow(chips, CHIP_POWER)


def collective_transfers(op: CollectiveOp, chips: int, group: int, chunks: int, *, closed: bool, ring: Ring) -> int:
    """The transfers a collective of ``op`` makes over every group of ``group`` ranks among ``chips`` chips, each
    message in ``chunks`` chunks: a ring collective moves every rank's shard to every other rank (halves both ways
    on a closed bidirectional ring; an all-reduce is a reduce-scatter and an all-gather), a rooted one relays one
    message down the group, a point-to-point one sends one message per rank."""
    groups = chips // max(group, 1)
    both_ways = 2 if closed and ring is Ring.BIDIRECTIONAL else 1
    if op in _RING_OPS or op is CollectiveOp.ALL_REDUCE:
        per_group = group * (group - 1) * both_ways * (2 if op is CollectiveOp.ALL_REDUCE else 1)
    elif op in ROOTED_OPS:
        per_group = group - 1
    else:
        per_group = group
    return groups * per_group * chunks


def step_footprint(mapping: MeshMapping, full: bool) -> tuple[float, str]:
    """(peak bytes, what dominates) of simulating a step on ``mapping``, ``full`` at full fidelity: the larger
    of the full-fidelity run and the data axis's collectives (none without data parallelism)."""
    needed, what = BASE_BYTES, "a step"
    if full:
        needed, what = full_fidelity_bytes(mapping.num_chips), f"a full-fidelity step on {mapping.num_chips} chips"
    if mapping.data > 1:
        axis = mapping.axes[DATA_AXIS]
        # the reduce-scatter and the all-gather (or the all-reduce, as many transfers) on every group at once
        transfers = 2 * collective_transfers(CollectiveOp.ALL_GATHER, mapping.num_chips, axis.size, 1,
                                             closed=all(group.closed for group in axis.groups[:1]),
                                             ring=Ring.BIDIRECTIONAL)
        synchronised = BASE_BYTES + BYTES_PER_TRANSFER * transfers
        if synchronised > needed:
            needed, what = synchronised, (f"the data-parallel collectives of a step over {mapping.data} replicas "
                                          f"of {mapping.num_chips // mapping.data} chips ({transfers} transfers)")
    return needed, what


def check_events_memory(events: int, what: str, instead: str) -> None:
    """Refuse a run expected to process ``events`` events that this process cannot hold."""
    check_memory(int(BASE_BYTES + BYTES_PER_EVENT * events), f"{what} ({events} events)", instead)
