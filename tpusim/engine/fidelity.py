"""Fidelity modes (DESIGN §3) and the network conditions under which ``symmetric`` is exact.

``full`` runs every chip on every link. ``symmetric`` runs one representative chip, whose collectives
stand for identical ones on every group; it is exact when every chip and every group behaves the same:
calibrated networks (every member of a group finishes a collective together, by construction), and
physical networks whose used axes are all closed uniform rings with one hop per step and no per-chip or
per-link overrides. ``auto`` picks ``symmetric`` where that holds and ``full`` otherwise, and says why.
"""

from __future__ import annotations

from tpusim.config import HardwareProfile
from tpusim.topology import MeshMapping


def network_asymmetry(hardware: HardwareProfile, mapping: MeshMapping, *, overrides: bool) -> str | None:
    """Why chips or groups of this network may differ, or None when they cannot."""
    if overrides:
        return "per-chip or per-link overrides break the symmetry between chips"
    if hardware.kind == "calibrated":
        return None
    for axis in mapping.axes:
        if axis.size == 1:
            continue
        if not axis.closed:
            return f"logical axis {axis.axis} is a line (no wraparound): ranks finish at different times"
        if axis.max_hops != 1 or axis.embedding == "split":
            return f"logical axis {axis.axis} is embedded with multi-hop steps; groups may share links"
    return None
