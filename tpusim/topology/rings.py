"""Ring orders over the grid spanned by the pieces of one logical axis.

Pure combinatorics, no topology: given the length of each piece (and which pieces can wrap), list the
grid points in ring order, starting at the origin. Consecutive points differ by one step in exactly one
piece; whenever a one-step Hamiltonian cycle exists the last point is also one step from the origin.
A logical axis uses this order as its rank order, so logical neighbours are physical neighbours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Point = tuple[int, ...]


def snake_path(lengths: Sequence[int]) -> list[Point]:
    """Boustrophedon over a grid, first coordinate fastest: a Hamiltonian path with one step per move."""
    path: list[Point] = [()]
    for length in lengths:
        # Each new coordinate varies slower; walking the faster block backwards on its odd values keeps
        # every move a single step.
        walks = (path, path[::-1])
        path = [(*point, value) for value in range(length) for point in walks[value % 2]]
    return path


def _even_cycle(rows: int, cols: int) -> list[tuple[int, int]]:
    """(row, col) of the standard Hamiltonian cycle of a rows x cols grid with rows even and cols >= 2.

    Row 0 left to right, then snake back over columns 1..cols-1 through rows 1..rows-1, then up column 0.
    """
    cycle = [(0, col) for col in range(cols)]
    for row in range(1, rows):
        cols_in_row = range(cols - 1, 0, -1) if row % 2 == 1 else range(1, cols)
        cycle.extend((row, col) for col in cols_in_row)
    cycle.extend((row, 0) for row in range(rows - 1, 0, -1))
    return cycle


def _cylinder_path(cols: int, rows: int) -> list[tuple[int, int]]:
    """(col, row) of a Hamiltonian path from (0, 0) to (cols-1, 0) on a grid with rows odd.

    Snake over columns 0..cols-2 row by row (rows odd, so it ends in column cols-2 of the last row), then
    climb column cols-1. The end is one wrap step from the start when the columns wrap, else cols-1 steps.
    """
    path: list[tuple[int, int]] = []
    for row in range(rows):
        cols_in_row = range(cols - 1) if row % 2 == 0 else range(cols - 2, -1, -1)
        path.extend((col, row) for col in cols_in_row)
    path.extend((cols - 1, row) for row in range(rows - 1, -1, -1))
    return path


def ring_order(lengths: Sequence[int], cyclic: Sequence[bool], closing_hops: Sequence[int]) -> list[Point]:
    """Grid points of the pieces in ring order, starting at the origin.

    ``lengths[p]`` is piece p's length (>= 2), ``cyclic[p]`` whether index length-1 is one step from
    index 0, ``closing_hops[p]`` the cost of moving from index length-1 back to 0 without wrap (used to
    pick the cheapest place to close a ring that cannot close in one step). One piece gives 0..n-1.
    Several pieces: one piece is the "column" and the snake path over the others is one long "row"
    dimension; with an even side the standard cycle closes in one step; with all sides odd the ring
    closes through a wrapped column in one step, or else over the cheapest column in several.
    """
    count = len(lengths)
    if count == 0:
        return [()]
    if count == 1:
        return [(k,) for k in range(lengths[0])]
    if any(length % 2 == 0 for length in lengths):
        column = 0
    elif any(cyclic):
        column = list(cyclic).index(True)
    else:
        column = min(range(count), key=lambda p: (closing_hops[p], p))
    others = [p for p in range(count) if p != column]
    rows = snake_path([lengths[p] for p in others])
    cols = lengths[column]
    if len(rows) % 2 == 0:
        cells = [(col, row) for row, col in _even_cycle(len(rows), cols)]
    elif cols % 2 == 0:
        cells = _even_cycle(cols, len(rows))
    else:
        cells = _cylinder_path(cols, len(rows))
    order: list[Point] = []
    for col, row in cells:
        point = [0] * count
        point[column] = col
        for p, value in zip(others, rows[row], strict=True):
            point[p] = value
        order.append(tuple(point))
    return order


def ring_way(size: int, src: int, dst: int, *, closed: bool, forward_only: bool = False,
             links: Callable[[int, int, bool], int] | None = None) -> tuple[bool, int]:
    """(forward, steps) of the way from rank ``src`` to rank ``dst``: the one routing rule of every ring.

    On a line the way is straight. On a closed ring it is forward when ``forward_only`` (a unidirectional
    ring), else the way crossing fewer physical links (``links(src, steps, forward)`` counts them; by
    default one link per step), then the way with fewer steps; exact ties go forward (increasing rank).
    """
    ahead = (dst - src) % size
    if ahead == 0:
        return True, 0
    if not closed:
        return dst > src, abs(dst - src)
    behind = size - ahead
    if forward_only:
        return True, ahead
    count = links or _one_link_per_step
    forward = (count(src, ahead, True), ahead) <= (count(src, behind, False), behind)
    return forward, ahead if forward else behind


def _one_link_per_step(src: int, steps: int, forward: bool) -> int:
    del src, forward
    return steps
