"""Link maps: a picture of every directed ICI link of a physical topology, coloured by its busy fraction.

Owns drawing one run's per-link utilisation (one value per directed link id, as
``tpusim.engine.links.LinkArray.utilisation`` returns it) onto the chip grid of a
:class:`~tpusim.topology.physical.PhysicalTopology`, and the text naming the busiest links. It simulates
nothing and does not decide what a utilisation means; it only draws the array it is given.

Layout: one panel per plane (per coordinate along the last axis of a 3D topology; a single panel for 2D
and 1D), chips on an integer grid, the first axis left to right and the second bottom to top. Each
directed link is an arrow on the right-hand side of its direction of travel, so the two directions of one
cable sit side by side; a wraparound link is two short stubs, one leaving the grid edge at its source and
one entering at the opposite edge, so no arrow crosses the panel; links along the plane normal are a
triangle pair beside their source chip. Geometry is in grid units, so shapes scale with the panel.
"""

from __future__ import annotations

import math
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tpusim.files import replace_atomically
from tpusim.topology.physical import PhysicalTopology

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap, Normalize
    from matplotlib.figure import Figure

__all__ = ["busiest_links", "draw_link_map"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DPI = 120
TITLE_SIZE = 13.0  # points
CHAR_WIDTH_EM = 0.6  # average width of a character of the text under the panels, in multiples of its size
TITLE_SPACING = 1.2  # line height of the title, in multiples of its font size
IDLE_COLOUR = "#d4d4d4"
CHIP_COLOUR = "#505050"  # labelled chips: dark, so their white ids read
SMALL_CHIP_COLOUR = "#9a9a9a"  # unlabelled chips: lighter, so on a pod the dark (busiest) arrows stand out
LABEL_CHIPS_UP_TO = 64  # chips per panel; beyond this the ids are too small to read and only add clutter

# Geometry in grid units (one unit = distance between neighbouring chips).
CHIP_HALF = 0.17  # big enough to hold a chip id
SMALL_CHIP_HALF = 0.1  # without ids a chip only marks a grid point; a smaller square leaves the links room
LINK_GAP = 0.21  # arrows start and stop this far from a chip centre so they never touch the chip square
STUB_END = 0.56  # a wraparound stub runs from LINK_GAP to here, staying inside the panel margin
LANE = 0.13  # sideways offset of an arrow from the line joining its chips
SHAFT_HALF = 0.045
HEAD_HALF = 0.09
HEAD_LENGTH = 0.17
# The triangles fill most of the free square between four chips: on a pod they are a few pixels wide and are often
# the busiest links (a logical axis on the panel normal), so they must not be the hardest shapes to see.
MARKER_HALF_WIDTH = 0.12
MARKER_HALF_HEIGHT = 0.11
# Centres of the +normal and -normal triangles relative to their chip: side by side in the square between it and
# its up-right neighbours, which no in-plane arrow enters (arrows keep within 0.22 of the chips' grid lines).
MARKER_PLUS = (0.36, 0.45)
MARKER_MINUS = (0.63, 0.45)
MARGIN = 0.8  # panel limits beyond the outer chips, room for stubs and the top row's markers


@dataclass(frozen=True)
class _Layout:
    across: int  # physical axis drawn left to right
    up: int | None  # physical axis drawn bottom to top; None for a 1D topology
    normal: int | None  # physical axis whose coordinate picks the panel; its links become triangle markers
    width: int
    height: int
    planes: int


def _layout(topology: PhysicalTopology) -> _Layout:
    dims = topology.dims
    if not 1 <= len(dims) <= 3:
        raise ValueError(
            f"a link map draws topologies of 1 to 3 axes; {topology.name!r} has {len(dims)} "
            f"({', '.join(topology.axis_names)})"
        )
    up = 1 if len(dims) >= 2 else None
    normal = 2 if len(dims) == 3 else None
    return _Layout(
        across=0,
        up=up,
        normal=normal,
        width=dims[0],
        height=dims[up] if up is not None else 1,
        planes=dims[normal] if normal is not None else 1,
    )


def _chip_coords(topology: PhysicalTopology) -> IntArray:
    # The documented numbering (chip = x + X*(y + Y*z)) is Fortran order, so this needs no private state.
    grid = np.unravel_index(np.arange(topology.num_chips), topology.dims, order="F")
    return np.stack(grid, axis=1).astype(np.int64)


def _checked_utilisation(topology: PhysicalTopology, utilisation: npt.ArrayLike) -> FloatArray:
    expected = topology.num_links
    try:
        values = np.asarray(utilisation, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"utilisation must be numbers, one per directed link of {topology.name!r} (expected length "
            f"{expected})"
        ) from None
    if values.ndim != 1 or len(values) != expected:
        raise ValueError(
            f"utilisation has shape {values.shape} but topology {topology.name!r} has {expected} directed "
            f"links; expected a 1-D array of length {expected}, one busy fraction per link id"
        )
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        first = int(bad[0])
        raise ValueError(
            f"utilisation must be finite and >= 0 for every link; link {first} is {values[first]!r} "
            f"({len(bad)} bad value(s) of {expected})"
        )
    return values


def _checked_top(top: int) -> int:
    if isinstance(top, bool) or not isinstance(top, int | np.integer) or top < 0:
        raise ValueError(f"top must be a whole number >= 0, got {top!r}")
    return int(top)


def _describe_link(topology: PhysicalTopology, coords: IntArray, link: int, busy: float) -> str:
    src = int(topology.link_src[link])
    dst = int(topology.link_dst[link])
    axis = int(topology.link_axis[link])
    sign = "+" if int(topology.link_sign[link]) > 0 else "-"
    wrapped = " (wraparound)" if _is_wrap(coords, topology, np.array([link]))[0] else ""
    src_at = ",".join(str(int(c)) for c in coords[src])
    dst_at = ",".join(str(int(c)) for c in coords[dst])
    return (
        f"link {link}: chip {src} ({src_at}) {sign}{topology.axis_names[axis]} -> chip {dst} ({dst_at})"
        f"{wrapped}: {100 * busy:.1f}% busy"
    )


def _is_wrap(coords: IntArray, topology: PhysicalTopology, links: IntArray) -> npt.NDArray[np.bool_]:
    axis = topology.link_axis[links]
    step = coords[topology.link_dst[links], axis] - coords[topology.link_src[links], axis]
    return np.asarray(step != topology.link_sign[links])


def busiest_links(topology: PhysicalTopology, utilisation: npt.ArrayLike, *, top: int = 5) -> list[str]:
    """One line per busiest directed link, busiest first (ties by link id), busy links only, at most ``top``.

    A line reads ``"link 7: chip 1 (1,0,0) +x -> chip 2 (2,0,0): 90.0% busy"``, with ``(wraparound)``
    before the colon for a link that closes a ring.
    """
    values = _checked_utilisation(topology, utilisation)
    count = _checked_top(top)
    order = np.argsort(-values, kind="stable")
    chosen = [int(link) for link in order[:count] if values[link] > 0]
    coords = _chip_coords(topology)
    return [_describe_link(topology, coords, link, float(values[link])) for link in chosen]


def _arrows(tail: FloatArray, tip: FloatArray) -> FloatArray:
    """Arrow polygons (N, 7, 2) from ``tail`` to ``tip``, each an (N, 2) array."""
    along = tip - tail
    length = np.linalg.norm(along, axis=1, keepdims=True)
    unit = along / length
    side = np.stack((-unit[:, 1], unit[:, 0]), axis=1)
    # Short stubs keep a visible shaft: the head never takes more than 60% of the arrow.
    neck = tip - unit * np.minimum(HEAD_LENGTH, 0.6 * length)
    return np.stack(
        (
            tail + side * SHAFT_HALF,
            neck + side * SHAFT_HALF,
            neck + side * HEAD_HALF,
            tip,
            neck - side * HEAD_HALF,
            neck - side * SHAFT_HALF,
            tail - side * SHAFT_HALF,
        ),
        axis=1,
    )


def _triangles(centre: FloatArray, pointing: int) -> FloatArray:
    """Triangles (N, 3, 2) around ``centre`` with the apex up (``pointing`` +1) or down (-1)."""
    apex = centre + np.array([0.0, pointing * MARKER_HALF_HEIGHT])
    left = centre + np.array([-MARKER_HALF_WIDTH, -pointing * MARKER_HALF_HEIGHT])
    right = centre + np.array([MARKER_HALF_WIDTH, -pointing * MARKER_HALF_HEIGHT])
    return np.stack((apex, left, right), axis=1)


@dataclass(frozen=True)
class _Shapes:
    """Polygons of one kind with, per polygon, its panel and the link whose colour it takes."""

    polygons: FloatArray
    panel: IntArray
    link: IntArray


def _link_shapes(topology: PhysicalTopology, layout: _Layout, coords: IntArray) -> tuple[_Shapes, _Shapes]:
    """Arrows for the in-plane links (two stubs per wraparound link) and triangles for the normal links."""
    links = np.arange(topology.num_links, dtype=np.int64)
    src = topology.link_src.astype(np.int64)
    axis = topology.link_axis.astype(np.int64)
    sign = topology.link_sign.astype(np.float64)
    position = np.zeros((topology.num_chips, 2))
    position[:, 0] = coords[:, layout.across]
    if layout.up is not None:
        position[:, 1] = coords[:, layout.up]
    panel_of_chip = coords[:, layout.normal] if layout.normal is not None else np.zeros(len(coords), np.int64)
    panel = panel_of_chip[src]

    flat = links[axis != layout.normal] if layout.normal is not None else links
    direction = np.zeros((len(flat), 2))
    direction[:, 0] = np.where(axis[flat] == layout.across, sign[flat], 0.0)
    direction[:, 1] = np.where(axis[flat] == layout.across, 0.0, sign[flat])
    # Right-hand side of travel, as on a two-lane road: the two directions of a cable never overlap.
    lane = np.stack((direction[:, 1], -direction[:, 0]), axis=1) * LANE
    start = position[src[flat]] + lane
    end = position[topology.link_dst[flat].astype(np.int64)] + lane
    wraps = _is_wrap(coords, topology, flat)
    direct = ~wraps
    tails = [start[direct] + direction[direct] * LINK_GAP]
    tips = [end[direct] - direction[direct] * LINK_GAP]
    owners = [flat[direct]]
    # A wraparound link is drawn twice: leaving its source's edge and arriving at the opposite edge.
    tails += [start[wraps] + direction[wraps] * LINK_GAP, end[wraps] - direction[wraps] * STUB_END]
    tips += [start[wraps] + direction[wraps] * STUB_END, end[wraps] - direction[wraps] * LINK_GAP]
    owners += [flat[wraps], flat[wraps]]
    owner = np.concatenate(owners)
    arrows = _Shapes(_arrows(np.concatenate(tails), np.concatenate(tips)), panel[owner], owner)

    normal = links[axis == layout.normal] if layout.normal is not None else links[:0]
    upward = normal[sign[normal] > 0]
    downward = normal[sign[normal] < 0]
    polygons = [
        _triangles(position[src[upward]] + np.array(MARKER_PLUS), 1),
        _triangles(position[src[downward]] + np.array(MARKER_MINUS), -1),
    ]
    marker_links = np.concatenate((upward, downward))
    markers = _Shapes(np.concatenate(polygons), panel[marker_links], marker_links)
    return arrows, markers


def _colours(values: FloatArray, cmap: Colormap, norm: Normalize) -> FloatArray:
    from matplotlib.colors import to_rgba

    colours = np.asarray(cmap(norm(values)), dtype=np.float64).reshape(len(values), 4)
    colours[values <= 0] = to_rgba(IDLE_COLOUR)
    return colours


def _ticks(size: int) -> list[int]:
    step = 1 if size <= 8 else 5 if size <= 32 else 10
    return sorted({*range(0, size, step), size - 1})


def _key_text(topology: PhysicalTopology, layout: _Layout) -> str:
    parts = [
        "Each arrow is one directed link, drawn on the right-hand side of its direction of travel, so the two "
        "directions of a cable sit side by side."
    ]
    in_plane_wraps = [topology.wrap[a] for a in (layout.across, layout.up) if a is not None]
    if any(in_plane_wraps):
        parts.append("Short stubs at a panel's edge are wraparound links: one leaves the last chip, the same link "
                     "enters the first chip at the opposite edge.")
    if layout.normal is not None and topology.dims[layout.normal] > 1:
        name = topology.axis_names[layout.normal]
        parts.append(f"\u25b2 / \u25bc just up-right of a chip: its +{name} / -{name} link (to the next / "
                     f"previous panel).")
    parts.append("Grey: idle.")
    return " ".join(parts)


def _panel_title(topology: PhysicalTopology, layout: _Layout, plane: int) -> str:
    names = topology.axis_names
    if layout.normal is not None:
        return f"plane {names[layout.normal]} = {plane}"
    if layout.up is not None:
        return f"{names[layout.across]}-{names[layout.up]} plane"
    return f"{names[layout.across]} axis"


def _draw_panel(ax: Axes, topology: PhysicalTopology, layout: _Layout, plane: int, coords: IntArray,
                shapes: tuple[_Shapes, _Shapes], colours: FloatArray, busy: npt.NDArray[np.bool_],
                scale: float) -> None:
    from matplotlib.collections import PolyCollection

    for kind in shapes:
        mine = kind.panel == plane
        if not mine.any():
            continue
        # Busy links last, so a hot arrow is never hidden under an idle neighbour's antialiased edge.
        order = np.argsort(busy[kind.link[mine]], kind="stable")
        polygons = kind.polygons[mine][order]
        ax.add_collection(PolyCollection(list(polygons), facecolors=colours[kind.link[mine]][order],
                                         edgecolors="none", antialiaseds=True))

    on_plane = np.flatnonzero(coords[:, layout.normal] == plane) if layout.normal is not None \
        else np.arange(topology.num_chips)
    across = coords[on_plane, layout.across].astype(np.float64)
    up = coords[on_plane, layout.up].astype(np.float64) if layout.up is not None else np.zeros(len(on_plane))
    labelled = len(on_plane) <= LABEL_CHIPS_UP_TO
    half = CHIP_HALF if labelled else SMALL_CHIP_HALF
    corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=np.float64) * half
    squares = np.stack((across, up), axis=1)[:, None, :] + corners[None, :, :]
    ax.add_collection(PolyCollection(list(squares), facecolors=CHIP_COLOUR if labelled else SMALL_CHIP_COLOUR,
                                     edgecolors="none", zorder=3))
    if labelled:
        digits = len(str(topology.num_chips - 1))
        # Fit the widest id inside its square: a digit is about 0.6 em wide.
        size = min(8.0, 2 * CHIP_HALF * scale * 0.9 / (0.6 * digits))
        for chip, x, y in zip(on_plane, across, up, strict=True):
            ax.text(x, y, str(int(chip)), ha="center", va="center", color="white", fontsize=size, zorder=4)

    ax.set_xlim(-MARGIN, layout.width - 1 + MARGIN)
    ax.set_ylim(-MARGIN, layout.height - 1 + MARGIN)
    ax.set_aspect("equal")
    ax.set_xticks(_ticks(layout.width))
    ax.set_yticks(_ticks(layout.height) if layout.up is not None else [])
    ax.tick_params(labelsize=7, length=2, pad=1)
    for spine in ax.spines.values():
        spine.set_color("#bbbbbb")
    ax.set_title(_panel_title(topology, layout, plane), fontsize=9, pad=3)


