"""Loading an experiment file and expanding its sweep into points, with every point validated up front.

Dotted keys address fields of the point (``scale.beta``, ``slow_links``). Each expanded point
is validated as a whole, so an impossible combination is reported before anything runs, naming the file,
the point index and the key path.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpusim.config import Experiment, Point
from tpusim.config.catalog import EXPERIMENTS
from tpusim.config.loader import load_yaml, validate
from tpusim.config.requests import REQUESTS
from tpusim.errors import ConfigError, UserError, closest
from tpusim.limits import LimitError, exceeds
from tpusim.units import UnitError, parse_size


def load_experiment(name_or_path: Path | str) -> Experiment:
    """An experiment by packaged name (``"headline"``) or by path to a YAML file, strictly validated."""
    path = name_or_path if isinstance(name_or_path, Path) else EXPERIMENTS.resolve(name_or_path)
    shown = EXPERIMENTS.shown(path)
    return validate(Experiment, load_yaml(path, "experiment", shown), shown)


def _set(target: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    node = target
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: sweep key {dotted!r}: {key!r} is not a mapping")
        node = child
    node[keys[-1]] = value


def _matches(point: dict[str, Any], pattern: dict[str, Any]) -> bool:
    for dotted, value in pattern.items():
        node: Any = point
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        if not _same(node, value):
            return False
    return True


def _same(value: Any, pattern: Any) -> bool:
    """Whether a point's value is the pattern's: equal, or the same quantity written two ways (``1MB`` and
    ``1000000``, ``"16"`` and ``16``), which the point's validation would read alike."""
    if value == pattern:
        return True
    if not (isinstance(value, str) or isinstance(pattern, str)):
        return False
    try:
        return parse_size(value, allow_zero=True) == parse_size(pattern, allow_zero=True)
    except UnitError:
        return False


def _kind_fields(kind: str) -> set[str]:
    """The keys a point of ``kind`` has (by their YAML names)."""
    for request in REQUESTS:
        if request.model_fields["kind"].default == kind:
            return {field.alias or name for name, field in request.model_fields.items()}
    return set()


