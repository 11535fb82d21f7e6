"""The names an experiment's points use (hardware profile, model, algorithm), checked before any point runs, and
the one place outside the registry that turns an algorithm's name into its object (``algorithm_named``): every
runner resolves a request's algorithm here, once, and hands the object on.

A name that is not registered would otherwise fail each point that uses it at run time, as rows of errors in
an otherwise finished run; here the first one is one ``UnknownNameError`` line (exit status 2) naming the file,
the sweep point and the field, with the valid names, and nothing has been run or written. Files named by path are
read by ``references`` (which refuses a missing one the same way, before the run); profile and model objects
given through the Python API need no check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tpusim.config import Point
from tpusim.config.catalog import HARDWARE, MODELS, looks_like_path
from tpusim.config.requests import EVERY_ALGORITHM
from tpusim.errors import UnknownNameError

if TYPE_CHECKING:
    from tpusim.gemm.algorithm import GemmAlgorithm

__all__ = ["algorithm_named", "check_names"]


def algorithm_named(name: str) -> GemmAlgorithm:
    """The registered algorithm ``name``; an unknown name is one ``UnknownNameError`` listing the known ones."""
    from tpusim.gemm.registry import get_algorithm  # the registry (and its plug-ins) only for requests with one

    return get_algorithm(name)


def _checks(point: Point) -> list[tuple[str, str, Callable[[str], object]]]:
    """(field, name, resolver) of every field of ``point`` that names a registered thing."""
    dumped = point.model_dump(by_alias=True)
    found: list[tuple[str, str, Callable[[str], object]]] = []
    for field, resolve in (("hardware", HARDWARE.path), ("model", MODELS.path)):
        value = dumped.get(field)
        if isinstance(value, str) and not looks_like_path(value):
            found.append((field, value, resolve))
    algorithm = dumped.get("algorithm")
    if isinstance(algorithm, str) and not (point.kind == "tune" and algorithm == EVERY_ALGORITHM):
        found.append(("algorithm", algorithm, algorithm_named))
    return found


def check_names(points: Sequence[Point], source: str) -> None:
    """Refuse the first point whose hardware, model or algorithm names nothing registered."""
    checked: set[tuple[str, str]] = set()
    for index, point in enumerate(points):
        for field, name, resolve in _checks(point):
            if (field, name) in checked:
                continue
            try:
                resolve(name)
            except UnknownNameError as error:
                raise UnknownNameError(f"{source} (sweep point {index}): {field}: {error.message}",
                                       error.suggestion) from None
            checked.add((field, name))
