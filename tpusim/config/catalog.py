"""Where named files live: the hardware profiles, models, experiments and measured runs that ship with tpusim.

They sit at the top of the source tree, in ``configs/`` (``hardware/``, ``models/``, ``measurements/``) and
``experiments/``, where a user finds them to copy and edit. A wheel carries that one copy as
``tpusim/_shipped/configs`` and ``tpusim/_shipped/experiments`` (the mapping is in setup.py); ``shipped`` is the
one place that finds them, inside the installed package or else in the source tree (a checkout, an editable
install), so names such as ``tpuv4``, ``gpt3-175b`` or ``headline`` resolve from any folder. ``$TPUSIM_CONFIG_DIR``
replaces them with a user's own tree (``hardware/*.yaml``, ``models/*.yaml``, ``experiments/<name>/experiment.yaml``).
A user's file is always taken by path: anything that ends in ``.yaml``/``.yml`` or contains a path separator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tpusim.errors import ConfigError, unknown_name

__all__ = ["CONFIG_DIR_ENV", "EXPERIMENTS", "HARDWARE", "MODELS", "SHIPPED_IN_PACKAGE", "TRUSTED_DIRS_ENV", "Catalog",
           "inside_trusted", "looks_like_path", "shipped", "trusted_folders"]

CONFIG_DIR_ENV = "TPUSIM_CONFIG_DIR"
TRUSTED_DIRS_ENV = "TPUSIM_TRUSTED_DIRS"
"""Folders (separated by ``os.pathsep``) from which experiments and profiles may reference files by path, besides
their own folder and the shipped files (docs/results.md#files-an-experiment-names)."""
SHIPPED_IN_PACKAGE = "_shipped"
"""The folder of the installed package that holds the source tree's ``configs/`` and ``experiments/``."""


def shipped(relative: str) -> Path:
    """A shipped file or folder, named by its path from the top of the source tree
    (``configs/hardware``, ``experiments``, ``configs/measurements/calibration.csv``)."""
    package = files("tpusim")
    if not isinstance(package, Path):  # a zipped install: its files are not on disk
        raise ConfigError(f"tpusim's shipped files are not on disk ({package}); install tpusim unzipped")
    installed = package / SHIPPED_IN_PACKAGE
    return (installed if installed.is_dir() else package.parent) / relative


def trusted_folders() -> list[Path]:
    """The shipped folders (or ``$TPUSIM_CONFIG_DIR``) and every folder in ``$TPUSIM_TRUSTED_DIRS``, resolved."""
    override = os.environ.get(CONFIG_DIR_ENV)
    folders = [Path(override)] if override else [shipped("configs"), shipped("experiments")]
    folders += [Path(entry) for entry in os.environ.get(TRUSTED_DIRS_ENV, "").split(os.pathsep) if entry]
    return [folder.resolve() for folder in folders]


def inside_trusted(path: Path, home: Path) -> bool:
    """Whether ``path``, with every symbolic link resolved, lies inside ``home`` (a resolved folder) or one of the
    ``trusted_folders``."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return False
    return any(real.is_relative_to(folder) for folder in (home, *trusted_folders()))


def looks_like_path(text: str) -> bool:
    """Whether a name given by the user means a file rather than a packaged name."""
    return text.endswith((".yaml", ".yml")) or "/" in text or os.sep in text


@dataclass(frozen=True)
class Catalog:
    """The named files of one kind: ``folder/<name>.yaml``, or ``folder/<name>/<entry>`` when ``entry`` is set."""

    what: str
    folder: str
    home: str
    """Where the shipped files are, from the top of the source tree."""
    entry: str | None = None

    def root(self) -> Path:
        """``$TPUSIM_CONFIG_DIR/<folder>`` if the variable is set, else the shipped folder."""
        override = os.environ.get(CONFIG_DIR_ENV)
        return Path(override) / self.folder if override else shipped(self.home)

    def names(self) -> list[str]:
        """The names available, sorted; an error when the folder is missing, unreadable or empty."""
        root = self.root()
        source = f"{CONFIG_DIR_ENV}={os.environ[CONFIG_DIR_ENV]!r}" if os.environ.get(CONFIG_DIR_ENV) else "tpusim"
        try:
            if self.entry is None:
                found = sorted(p.stem for p in root.iterdir() if p.suffix == ".yaml" and p.is_file())
            else:
                found = sorted(p.name for p in root.iterdir() if (p / self.entry).is_file())
        except OSError as error:
            raise ConfigError(f"cannot read the {self.what} folder {str(root)!r} (from {source}): "
                              f"{error.strerror or error}") from None
        if not found:
            raise ConfigError(f"no {self.what} files in {str(root)!r} (from {source})",
                              f"unset {CONFIG_DIR_ENV}, or put files there" if source != "tpusim" else None)
        return found

    def path(self, name: str) -> Path:
        """The file of a packaged name; an unknown name is an error listing the known ones."""
        names = self.names()
        if name not in names:
            raise unknown_name(self.what, name, names)
        return self.root() / (f"{name}.yaml" if self.entry is None else f"{name}/{self.entry}")

    def resolve(self, name_or_path: str) -> Path:
        """A user's file by path, or a packaged one by name."""
        return Path(name_or_path) if looks_like_path(name_or_path) else self.path(name_or_path)

    def shown(self, path: Path) -> str:
        """How messages name ``path``: ``<folder>/<file>`` for the catalog's own files (``hardware/tpuv4.yaml``)."""
        try:
            return str(Path(self.folder) / path.resolve().relative_to(self.root().resolve()))
        except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
            from tpusim.config.loader import display_path

            return display_path(path)


HARDWARE = Catalog("hardware profile", "hardware", "configs/hardware")
MODELS = Catalog("model", "models", "configs/models")
EXPERIMENTS = Catalog("experiment", "experiments", "experiments", "experiment.yaml")
