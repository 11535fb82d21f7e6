"""Command-line flags derived from a request model, and the request built back from the parsed flags.

Every field of a request becomes ``--field-name`` with the field's description as its help text; booleans are
switches, lists are repeatable flags, the nested ``scale`` block becomes ``--scale-alpha`` and friends. Values
reach the request model as the text the user typed, so a bad one is reported with its flag and verbatim
(``--chips '0' must be an integer >= 1``).
"""

from __future__ import annotations

import argparse
import typing
from enum import Enum
from types import MappingProxyType
from typing import Any

from pydantic.fields import FieldInfo

from tpusim.config.requests import Metavar, Request, Scale, parse_request

__all__ = ["add_request_arguments", "flag_of", "request_from_args"]

# repeatable flags read better singular: each occurrence adds one entry
_FLAGS = MappingProxyType({"slow_chips": "--slow-chip", "slow_links": "--slow-link"})


def flag_of(field: str) -> str:
    """The command-line flag of a request field (``bytes_per_param`` -> ``--bytes-per-param``)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _dest(field: str) -> str:
    return f"request_{field}"


def _types(annotation: Any) -> list[Any]:
    """Every type named inside an annotation (through unions, Annotated and containers)."""
    found = [annotation]
    for arg in typing.get_args(annotation):
        found.extend(_types(arg))
    return found


def _is_switch(field: FieldInfo) -> bool:
    return field.annotation is bool


def _is_list(field: FieldInfo) -> bool:
    return typing.get_origin(field.annotation) is list and field.default_factory is list


def _choices(field: FieldInfo) -> list[str] | None:
    """The names a field takes: those its schema lists, else those of the choice type inside it."""
    extra = field.json_schema_extra
    names = extra.get("enum") if isinstance(extra, dict) else None
    if isinstance(names, list):
        return [str(value) for value in names]
    for kind in _types(field.annotation):
        if isinstance(kind, type) and issubclass(kind, Enum):
            return [str(member.value) for member in kind]
    return None


def _declared_metavar(field: FieldInfo) -> str | None:
    return next((item.text for item in field.metadata if isinstance(item, Metavar)), None)


def _metavar(name: str, field: FieldInfo) -> str:
    declared, choices = _declared_metavar(field), _choices(field)
    if declared is not None:
        return declared
    return "{" + ",".join(choices) + "}" if choices is not None else name.upper()


def _help(field: FieldInfo) -> str:
    text = field.description or ""
    choices = _choices(field)
    if _declared_metavar(field) is not None and choices is not None:  # the usage shows a list, not the names
        text += f"; each one of {', '.join(choices)}"
    if field.is_required():
        return text + " (required)"
    default = field.get_default(call_default_factory=True)
    if default not in (None, False, [], ()) and not isinstance(default, Scale) and "default:" not in text:
        shown = default.value if isinstance(default, Enum) else (
            ",".join(str(getattr(d, "value", d)) for d in default) if isinstance(default, tuple) else default)
        text += f" (default {shown})"
    return text


def add_request_arguments(parser: argparse.ArgumentParser, kind: type[Request]) -> None:
    """A flag for every field of ``kind``: the required ones first, then the others in declaration order."""
    fields = sorted(kind.model_fields.items(), key=lambda item: not item[1].is_required())
    for name, field in fields:
        if name == "kind":
            continue
        if name == "scale":
            for sub, sub_field in Scale.model_fields.items():
                key = sub_field.alias or sub
                parser.add_argument(flag_of(f"scale_{key}"), dest=_dest(f"scale_{key}"), metavar="FACTOR",
                                    help=f"scale.{key}: {sub_field.description}")
            continue
        flag = flag_of(name)
        if _is_switch(field):
            parser.add_argument(flag, dest=_dest(name), action="store_true", help=_help(field))
        elif _is_list(field):
            parser.add_argument(flag, dest=_dest(name), action="append", default=[],
                                metavar=_declared_metavar(field) or name.upper(), help=_help(field))
        else:
            parser.add_argument(flag, dest=_dest(name), required=field.is_required(), metavar=_metavar(name, field),
                                help=_help(field))


def request_from_args(kind: type[Request], args: argparse.Namespace) -> Request:
    """The request of ``kind`` the parsed flags describe; bad values raise one line naming the flag."""
    data: dict[str, Any] = {}
    for name, field in kind.model_fields.items():
        if name == "kind":
            continue
        if name == "scale":
            scale = {key: value for key in (f.alias or n for n, f in Scale.model_fields.items())
                     if (value := getattr(args, _dest(f"scale_{key}"))) is not None}
            if scale:
                data["scale"] = scale
            continue
        value = getattr(args, _dest(name))
        if value is None or (value is False and _is_switch(field)) or (value == [] and _is_list(field)):
            continue
        data[name] = value
    return parse_request(kind, data, label=flag_of)
