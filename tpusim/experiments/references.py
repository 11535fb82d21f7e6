"""The files an experiment's points name by path (hardware profiles, models): where they may live, and what they
hold.

A point may name a profile or a model by path. Such a file must lie in the experiment's own folder, the packaged
data or a folder in ``$TPUSIM_TRUSTED_DIRS`` (docs/results.md#files-an-experiment-names), so that an experiment
cannot read an arbitrary file of the machine into its results. Its content, as loaded (a profile with its whole
``base:`` chain merged), enters the run's configuration hash and each point's hash, so ``--resume`` never mixes
results computed from a file before and after an edit. So does the content of every profile and model a point
names by name (``tpuv4``), resolved through the catalog as the run resolves it: a named profile edited through
``$TPUSIM_CONFIG_DIR`` between two runs changes the hashes as an edited file does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tpusim.config import Point
from tpusim.config.catalog import TRUSTED_DIRS_ENV, inside_trusted, looks_like_path
from tpusim.engine.cache import cache_key
from tpusim.errors import ConfigError
from tpusim.hardware import load_hardware

__all__ = ["check_references", "digests_of", "reference_digests"]

_FIELDS = ("hardware", "model")


def _named_files(point: Point) -> list[tuple[str, str]]:
    """(field, value) of every field of ``point`` that names a file by path."""
    dumped = point.model_dump(by_alias=True)
    return [(name, dumped[name]) for name in _FIELDS
            if isinstance(dumped.get(name), str) and looks_like_path(dumped[name])]


def check_references(points: Sequence[Point], experiment_file: Path | None, source: str) -> None:
    """Refuse a point that names a file outside the experiment's folder (or the working folder for an experiment
    given as an object), the packaged data and the trusted folders."""
    home = (experiment_file.resolve().parent if experiment_file is not None else Path.cwd().resolve())
    for index, point in enumerate(points):
        for name, value in _named_files(point):
            if not inside_trusted(Path(value), home):
                raise ConfigError(f"{source} (sweep point {index}): {name}: {value!r} is outside the experiment's "
                                  f"folder {str(home)!r}; put the file there or add its folder to "
                                  f"${TRUSTED_DIRS_ENV}")


def _named_inputs(point: Point) -> list[tuple[str, str]]:
    """(field, value) of every field of ``point`` that names a profile or a model, by path or by name."""
    dumped = point.model_dump(by_alias=True)
    return [(name, dumped[name]) for name in _FIELDS if isinstance(dumped.get(name), str)]


def reference_digests(points: Sequence[Point]) -> dict[str, str]:
    """For every profile and model the points name (by path or by catalog name), a digest of its content as
    loaded (``"field:value" -> digest``)."""
    from tpusim.model.registry import load_model

    loaders = {"hardware": load_hardware, "model": load_model}
    digests: dict[str, str] = {}
    for point in points:
        for name, value in _named_inputs(point):
            key = f"{name}:{value}"
            if key not in digests:
                digests[key] = cache_key(loaders[name](value))[:16]
    return digests


def digests_of(point: Point, digests: Mapping[str, str]) -> dict[str, str]:
    """The digests of the profiles and models ``point`` names."""
    return {f"{name}:{value}": digests[f"{name}:{value}"] for name, value in _named_inputs(point)}