def _point(base: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    """``base`` with the dotted ``overrides`` laid over it. Where they change the kind, the base's keys the new
    kind does not have are dropped (keys the overrides write themselves must belong to the new kind)."""
    point: dict[str, Any] = json.loads(json.dumps(base, allow_nan=False))
    kind = overrides.get("kind", point.get("kind", "step"))
    if kind != point.get("kind", "step"):
        own = _kind_fields(str(kind))
        point = {key: value for key, value in point.items() if key in own}
    for key, value in overrides.items():
        _set(point, key, value, source)
    return point


def planned_points(experiment: Experiment) -> int:
    """How many points the sweep names before ``exclude`` removes any: the product of the grid's list lengths
    plus the include list (computed without building a point)."""
    sweep = experiment.sweep
    grid = math.prod(len(values) for values in sweep.grid.values()) if sweep.grid or not sweep.include else 0
    return grid + len(sweep.include)


def _dotted_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key path of a nested mapping, dotted (``scale``, ``scale.beta``, ...)."""
    found: set[str] = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        found.add(path)
        if isinstance(value, dict):
            found |= _dotted_keys(value, f"{path}.")
    return found


def _check_exclude_keys(patterns: list[dict[str, Any]], known: dict[str, set[str]], source: str) -> None:
    """An exclude key that no point has would silently exclude nothing: refuse it, as include typos are."""
    valid = set().union(*known.values()) if known else set()
    for number, pattern in enumerate(patterns):
        for dotted in pattern:
            if not isinstance(dotted, str) or dotted not in valid:
                top = sorted(k for k in valid if "." not in k)
                guess = closest(str(dotted), sorted(valid))
                raise ConfigError(f"{source}: sweep.exclude[{number}]: unknown key {dotted!r}; valid keys: "
                                  f"{', '.join(top)} (dotted for nested ones, e.g. scale.beta)",
                                  f"did you mean {guess!r}?" if guess else None)


def expand(experiment: Experiment, source: str = "experiment", max_points: int | None = None) -> list[Point]:
    """The sweep's points in order: the grid's product (last key fastest), minus exclude, plus include.

    Its size is checked before any point is built: against the ``sweep_points`` limit always, and against
    ``max_points`` when given (the caller passes the file's unless told to run large sweeps)."""
    sweep = experiment.sweep
    planned = planned_points(experiment)
    counted = f"{planned} points{' before exclude' if sweep.exclude else ''}"
    too_many = exceeds("sweep_points", planned)
    if too_many is not None:
        raise LimitError(f"{source}: the sweep has {counted}, which {too_many}")
    if max_points is not None and planned > max_points:
        raise UserError(f"{source}: the sweep has {counted}, above its max_points of {max_points}; rerun with "
                        "--yes to run them all")
    # only what the file sets: a grid or include that changes the kind then carries no other kind's defaults
    base = experiment.point.model_dump(by_alias=True, exclude_unset=True)
    base["kind"] = experiment.point.kind
    keys = list(sweep.grid)
    # with no grid, an include list is the whole sweep (the base point alone is not run as well)
    grid = itertools.product(*(sweep.grid[k] for k in keys)) if keys or not sweep.include else iter(())
    points: list[Point] = []
    index = 0
    known: dict[str, set[str]] = {}  # the dotted keys of each kind's points, for checking exclude patterns
    for values in grid:
        point = validate(Point, _point(base, dict(zip(keys, values, strict=True)), source),
                         f"{source} (sweep point {index})")
        index += 1
        dumped = point.model_dump(by_alias=True)
        if sweep.exclude and point.kind not in known:
            known[point.kind] = _dotted_keys(dumped)
        if not any(_matches(dumped, pattern) for pattern in sweep.exclude):
            points.append(point)
    _check_exclude_keys(sweep.exclude, known, source)
    for extra in sweep.include:
        points.append(validate(Point, _point(base, extra, source), f"{source} (sweep point {index})"))
        index += 1
    if not points:
        raise UserError(f"{source}: the sweep has no points (every grid point is excluded)")
    return points


def crossed(experiment: Experiment, key: str, values: list[Any], exclude: list[dict[str, Any]],
            source: str = "experiment") -> Experiment:
    """``experiment`` with every point, the grid's and the include list's alike, run once per value of ``key``
    (which the sweep must not already vary), except where a point so made matches a pattern of ``exclude``."""
    sweep = experiment.sweep
    if key in sweep.grid or any(key in extra for extra in sweep.include):
        raise UserError(f"{source}: the sweep already varies {key!r}, so it cannot be run under another {key} list")
    base = experiment.point.model_dump(by_alias=True, exclude_unset=True)
    base["kind"] = experiment.point.kind
    include = []
    for extra in sweep.include:
        for value in values:
            laid = {**extra, key: value}
            dumped = validate(Point, _point(base, laid, source), source).model_dump(by_alias=True)
            if not any(_matches(dumped, pattern) for pattern in exclude):
                include.append(laid)
    grown = sweep.model_copy(update={"grid": {**sweep.grid, key: list(values)}, "include": include,
                                     "exclude": [*sweep.exclude, *exclude]})
    return experiment.model_copy(update={"sweep": grown})


def canonical(data: Any) -> str:
    """Deterministic JSON text (sorted keys) used for hashing and for result files."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _hashed(data: Any, files: Mapping[str, str] | None) -> str:
    # the content of named files joins the hash only where there are any, so other hashes stay as they were
    content = {"config": data, "files": dict(files)} if files else data
    return hashlib.sha256(canonical(content).encode()).hexdigest()[:16]


def point_hash(point: Point, files: Mapping[str, str] | None = None) -> str:
    """The identity of a point: its settings, and the content of the files it names (``references.digests_of``)."""
    return _hashed(point.model_dump(by_alias=True), files)


def experiment_hash(experiment: Experiment, files: Mapping[str, str] | None = None) -> str:
    """The identity of a run's configuration: the experiment, and the content of every file its points name."""
    return _hashed(experiment.model_dump(by_alias=True), files)
