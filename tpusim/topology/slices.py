"""Named topologies: the slices of each TPU generation, generic tori and meshes, and parsing of topology specs.

A TPUv4 slice is A x B x C with every side <= 4 or every side a multiple of 4; only slices made of whole 4x4x4 cubes
have wraparound, and then on every axis (docs/network.md#tpuv4-slices-and-mapping). A whole-cube slice of sides
k x k x 2k or k x 2k x 2k may be twisted (``4x4x8t``; docs/network.md#twisted-tori). Other generations follow the
:class:`~tpusim.config.hardware.SliceRules` of their profile (docs/network.md#slices-of-each-generation). Generic
``torus:`` and ``mesh:``
topologies have 1 to 4 axes of any size. This module validates user-written shapes and builds
:class:`~tpusim.topology.physical.PhysicalTopology` objects; it holds no topology logic of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Protocol

from tpusim.errors import TopologyError
from tpusim.limits import LimitError, exceeds, shape_chips, shorten
from tpusim.topology.physical import PhysicalTopology, build_topology
from tpusim.topology.twisted import TWIST_RULE, TWISTED_AXES, twist_offsets


def _shape_text(dims: Sequence[object]) -> str:
    return "x".join(str(d) for d in dims)


# The most cube-like TPUv4 slice per chip count (docs/network.md#default-slice-per-chip-count, plus the sub-cube
# sizes below 16).
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
TPUV4_CUBE = 4  # 4x4x4 chips per rack, joined to other cubes by optical switches; TPU v4 paper
TPUV4_POD_CHIPS = 4096  # 64 cubes, 16x16x16; Cloud TPU v4 docs


class SliceRules(Protocol):
    """What a generation's slice rules say (``tpusim.config.hardware.SliceRules`` is the profile file's form)."""

    @property
    def generation(self) -> str: ...
    @property
    def axes(self) -> int: ...
    @property
    def cube(self) -> int | None: ...
    @property
    def shapes(self) -> tuple[str, ...] | None: ...
    @property
    def wrap_side(self) -> int | None: ...
    @property
    def max_chips(self) -> int: ...
    @property
    def defaults(self) -> tuple[tuple[int, str], ...]: ...


@dataclass(frozen=True)
class CubeSlices:
    """Slice rules made of whole cubes (TPUv4's unless told otherwise)."""

    generation: str = "tpuv4"
    axes: int = 3
    cube: int | None = TPUV4_CUBE
    shapes: tuple[str, ...] | None = None
    wrap_side: int | None = None
    max_chips: int = TPUV4_POD_CHIPS
    defaults: tuple[tuple[int, str], ...] = tuple(
        (chips, _shape_text(dims)) for chips, dims in DEFAULT_TPUV4_SLICES.items()
    )


TPUV4_RULES: SliceRules = CubeSlices()


def describe_rules(rules: SliceRules) -> str:
    """The rule in words, as errors quote it."""
    title = generation_title(rules)
    if rules.cube is not None:
        return (f"{title} slices have {rules.axes} sides, every side <= {rules.cube} or every side a multiple of "
                f"{rules.cube}, at most {rules.max_chips} chips")
    return f"{title} slices are {', '.join(rules.shapes or ())} (sides in any order)"


def _sides_of(shape: str) -> tuple[int, ...]:
    return tuple(int(side) for side in shape.split("x"))


def _valid_forms(rules: SliceRules) -> str:
    form, example = ("AxBxC", "4x4x16") if rules.axes == 3 else ("AxB", "8x16")
    twisted = ", a twisted one 'AxBxCt' (e.g. '4x4x8t')" if _can_twist(rules) else ""
    return (f"valid forms: a {generation_title(rules)} slice '{form}' (e.g. '{example}'){twisted}, 'torus:16x16' or "
            "'mesh:4x4x2' (1 to 4 sides)")


def _can_twist(rules: SliceRules) -> bool:
    """Twisted tori are wired by the optical switches between whole cubes of a three-axis generation."""
    return rules.cube is not None and rules.axes == TWISTED_AXES


_SPEC = re.compile(r"(?:(?P<kind>[a-z0-9]+):)?(?P<dims>\d+(?:x\d+)*)(?P<twisted>t)?")
MAX_GENERIC_AXES = 4




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


def generation_title(rules: SliceRules) -> str:
    """``tpuv5p`` -> ``TPUv5p``, as messages name a generation."""
    return "TPU" + rules.generation[3:] if rules.generation.startswith("tpu") else rules.generation


def _twist_of(sides: tuple[int, ...], shown: str, rules: SliceRules) -> tuple[tuple[int, ...], ...]:
    title = generation_title(rules)
    if not _can_twist(rules) or rules.cube is None:
        raise TopologyError(f"{title} slice {shown!r} cannot be twisted: twisted tori join whole cubes of a "
                            "three-axis generation (TPUv4, TPUv5p) through the optical switches")
    twist = twist_offsets(sides, rules.cube)
    if twist is None:
        cube = rules.cube
        raise TopologyError(
            f"illegal twisted {title} slice {shown!r}: a twisted torus needs {TWIST_RULE}, k a multiple of {cube} "
            f"(e.g. {cube}x{cube}x{2 * cube}t, {cube}x{2 * cube}x{2 * cube}t, {2 * cube}x{2 * cube}x{4 * cube}t)"
        )
    return twist


def _slice(dims: Sequence[int], shown: str, rules: SliceRules, twisted: bool = False) -> PhysicalTopology:
    title = generation_title(rules)
    sides = _check_sides(dims, shown, f"{title} slice")
    twist = _twist_of(sides, shown, rules) if twisted else None
    if len(sides) != rules.axes:
        form = "x".join("ABCD"[:rules.axes])
        example = "4x4x8" if rules.axes == 3 else "8x16" if rules.axes == 2 else "16"
        raise TopologyError(
            f"{title} slice {shown!r} has {len(sides)} sides; a slice needs exactly {rules.axes} ({form}, e.g. "
            f"{example}); use 'torus:...' or 'mesh:...' for other shapes"
        )
    # Validation looks at the sorted sides; the user's axis order is kept for the topology itself.
    ordered = sorted(sides)
    if rules.cube is not None:
        cube = rules.cube
        whole_cubes = all(side % cube == 0 for side in ordered)
        if not (ordered[-1] <= cube or whole_cubes):
            small = "x".join(["2"] * (rules.axes - 1) + [str(cube)])
            cubes = "x".join([str(cube)] * (rules.axes - 1) + [str(2 * cube)])
            example = f"{small}, {cubes}"
            raise TopologyError(
                f"illegal {title} slice {shown!r}: every side must be <= {cube}, or every side a multiple of "
                f"{cube} (e.g. {example})"
            )
        # Only whole cubes close their faces through the optical switches; sub-cube slices have no wrap.
        wraps = (whole_cubes,) * len(sides)
    else:
        published = {tuple(sorted(_sides_of(shape))) for shape in rules.shapes or ()}
        if tuple(ordered) not in published:
            raise TopologyError(f"illegal {title} slice {shown!r}: {describe_rules(rules)}")
        wraps = tuple(side == rules.wrap_side for side in sides)
    if math.prod(sides) > rules.max_chips:
        raise TopologyError(
            f"{title} slice {shown!r} has {math.prod(sides)} chips; the largest {title} slice has "
            f"{rules.max_chips} ({describe_rules(rules)})"
        )
    name = f"{rules.generation}:{_shape_text(sides)}" + (" twisted" if twist is not None else "")
    return build_topology(name, sides, wraps, twist)


def slice_topology(dims: Sequence[int], rules: SliceRules = TPUV4_RULES, *, twisted: bool = False
                   ) -> PhysicalTopology:
    """A slice of the generation ``rules`` describe, sides in the given axis order; ``twisted`` wires it as a
    twisted torus (docs/network.md#twisted-tori)."""
    shown = (_shape_text(dims) + ("t" if twisted else "")) if not isinstance(dims, str) else dims
    return _slice(dims, shown, rules, twisted)


def tpuv4_slice(dims: Sequence[int], *, twisted: bool = False) -> PhysicalTopology:
    """A TPUv4 slice with sides in the given axis order (``(4, 4, 16)`` -> ``"tpuv4:4x4x16"``; ``(4, 4, 8)``
    twisted -> ``"tpuv4:4x4x8 twisted"``)."""
    return slice_topology(dims, TPUV4_RULES, twisted=twisted)


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


def parse_topology(spec: str, rules: SliceRules = TPUV4_RULES) -> PhysicalTopology:
    """A topology from a spec such as ``"4x4x16"``, ``"4x4x8t"``, ``"torus:16x16"`` or ``"mesh:4x4x2"``.

    A bare ``AxBxC`` (or ``<generation>:AxBxC``) is a slice of the generation ``rules`` describe (TPUv4 unless
    told); a trailing ``t`` (``4x4x8t``, ``tpuv4:4x8x8t``) wires it as a twisted torus. Errors quote the spec
    verbatim and list the valid forms.
    """
    if not isinstance(spec, str):
        raise TopologyError(f"cannot parse topology {spec!r}; {_valid_forms(rules)}")
    match = _SPEC.fullmatch(spec.strip())
    if match is None:
        raise TopologyError(f"cannot parse topology {spec!r}; {_valid_forms(rules)}")
    kind = match.group("kind") or rules.generation
    # checked before any side is converted or any link built: 'torus:65536x65536' would need 32 GiB of arrays
    too_many = exceeds("chips", shape_chips(match.group("dims")))
    if too_many is not None:
        raise LimitError(f"topology {shorten(spec.strip())!r} has more chips than the limit: it {too_many}")
    sides = tuple(int(d) for d in match.group("dims").split("x"))
    twisted = match.group("twisted") is not None
    if kind == rules.generation:
        return _slice(sides, spec, rules, twisted)
    if kind not in ("torus", "mesh"):
        raise TopologyError(f"topology {spec!r} has unknown kind {kind!r}; {_valid_forms(rules)}")
    if twisted:
        raise TopologyError(f"topology {spec!r}: '{kind}:' topologies wrap plainly; only slices of whole cubes "
                            "can be twisted (e.g. '4x4x8t' on TPUv4)")
    return _generic(kind, sides, spec)


def default_slice(chips: int, rules: SliceRules = TPUV4_RULES) -> PhysicalTopology:
    """The generation's default slice with this many chips (docs/network.md#tpuv4-slices-and-mapping)."""
    shape = dict(rules.defaults).get(chips) if isinstance(chips, int) and not isinstance(chips, bool) else None
    if shape is None:
        example = "4x4x8" if rules.axes == 3 else "8x16"
        raise TopologyError(
            f"no default {generation_title(rules)} slice for {chips!r} chips; valid counts: "
            f"{', '.join(str(n) for n, _ in rules.defaults)}",
            f"pass the slice explicitly with --topology, e.g. --topology {example} or --topology torus:12x12",
        )
    return slice_topology(_sides_of(shape), rules)


def slice_shape_for(chips: int, rules: SliceRules = TPUV4_RULES) -> str | None:
    """The generation's slice of ``chips`` chips as topology text: its default, else (cube rules) the most
    cube-like slice of whole cubes, its longest side over its shortest least; None where neither exists."""
    shape = dict(rules.defaults).get(chips)
    if shape is not None or rules.cube is None or chips > rules.max_chips or chips % rules.cube ** rules.axes:
        return shape
    cubes = chips // rules.cube ** rules.axes
    best: tuple[int, ...] | None = None
    for sides in _factorisations(cubes, rules.axes):
        if best is None or (max(sides) / min(sides), max(sides)) < (max(best) / min(best), max(best)):
            best = sides
    return None if best is None else _shape_text([side * rules.cube for side in best])


def slice_shapes_for(chips: int, rules: SliceRules = TPUV4_RULES) -> list[str]:
    """Every slice of whole cubes with ``chips`` chips under cube rules, as topology text with sides ascending
    (256 TPUv4 chips: 4x4x16, 4x8x8); the generation's default alone where the rules list shapes or the count is
    not whole cubes."""
    default = dict(rules.defaults).get(chips)
    if rules.cube is None or chips > rules.max_chips or chips % rules.cube ** rules.axes:
        return [default] if default is not None else []
    cubes = chips // rules.cube ** rules.axes
    return [_shape_text([side * rules.cube for side in sides]) for sides in _factorisations(cubes, rules.axes)]


def _factorisations(number: int, parts: int) -> list[tuple[int, ...]]:
    """Every non-decreasing tuple of ``parts`` whole numbers whose product is ``number``."""
    if parts == 1:
        return [(number,)]
    return [(first, *rest) for first in range(1, number + 1) if number % first == 0
            for rest in _factorisations(number // first, parts - 1) if rest[0] >= first]


def default_tpuv4_slice(chips: int) -> PhysicalTopology:
    """The most cube-like TPUv4 slice with this many chips (docs/network.md#tpuv4-slices-and-mapping)."""
    return default_slice(chips, TPUV4_RULES)
