"""What a simulated run holds in memory, from measurements (docs/limits.md#memory-estimate).

A process that has loaded tpusim and its libraries holds ``BASE_BYTES``. A run keeps a record of what it did
(the chips' compute spans, the collectives' spans, the op timelines, the events still queued) until its
account is drawn up, so its footprint grows with the events it processes: full-fidelity ``tpuv4`` steps of a
1024-wide 16-head decoder with ``--all-layers`` grew by 69 to 100 bytes per processed event (collective on 2x2
and 4x4 meshes: 95 and 100; MeshSlice with 8 slices on 2x2 and 4x4: 75 and 69), charged at 100.
"""

from __future__ import annotations

from tpusim.limits import check_memory

__all__ = ["BASE_BYTES", "BYTES_PER_EVENT", "check_events_memory"]

BASE_BYTES = 48e6
BYTES_PER_EVENT = 100.0


def check_events_memory(events: int, what: str, instead: str) -> None:
    """Refuse a run expected to process ``events`` events that this process cannot hold."""
    check_memory(int(BASE_BYTES + BYTES_PER_EVENT * events), f"{what} ({events} events)", instead)
