"""Named topologies: TPUv4 slice rules, generic tori and meshes, and parsing of topology specs.

A TPUv4 slice is A x B x C with every side <= 4 or every side a multiple of 4; only slices made of whole 4x4x4 cubes
have wraparound, and then on every axis (docs/network.md#tpuv4-slices-and-mapping). Generic ``torus:`` and ``mesh:``
topologies have 1 to 4 axes of any size. This module validates user-written shapes and builds
:class:`~tpusim.topology.physical.PhysicalTopology` objects; it holds no topology logic of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import MappingProxyType
from typing import Literal

from tpusim.errors import TopologyError
from tpusim.topology.physical import PhysicalTopology, build_topology

# The most cube-like slice per chip count (docs/network.md#default-slice-per-chip-count, plus the sub-cube sizes
# below 16).
DEFAULT_TPUV4_SLICES: MappingProxyType[int, tuple[int, int, int]] = MappingProxyType({
    1: (1, 1, 1),
    2: (1, 1, 2),
    4: (1, 2, 2),
    8: (2, 2, 2),
    16: (2, 2, 4),
    32: (2, 4, 4),
    64: (4, 4, 4),
    128: (4, 4, 8),
    256: (4, 8, 8),
    512: (8, 8, 8),
    1024: (8, 8, 16),
    2048: (8, 16, 16),
    4096: (16, 16, 16),
})

_VALID_FORMS = (
    "valid forms: a TPUv4 slice 'AxBxC' (e.g. '4x4x16'), 'torus:16x16' or 'mesh:4x4x2' (1 to 4 sides)"
)
_SPEC = re.compile(r"(?:(?P<kind>[a-z0-9]+):)?(?P<dims>\d+(?:x\d+)*)")
MAX_GENERIC_AXES = 4


def _shape_text(dims: Sequence[object]) -> str:
    return "x".join(str(d) for d in dims)


def _check_sides(dims: Sequence[object], shown: str, what: str) -> tuple[int, ...]:
    if isinstance(dims, str):
        raise TopologyError(
            f"{what} {shown!r} must be given as a sequence of sizes; parse text with parse_topology"
        )
    sides: list[int] = []
    for side in dims:
        if isinstance(side, bool) or not isinstance(side, int) or side < 1:
            raise TopologyError(f"{what} {shown!r}: every side must be an integer >= 1, got {side!r}")
        sides.append(int(side))
    return tuple(sides)


def _tpuv4(dims: Sequence[int], shown: str) -> PhysicalTopology:
    sides = _check_sides(dims, shown, "TPUv4 slice")
    if len(sides) != 3:
        raise TopologyError(
            f"TPUv4 slice {shown!r} has {len(sides)} sides; a slice needs exactly 3 (AxBxC, e.g. 4x4x8); "
            "use 'torus:...' or 'mesh:...' for other shapes"
        )
    # Validation looks at the sorted sides; the user's axis order is kept for the topology itself.
    ordered = sorted(sides)
    small = ordered[-1] <= 4
    cubes = all(side % 4 == 0 for side in ordered)
    if not (small or cubes):
        raise TopologyError(
            f"illegal TPUv4 slice {shown!r}: every side must be <= 4, or every side a multiple of 4 "
            "(e.g. 2x2x4, 4x4x8)"
        )
    # Only whole 4x4x4 cubes close their faces through the optical switches; sub-cube slices have no wrap.
    return build_topology(f"tpuv4:{_shape_text(sides)}", sides, (cubes,) * 3)


def tpuv4_slice(dims: Sequence[int]) -> PhysicalTopology:
    """A TPUv4 slice with sides in the given axis order (``(4, 4, 16)`` -> ``"tpuv4:4x4x16"``)."""
    return _tpuv4(dims, _shape_text(dims) if not isinstance(dims, str) else dims)


def _generic(kind: str, dims: Sequence[int], shown: str) -> PhysicalTopology:
    if kind not in ("torus", "mesh"):
        raise TopologyError(f"unknown topology kind {kind!r}; valid: torus, mesh (or a TPUv4 slice 'AxBxC')")
    sides = _check_sides(dims, shown, f"{kind} topology")
    if not 1 <= len(sides) <= MAX_GENERIC_AXES:
        raise TopologyError(
            f"{kind} topology {shown!r} has {len(sides)} axes; valid: 1 to {MAX_GENERIC_AXES} axes"
        )
    return build_topology(f"{kind}:{_shape_text(sides)}", sides, (kind == "torus",) * len(sides))


def generic_topology(kind: Literal["torus", "mesh"], dims: Sequence[int]) -> PhysicalTopology:
    """A torus (wraparound on every axis of size >= 3) or a mesh (no wraparound) with 1 to 4 axes."""
    shown = f"{kind}:{_shape_text(dims)}" if not isinstance(dims, str) else dims
    return _generic(kind, dims, shown)


def parse_topology(spec: str) -> PhysicalTopology:
    """A topology from a spec such as ``"4x4x16"``, ``"torus:16x16"`` or ``"mesh:4x4x2"``.

    A bare ``AxBxC`` (or ``tpuv4:AxBxC``) is a TPUv4 slice. Errors quote the spec verbatim and list the
    valid forms.
    """
    if not isinstance(spec, str):
        raise TopologyError(f"cannot parse topology {spec!r}; {_VALID_FORMS}")
    match = _SPEC.fullmatch(spec.strip())
    if match is None:
        raise TopologyError(f"cannot parse topology {spec!r}; {_VALID_FORMS}")
    kind = match.group("kind") or "tpuv4"
    sides = tuple(int(d) for d in match.group("dims").split("x"))
    if kind == "tpuv4":
        return _tpuv4(sides, spec)
    if kind not in ("torus", "mesh"):
        raise TopologyError(f"topology {spec!r} has unknown kind {kind!r}; {_VALID_FORMS}")
    return _generic(kind, sides, spec)


def default_tpuv4_slice(chips: int) -> PhysicalTopology:
    """The most cube-like TPUv4 slice with this many chips (docs/network.md#tpuv4-slices-and-mapping)."""
    dims = DEFAULT_TPUV4_SLICES.get(chips) if isinstance(chips, int) and not isinstance(chips, bool) else None
    if dims is None:
        raise TopologyError(
            f"no default TPUv4 slice for {chips!r} chips; valid counts: "
            f"{', '.join(str(n) for n in DEFAULT_TPUV4_SLICES)}",
            "pass the slice explicitly with --topology, e.g. --topology 4x4x8 or --topology torus:12x12",
        )
    return tpuv4_slice(dims)
