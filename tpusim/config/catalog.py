"""Where named files live: the hardware profiles, models and experiments that ship inside the package.

tpusim installs its profiles, models and experiment families as package data (``tpusim/data/``), read through
``importlib.resources``, so names such as ``tpuv4``, ``gpt3-175b`` or ``headline`` resolve from any folder
after a plain ``pip install``. ``$TPUSIM_CONFIG_DIR`` replaces that folder with a user's own tree of the same
layout (``hardware/*.yaml``, ``models/*.yaml``, ``experiments/<name>/experiment.yaml``). A user's file is always
taken by path: anything that ends in ``.yaml``/``.yml`` or contains a path separator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from tpusim.errors import ConfigError, unknown_name

__all__ = ["CONFIG_DIR_ENV", "EXPERIMENTS", "HARDWARE", "MODELS", "TRUSTED_DIRS_ENV", "Catalog", "data_root",
           "inside_trusted", "looks_like_path", "trusted_folders"]

CONFIG_DIR_ENV = "TPUSIM_CONFIG_DIR"
TRUSTED_DIRS_ENV = "TPUSIM_TRUSTED_DIRS"
"""Folders (separated by ``os.pathsep``) from which experiments and profiles may reference files by path, besides
their own folder and the packaged data (docs/results.md#files-an-experiment-names)."""


def data_root() -> Path:
    """The folder named files come from: ``$TPUSIM_CONFIG_DIR`` if set, else the package's own data."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    packaged = files("tpusim") / "data"
    if not isinstance(packaged, Path):  # a zipped install: its files are not on disk
        raise ConfigError(f"tpusim's packaged data is not a folder on disk ({packaged}); install tpusim unzipped")
    return packaged


def trusted_folders() -> list[Path]:
    """The packaged (or ``$TPUSIM_CONFIG_DIR``) data and every folder in ``$TPUSIM_TRUSTED_DIRS``, resolved."""
    folders = [data_root()]
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
    entry: str | None = None

    def root(self) -> Path:
        return data_root() / self.folder

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
        """How messages name ``path``: relative to the catalog for its own files (``hardware/tpuv4.yaml``)."""
        try:
            return str(path.resolve().relative_to(data_root().resolve()))
        except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
            from tpusim.config.loader import display_path

            return display_path(path)


HARDWARE = Catalog("hardware profile", "hardware")
MODELS = Catalog("model", "models")
EXPERIMENTS = Catalog("experiment", "experiments", "experiment.yaml")
