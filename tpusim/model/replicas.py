"""Which replicas of a D x R x C layout a full-fidelity run must simulate (with or without slow chips and links).

Replicas that no slowdown touches behave alike: each runs the same program on its own links, and meets the others
only in the data-parallel collectives, which start when the last member joins and run on the data rings' own
links. So one untouched replica stands exactly for all of them: the run simulates every chip of the touched
replicas and of one untouched replica, and a data collective starts once those have joined (the others would have
joined with their stand-in). A slow link on the data axis touches every replica's timing, so it leaves nothing to
spare. tests/model/test_pod_step.py checks the result against simulating every chip.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpusim.engine.links import LinkOverride
from tpusim.topology import MeshMapping

__all__ = ["replica_representatives"]


def replica_representatives(mapping: MeshMapping, chip_slowdown: Mapping[int, float] | None,
                            link_overrides: Mapping[int, LinkOverride] | None) -> list[tuple[int, ...]] | None:
    """Every chip (i, j, d) of the replicas to simulate, or None where every replica must run."""
    data = mapping.data
    if data == 1:
        return None
    touched = {mapping.index_of(chip)[2] for chip in chip_slowdown or {}}
    topology = mapping.topology
    for link in link_overrides or {}:
        if topology is None:
            return None
        ends = {mapping.index_of(int(topology.link_src[link]))[2], mapping.index_of(int(topology.link_dst[link]))[2]}
        if len(ends) > 1:  # a data-axis link
            return None
        touched |= ends
    untouched = [d for d in range(data) if d not in touched]
    kept = sorted(touched) + untouched[:1]
    if len(kept) == data:
        return None
    rows, cols = mapping.shape
    return [(i, j, d) for d in kept for i in range(rows) for j in range(cols)]
