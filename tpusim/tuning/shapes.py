"""The slice shapes a tuning search places its meshes on, and the note that names them.

On a physical profile without ``--topology`` the search covers every legal slice of the chip count
(``topology.slices.slice_shapes_for``: 256 TPUv4 chips are 4x4x16 or 4x8x8): the same logical mesh embeds
differently on each, so its GeMM times differ, and a search on the default shape alone would rank an algorithm by
an artefact of that one embedding. ``--topology`` fixes the shape; a calibrated profile has none (one abstract
ring per logical axis).
"""

from __future__ import annotations

from tpusim.config import HardwareProfile
from tpusim.topology.slices import TPUV4_RULES, slice_shape_for, slice_shapes_for

__all__ = ["searched_shapes", "slice_note"]


def searched_shapes(topology: str | None, hardware: HardwareProfile, chips: int) -> list[str | None]:
    """The slice shapes (topology text) a search of one slice of ``chips`` chips places its meshes on: ``topology``
    alone when given, None alone on a calibrated profile, else every legal slice of the generation (its default
    alone where the rules list shapes or the count is not whole cubes)."""
    if topology is not None:
        return [topology]
    if hardware.multi_axis_shown is None:  # no physical axes: nothing is laid on a slice
        return [None]
    rules = hardware.slice_rules or TPUV4_RULES
    shapes: list[str | None] = list(slice_shapes_for(chips, rules))
    # the default is not always a slice of whole cubes (2x4x4 for 32 TPUv4 chips); a count with neither is refused
    # by the placement before any shape is asked for
    return shapes or [slice_shape_for(chips, rules)]


def slice_note(topology: str | None, hardware: HardwareProfile, shapes: list[str | None], best: str | None,
               chips: int) -> str:
    """Which slice shapes the search ran on (``searched_shapes``), and on which the best choice is."""
    if topology is not None:
        return f"slice shape: {topology} (--topology)"
    if shapes == [None]:
        return "slice shape: none (a calibrated profile simulates one abstract ring per axis)"
    if len(shapes) == 1:
        default = dict((hardware.slice_rules or TPUV4_RULES).defaults).get(chips)
        why = "the default" if shapes[0] == default else "the only slice of whole cubes"
        return f"slice shape: {shapes[0]} ({why} for {chips} chips)"
    return f"slice shapes searched: {', '.join(str(s) for s in shapes)}; best on {best}"