@dataclass(frozen=True)
class _Sizes:
    """Figure geometry in inches."""

    columns: int
    rows: int
    panel_width: float
    panel_height: float
    cell: float


def _sizes(layout: _Layout) -> _Sizes:
    columns = math.ceil(math.sqrt(layout.planes))
    rows = math.ceil(layout.planes / columns)
    span_across = layout.width - 1 + 2 * MARGIN
    span_up = layout.height - 1 + 2 * MARGIN
    longest = max(span_across, span_up)
    if layout.planes > 1:
        # Many planes: about 3-4 inches a panel, so a 4x4 grid of 16x16 panels stays one readable screen.
        panel = min(4.0, max(3.0, 0.23 * longest))
    else:
        panel = min(9.0, max(4.5, 0.45 * longest))
    cell = panel / longest
    return _Sizes(columns, rows, cell * span_across, cell * span_up, cell)


def draw_link_map(topology: PhysicalTopology, utilisation: npt.ArrayLike, path: str | os.PathLike[str], *,
                  title: str, top: int = 5) -> list[str]:
    """Draw every directed link of ``topology`` coloured by ``utilisation`` into the PNG at ``path``.

    ``utilisation`` holds one finite busy fraction >= 0 per directed link id (length
    ``topology.num_links``); 0 is drawn grey, 0..1 on a perceptually uniform colour scale (above 1 takes
    the top colour). The folder of ``path`` must exist; the file is replaced atomically. Returns the lines
    naming the ``top`` busiest links (see :func:`busiest_links`), which are also printed under the panels.
    """
    values = _checked_utilisation(topology, utilisation)
    count = _checked_top(top)
    layout = _layout(topology)
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"folder {str(folder)!r} for the link map {str(target)!r} does not exist")
    if target.is_dir():
        raise IsADirectoryError(f"link map path {str(target)!r} is a folder; give a .png file name")
    lines = busiest_links(topology, values, top=count)
    figure = _figure(topology, layout, values, lines, title)
    _write_atomic(figure, target)
    return lines


