"""Plug-ins: modules outside tpusim that register algorithms, loaded when the algorithm registry is imported.

Two routes name them (docs/extending.md#plug-ins):

- the entry-point group ``tpusim.plugins`` of every installed distribution: each entry point is a module, imported
  for what it registers, or a callable taking no arguments, called once;
- ``$TPUSIM_PLUGINS``: importable module names separated by commas, imported in that order.

``tpusim.gemm.registry`` calls ``load_plugins`` as the last step of its own import. A module body runs once per
process, so plug-ins load once in each process that resolves an algorithm name: the command line, ``run``'s and
``tune``'s worker processes (which import the registry again when they start) and Dask workers alike. A plug-in
that fails to load is one ``PluginError`` line (exit status 2) naming it, the exception's type and its message.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

from tpusim.errors import UserError
from tpusim.limits import shorten

__all__ = ["ENTRY_POINT_GROUP", "PLUGINS_ENV", "PluginError", "load_plugins", "plugin_modules"]

ENTRY_POINT_GROUP = "tpusim.plugins"
PLUGINS_ENV = "TPUSIM_PLUGINS"
_NAME_CHARS = 80
"""How much of a plug-in's name an error quotes (the environment may hold anything)."""
_REASON_CHARS = 200
"""How much of the exception's message an error quotes: enough to say what failed, never a page of text."""


class PluginError(UserError):
    """A plug-in module or entry point that could not be imported or called."""


def plugin_modules() -> list[str]:
    """The module names in ``$TPUSIM_PLUGINS``, in order (blank entries ignored)."""
    return [part.strip() for part in os.environ.get(PLUGINS_ENV, "").split(",") if part.strip()]


def _failure(name: str, source: str, error: Exception) -> PluginError:
    reason = " ".join(str(error).split())  # one line, whatever the exception's text holds
    return PluginError(f"plug-in {shorten(name, _NAME_CHARS)!r} ({source}) failed to load: "
                       f"{type(error).__name__}: {shorten(reason, _REASON_CHARS)}")


def _load_entry_point(entry: EntryPoint) -> None:
    target = entry.load()
    if not isinstance(target, ModuleType):
        if not callable(target):
            raise TypeError(f"{entry.value} is neither a module nor a callable")
        target()


def load_plugins() -> None:
    """Import every plug-in of the entry-point group, then every module of ``$TPUSIM_PLUGINS``."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            _load_entry_point(entry)
        except Exception as error:  # whatever a third-party module raises, the user sees one line
            raise _failure(entry.value, f"entry point {entry.name!r} of group {ENTRY_POINT_GROUP}", error) from None
    for name in plugin_modules():
        try:
            importlib.import_module(name)
        except Exception as error:  # see above
            raise _failure(name, f"named in ${PLUGINS_ENV}", error) from None
