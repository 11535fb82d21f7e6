"""What-if overrides: straggler chips and slow links, parsed from the command line or YAML.

``--slow-chip 3,5:1.5`` makes chips 3 and 5 take 1.5x as long for every computation. ``--slow-link
TARGET:FACTOR[:LATENCY_FACTOR]`` makes links take FACTOR times as long to serialize (bandwidth / FACTOR)
and, optionally, LATENCY_FACTOR times the hop latency. TARGET is a directed link id (``12``), a chip pair
(``0-1`` is the link from chip 0 to chip 1), a physical axis (``x``, ``y``, ``z``: every link along it) or
a logical axis (``axis0``, ``axis1``: every link its rings use). Chip ids are physical chip ids on a
physical network and ``i * C + j`` on the abstract calibrated one. Links exist only on physical networks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tpusim.engine.links import LinkOverride
from tpusim.errors import UserError
from tpusim.topology import MeshMapping


class OverrideError(UserError):
    """An override that names nothing or has a bad factor."""


def _factor(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OverrideError(f"{where}: factor {text!r} is not a number; use e.g. 1.5") from None
    if not math.isfinite(value) or value <= 0:
        raise OverrideError(f"{where}: factor {text!r} must be a positive number (1 = unchanged)")
    return value


def parse_slow_chips(specs: Sequence[str], num_chips: int) -> dict[int, float]:
    """``["3,5:1.5"]`` -> {3: 1.5, 5: 1.5}."""
    slowdown: dict[int, float] = {}
    for spec in specs:
        where = f"--slow-chip {spec!r}"
        chips_text, sep, factor_text = spec.rpartition(":")
        if not sep:
            raise OverrideError(f"{where} is not CHIPS:FACTOR, e.g. '3,5:1.5'")
        factor = _factor(factor_text, where)
        for part in chips_text.split(","):
            try:
                chip = int(part)
            except ValueError:
                raise OverrideError(f"{where}: chip {part!r} is not an integer chip id") from None
            if not 0 <= chip < num_chips:
                raise OverrideError(f"{where}: chip {chip} does not exist; valid: 0..{num_chips - 1}")
            slowdown[chip] = factor
    return slowdown


def parse_slow_links(specs: Sequence[str], mapping: MeshMapping) -> dict[int, LinkOverride]:
    """Link overrides keyed by directed link id."""
    topology = mapping.topology
    overrides: dict[int, LinkOverride] = {}
    for spec in specs:
        where = f"--slow-link {spec!r}"
        if topology is None:
            raise OverrideError(f"{where}: the abstract calibrated network has no links; "
                                "use a physical profile such as 'tpuv4'")
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            raise OverrideError(f"{where} is not TARGET:FACTOR[:LATENCY_FACTOR], e.g. '12:2' or 'axis1:1.5'")
        bandwidth = 1.0 / _factor(parts[1], where)
        latency = _factor(parts[2], where) if len(parts) == 3 else 1.0
        for link in _links_of(parts[0], mapping, where):
            overrides[link] = LinkOverride(bandwidth, latency)
    return overrides


def _links_of(target: str, mapping: MeshMapping, where: str) -> list[int]:
    topology = mapping.topology
    assert topology is not None
    if target in ("axis0", "axis1"):
        axis = mapping.axes[int(target[-1])]
        return sorted({link for group in axis.groups for route in (*group.fwd_routes, *group.bwd_routes)
                       for link in route})
    if target in topology.axis_names:
        index = topology.axis_names.index(target)
        return [int(link) for link in (topology.link_axis == index).nonzero()[0]]
    if "-" in target:
        try:
            src, dst = (int(x) for x in target.split("-", 1))
        except ValueError:
            raise OverrideError(f"{where}: link {target!r} is not SRC-DST chip ids") from None
        return [topology.link_id(src, dst)]
    try:
        link = int(target)
    except ValueError:
        valid = ", ".join((*topology.axis_names, "axis0", "axis1"))
        raise OverrideError(f"{where}: unknown link target {target!r}; valid: a link id, SRC-DST, {valid}") from None
    if not 0 <= link < topology.num_links:
        raise OverrideError(f"{where}: link {link} does not exist; valid: 0..{topology.num_links - 1}")
    return [link]