def _figure(topology: PhysicalTopology, layout: _Layout, values: FloatArray, lines: list[str],
            title: str) -> Figure:
    # Imported here so that importing tpusim.experiments stays cheap for runs that draw nothing.
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import ListedColormap, Normalize
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import PercentFormatter

    # Reversed plasma without its palest end: on white panels the busiest links are the darkest, most visible
    # shapes, and even a barely used link is a saturated orange, never confused with the grey of an idle one.
    cmap = ListedColormap(colormaps["plasma"](np.linspace(0.85, 0.0, 256)), name="plasma_on_white")
    norm = Normalize(0.0, 1.0, clip=True)
    colours = _colours(values, cmap, norm)
    coords = _chip_coords(topology)
    shapes = _link_shapes(topology, layout, coords)
    sizes = _sizes(layout)

    left, right_pad, colourbar_room = 0.55, 0.25, 1.35
    gap_across, gap_up = 0.35, 0.6
    grid_width = sizes.columns * sizes.panel_width + (sizes.columns - 1) * gap_across
    grid_height = sizes.rows * sizes.panel_height + (sizes.rows - 1) * gap_up
    width = max(left + grid_width + colourbar_room + right_pad, 6.0)
    # the title wrapped to the figure's width, with room for every line above the panels' own titles
    title_chars = max(40, int((width - left - right_pad) * 72 / (CHAR_WIDTH_EM * TITLE_SIZE)))
    title = "\n".join(textwrap.fill(line, title_chars) for line in title.split("\n"))
    top_room = 0.55 + (title.count("\n") + 1) * TITLE_SIZE * TITLE_SPACING / 72
    font = 9.0
    # a digit or a parenthesis is about 0.6 em wide in the default sans font; the summary lines are full of them
    chars = max(60, int((width - 0.4) * 72 / (CHAR_WIDTH_EM * font)))
    summary = _summary(topology, values)
    key = textwrap.wrap(_key_text(topology, layout), chars)
    listing = ["Busiest links:", *lines] if lines else []
    text_lines = [*key, *textwrap.wrap(summary, chars), *listing]
    text_height = len(text_lines) * font * 1.45 / 72 + 0.25
    # A flat grid (a 1D ring) still gets a colour bar long enough to read, with the idle swatch below it.
    bar_height = min(max(grid_height, 2.5), 5.0)
    body_height = max(grid_height + 0.5, bar_height + 0.7)
    height = top_room + body_height + text_height

    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    figure.suptitle(title, x=left / width, y=1 - 0.2 / height, ha="left", va="top", fontsize=TITLE_SIZE,
                    linespacing=TITLE_SPACING)
    scale = sizes.cell * 72
    names = topology.axis_names
    for plane in range(layout.planes):
        row, column = divmod(plane, sizes.columns)
        x0 = left + column * (sizes.panel_width + gap_across)
        y0 = height - top_room - (row + 1) * sizes.panel_height - row * gap_up
        ax = figure.add_axes((x0 / width, y0 / height, sizes.panel_width / width, sizes.panel_height / height))
        _draw_panel(ax, topology, layout, plane, coords, shapes, colours, values > 0, scale)
        if row == sizes.rows - 1 or plane + sizes.columns >= layout.planes:
            ax.set_xlabel(f"{names[layout.across]} \u2192", fontsize=9, labelpad=1)
        if column == 0 and layout.up is not None:
            ax.set_ylabel(f"{names[layout.up]} \u2191", fontsize=9, labelpad=1)

    bar_x = left + grid_width + 0.3
    bar_y = height - top_room - bar_height
    bar = figure.add_axes((bar_x / width, bar_y / height, 0.18 / width, bar_height / height))
    colourbar = figure.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=bar)
    colourbar.set_label("busy fraction (busy time / elapsed)", fontsize=9)
    colourbar.ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))
    colourbar.ax.tick_params(labelsize=8)
    swatch_y = bar_y - 0.45
    figure.add_artist(Rectangle((bar_x / width, swatch_y / height), 0.18 / width, 0.18 / height,
                                transform=figure.transFigure, facecolor=IDLE_COLOUR, edgecolor="none"))
    figure.text((bar_x + 0.26) / width, (swatch_y + 0.09) / height, "idle (0%)", fontsize=8, va="center")

    figure.text(0.2 / width, 0.15 / height, "\n".join(text_lines), ha="left", va="bottom", fontsize=font,
                linespacing=1.35)
    return figure


def _summary(topology: PhysicalTopology, values: FloatArray) -> str:
    busy = values > 0
    if not busy.any():
        return f"No link was busy ({len(values)} directed links)."
    # Per direction counts and fractions say which way traffic flowed, where a pod's arrows are only pixels wide.
    directions = []
    for axis, name in enumerate(topology.axis_names):
        for sign, mark in ((1, "+"), (-1, "-")):
            mine = (topology.link_axis == axis) & (topology.link_sign == sign)
            if mine.any():
                directions.append(f"{mark}{name} {int((busy & mine).sum())}/{int(mine.sum())} "
                                  f"({100 * values[mine].mean():.1f}%, {100 * values[mine].max():.1f}%)")
    return (
        f"{int(busy.sum())} of {len(values)} directed links busy; busiest {100 * values.max():.1f}%, "
        f"mean over busy links {100 * values[busy].mean():.1f}%. By direction, busy links (mean, busiest): "
        f"{', '.join(directions)}."
    )


def _write_atomic(figure: Figure, target: Path) -> None:
    replace_atomically(target, lambda handle: figure.savefig(handle, format="png", dpi=DPI), "link map")
