"""``--link-map FILE.png`` of ``collective``, ``gemm`` and ``step``: the path checked before any simulation, the
picture and the busiest links after the run (docs/network.md#link-maps).

The colour of a link is its busy time (serialization plus per-transfer handshake) over the run's simulated time;
for a step, over the whole step, extrapolated like the step time. Drawing (and matplotlib) is imported only once a
run has finished, so the commands start as fast without the flag.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from tpusim.cli.common import UsageError
from tpusim.engine.trace import check_output_file
from tpusim.errors import OutputPathError, SimulationError
from tpusim.units import format_time
from tpusim.vocabulary import Fidelity

if TYPE_CHECKING:
    from tpusim.collectives.link_busy import LinkBusy

__all__ = ["BUSIEST_LINKS", "add_link_map_argument", "check_link_map_path", "finish_link_map", "start_link_map"]

BUSIEST_LINKS = 5  # links named under the picture and in the notes
SUFFIX = ".png"


def add_link_map_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--link-map", metavar="FILE.png",
                        help="draw every directed ICI link coloured by its busy fraction (busy time / simulated "
                             "time) into this PNG and name the busiest links; needs a physical hardware profile "
                             "and a simulating fidelity (not analytic)")


def check_link_map_path(text: str) -> Path:
    """The path of the picture, refused in one line if it cannot be written."""
    if not text.strip():
        raise OutputPathError("--link-map '' is empty; give a .png file path such as linkmap.png")
    path = Path(text)
    if not path.is_dir() and path.suffix.lower() != SUFFIX:  # a folder is refused as one, just below
        raise OutputPathError(f"--link-map {text!r} does not end in .png; the link map is a PNG picture")
    check_output_file(path, f"--link-map {text!r}",
                      f"is a folder; give a .png file path such as {str(path / 'linkmap.png')!r}")
    return path


def start_link_map(path: str | None, fidelity: Fidelity | None = None) -> LinkBusy | None:
    """What the run fills for ``--link-map`` (None without the flag), after checking the path and that the
    fidelity simulates links."""
    if path is None:
        return None
    check_link_map_path(path)
    if fidelity is Fidelity.ANALYTIC:
        raise UsageError("--link-map needs simulated links but --fidelity analytic simulates none; "
                         "use auto, symmetric or full")
    from tpusim.collectives.link_busy import LinkBusy

    return LinkBusy()


def finish_link_map(link_busy: LinkBusy | None, path: str | None, elapsed: float, what: str,
                    notes: list[str]) -> None:
    """Draw the run's link busy fractions into ``path`` (titled ``what`` ran) and name the busiest links in
    ``notes``."""
    if link_busy is None or path is None:
        return
    import numpy as np

    from tpusim.experiments.linkmap import draw_link_map

    seconds, topology = link_busy.seconds, link_busy.topology
    if seconds is None or topology is None:
        raise SimulationError("the run left no link busy times to draw")
    utilisation = seconds / elapsed if elapsed > 0 else np.zeros(len(seconds))
    span = f"{link_busy.scope} ({format_time(elapsed)})"
    title = f"{what}\nlink busy fraction: busy time / {span}"
    try:
        lines = draw_link_map(topology, utilisation, path, title=title, top=BUSIEST_LINKS)
    except OSError as error:  # the folder vanished or filled up during the run
        raise OutputPathError(f"--link-map {path!r} could not be written: {error.strerror or error}") from None
    notes.append(f"link map written to {path}: busy time of every directed link / {span}")
    notes.extend(f"busiest {line}" for line in lines)
