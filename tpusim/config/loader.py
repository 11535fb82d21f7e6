"""Strict YAML loading and validation shared by every configuration file.

Reads YAML (floats such as ``5e-6`` recognised, duplicate keys rejected), validates it against a frozen
pydantic model and turns the first problem into one :class:`~tpusim.errors.ConfigError` line that names the
file, the key path, the bad value and what would be valid. Also defines the quantity types (bytes, B/s,
seconds, FLOP/s) that accept either SI numbers or strings with units.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import PydanticCustomError

from tpusim.errors import ConfigError, closest, echo
from tpusim.files import DIRECTORY, FileRefused, read_bounded
from tpusim.limits import LimitError, exceeds
from tpusim.units import UnitError, parse_bandwidth, parse_flops, parse_size, parse_time

__all__ = [
    "Bytes",
    "BytesPerSecond",
    "FlopsPerSecond",
    "FrozenModel",
    "Problem",
    "Seconds",
    "deep_merge",
    "display_path",
    "load_yaml",
    "problem",
    "read_bounded_text",
    "validate",
]

M = TypeVar("M", bound=BaseModel)


class FrozenModel(BaseModel):
    """Base of every configuration model: unknown keys are errors and a loaded config never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# ---------------------------------------------------------------------------------------------- problems


class Problem:
    """How a custom validation error reads, wherever it is reported (a YAML key path, a CLI flag, an API keyword).

    ``rule`` reads after the label and the value as given (``--chips '0' must be an integer >= 1``);
    ``labelled`` after the label and a colon (``--bytes: size '0' must be ...``); ``plain`` stands alone
    (``unknown dataflow 'xs'; valid: ls, os, rs``). ``category`` names the error class it becomes outside YAML
    files: "unknown_name", "topology", "infeasible" or "user".
    """

    RULE = "rule"
    LABELLED = "labelled"
    PLAIN = "plain"


def problem(text: str, *, style: str = Problem.RULE, suggestion: str | None = None,
            category: str = "user") -> PydanticCustomError:
    """A validation error carrying one of the ``Problem`` styles (raise it inside a validator)."""
    return PydanticCustomError("tpusim", "{text}", {"text": text, "style": style, "suggestion": suggestion or "",
                                                     "category": category})


def _not_a_boolean(value: Any) -> Any:
    """``value`` unchanged unless it is True or False, which pydantic would otherwise take as the integer 1 or 0."""
    if isinstance(value, bool):
        raise problem("must be a whole number, not true or false")
    return value


WHOLE_NUMBER = BeforeValidator(_not_a_boolean)
"""Put in the ``Annotated`` of an integer field of a file's model: a YAML ``true`` or ``false`` is refused there
(``layers: true`` is not one layer)."""


def render_problem(error: Any, label: str, shown: str) -> str:
    """A ``problem`` error as one line, for a value labelled ``label`` and shown as ``shown``."""
    ctx = error["ctx"]
    if ctx["style"] == Problem.RULE:
        return f"{label} {shown} {ctx['text']}"
    if ctx["style"] == Problem.LABELLED:
        return f"{label}: {ctx['text']}"
    return str(ctx["text"])


# ---------------------------------------------------------------------------------------------- quantities


# Physically meaningful ranges (docs/limits.md#hardware-profile-ranges): far outside any real device, yet tight
# enough that a step time stays a finite float (1e-300 FLOP/s would make every time overflow to inf).
MIN_FLOPS = 1e6
"""FLOP/s: a 1980s CPU; every accelerator tpusim models runs 1e12 and more."""
MIN_BANDWIDTH = 1.0
"""B/s: any link or memory is more than a billion times faster."""
MAX_SECONDS = 1.0
"""A latency or fixed overhead: real ones are microseconds, the slowest software launch milliseconds."""


def _quantity(parse: Callable[[Any], float], what: str, low: float | None = None, high: float | None = None,
              unit: str = "") -> BeforeValidator:
    def check(value: Any) -> float:
        number = _parsed(value)
        if (low is not None and number < low) or (high is not None and number > high):
            bound = f">= {low:g} {unit}" if low is not None else f"<= {high:g} {unit}"
            message = f"{what} {value!r} is outside the range of any real device; valid: {bound}"
            raise PydanticCustomError("quantity", "{message}", {"message": message})
        return number

    def _parsed(value: Any) -> float:
        # bool is an int subclass; the parsers reject it themselves with a clearer message.
        if not isinstance(value, str | int | float):
            message = f"{what} {value!r} must be a number or a string with a unit"
            raise PydanticCustomError("quantity", "{message}", {"message": message})
        try:
            return parse(value)
        except UnitError as exc:
            # A custom error keeps the unit parser's text as the whole message (no "Value error, " prefix).
            raise PydanticCustomError("quantity", "{message}", {"message": str(exc)}) from None

    return BeforeValidator(check)


Bytes = Annotated[float, _quantity(parse_size, "size")]
"""Bytes (> 0): a number, or a string such as ``"32 GiB"`` or ``"64MB"``."""

BytesPerSecond = Annotated[float, _quantity(parse_bandwidth, "bandwidth", low=MIN_BANDWIDTH, unit="B/s")]
"""Bytes per second (>= 1): a number, or a string such as ``"45 GB/s"``."""

Seconds = Annotated[float, _quantity(parse_time, "time", high=MAX_SECONDS, unit="s")]
"""Seconds (0 to 1): a number, or a string such as ``"1 us"``."""

FlopsPerSecond = Annotated[float, _quantity(parse_flops, "compute rate", low=MIN_FLOPS, unit="FLOP/s")]
"""FLOP per second (>= 1e6): a number, or a string such as ``"275 TFLOP/s"``."""


# ---------------------------------------------------------------------------------------------- YAML


MAX_YAML_DEPTH = 64
"""Nesting of YAML collections allowed in a file: tpusim's own files nest 4 deep; PyYAML's composer recurses per
level, so 100,000 brackets would otherwise end in RecursionError."""


class _TooLarge(yaml.YAMLError):
    """A YAML document refused while composing: nested too deep, or too many nodes once aliases are expanded."""

    def __init__(self, message: str, mark: yaml.Mark | None, limit: bool) -> None:
        super().__init__(message)
        self.message, self.mark, self.limit = message, mark, limit


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-6`` as a float (YAML 1.2), refuses duplicate keys, nesting deeper than
    ``MAX_YAML_DEPTH`` and documents whose alias-expanded size exceeds the ``yaml_nodes`` limit.

    Aliases cost nothing while composing (an alias is the anchored node itself), but whatever walks the data
    afterwards (validation, copying, hashing) sees every use in full: nine nested lists of nine aliases are 9**9
    nodes from a few hundred bytes ("billion laughs"). So each node's expanded size (itself plus its children's,
    an alias counting the full size of its anchor) is computed as it is composed and checked against the limit.
    Counting nodes alone lets one long string through: 100,000 aliases of a 100 kB string are 100,001 nodes but
    10 GB of text once walked, so the bytes of scalar text each node holds with its aliases expanded are counted
    alike and checked against the ``yaml_bytes`` limit.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded: dict[int, int] = {}  # id of a composed node -> its size with aliases expanded
        self._text_bytes: dict[int, int] = {}  # id of a composed node -> its scalar text's bytes, aliases expanded
        # text met so far, each alias at its anchor's expanded size: at most the document's expanded text, so it is
        # checked at every alias and a document of 100,000 aliases is refused at the first few hundred
        self._text_so_far = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark: yaml.Mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self._expanded:
                raise _TooLarge("an alias refers to a collection that contains it (a recursive alias)", mark, False)
            self._text_so_far += self._text_bytes[id(node)]
            self._check_text(self._text_so_far, mark)
            return node
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise _TooLarge(f"collections nested more than {MAX_YAML_DEPTH} deep; valid: at most {MAX_YAML_DEPTH} "
                            "levels", mark, False)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        children = _children(node)
        size = 1 + sum(self._expanded[id(child)] for child in children)
        self._expanded[id(node)] = size
        too_many = exceeds("yaml_nodes", size)
        if too_many is not None:
            raise _TooLarge(f"the YAML expands to {size} nodes (aliases counted at every use), "
                            f"which {too_many}", mark, True)
        if isinstance(node, yaml.ScalarNode):
            text = len(node.value.encode("utf-8", "surrogatepass"))
            self._text_so_far += text
        else:
            text = sum(self._text_bytes[id(child)] for child in children)
        self._text_bytes[id(node)] = text
        self._check_text(max(text, self._text_so_far), mark)
        return node

    @staticmethod
    def _check_text(text: int, mark: yaml.Mark) -> None:
        too_long = exceeds("yaml_bytes", text)
        if too_long is not None:
            raise _TooLarge(f"the YAML expands to at least {text} bytes of text (aliases counted at every "
                            f"use), which {too_long}", mark, True)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: the base class reports it with a proper mark
                continue
            if duplicate:
                raise _DuplicateKey(
                    "while constructing a mapping", node.start_mark, f"duplicate key {key_text(key)}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one mapping (its message quotes the key only if it is a plain name: ``key_text``)."""


def _children(node: yaml.Node | None) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


# PyYAML follows YAML 1.1, where a float needs a dot: "5e-6" and "45e9" would silently become strings.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def display_path(path: Path | str) -> str:
    """The path as shown in messages: relative to the working directory when inside it, else as given."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return str(path)


def load_yaml(path: Path | str, what: str = "YAML", shown: str | None = None) -> Any:
    """The parsed content of a YAML file; ``what`` names the kind of file in the error (e.g. "experiment") and
    ``shown`` how to name the file (default: its path relative to the working folder)."""
    shown = shown if shown is not None else display_path(path)
    text = _read_text(Path(path), what, shown)
    try:
        # _StrictLoader derives from SafeLoader, so no arbitrary Python objects are constructed.
        return yaml.load(text, Loader=_StrictLoader)
    except _TooLarge as exc:
        line = f":{exc.mark.line + 1}" if exc.mark is not None else ""
        raise (LimitError if exc.limit else ConfigError)(f"{shown}{line}: {exc.message}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed YAML"
        problem = problem if isinstance(exc, _DuplicateKey) else _unquoted(problem)
        raise ConfigError(f"{shown}{line}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: YAML syntax error: {exc}") from None


def _read_text(path: Path, what: str, shown: str, valid: str = "a YAML file", limit: str = "file_bytes") -> str:
    """The file's text, read (``tpusim.files.read_bounded``) only if it is a regular file within the size limit
    ``limit``: ``/dev/zero`` would never end and a FIFO would block, so neither is read. ``valid`` says what the
    file should have been. A link to a regular file is followed: a user may name a file through one."""
    try:
        data = read_bounded(path, f"{what} file", limit, follow=True)
    except FileRefused as refused:
        if refused.too_large:
            raise LimitError(f"{what} file {shown!r} is larger than the limit: {refused.reason}") from None
        if refused.kind is None:
            raise ConfigError(f"cannot read {what} file {shown!r}: {refused.reason}") from None
        reason = "Is a directory" if refused.kind == DIRECTORY else "not a regular file (a device, FIFO or socket)"
        raise ConfigError(f"cannot read {what} file {shown!r}: {reason}; valid: {valid}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {what} file {shown!r}: not UTF-8 text") from None


def read_bounded_text(path: Path | str, what: str, valid: str, limit: str) -> str:
    """The UTF-8 text of a regular file within the size limit ``limit`` (tpusim.limits), read as YAML files are,
    for files of other formats; ``what`` names the kind of file in errors and ``valid`` what it should be."""
    return _read_text(Path(path), what, display_path(path), valid, limit)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` laid over ``base``: mappings merge key by key, anything else is replaced."""
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------------------------- validation


@typing.overload
def validate(model_cls: type[M], data: Any, source: str) -> M: ...


@typing.overload
def validate(model_cls: Any, data: Any, source: str) -> Any: ...


def validate(model_cls: Any, data: Any, source: str) -> Any:
    """``data`` validated as ``model_cls`` (a model, or a type such as a discriminated union of models); the
    first problem becomes a ConfigError naming ``source``.

    The first problem is pydantic's first error, except that an unknown key wins over the others.
    """
    try:
        if isinstance(model_cls, type) and issubclass(model_cls, BaseModel):
            return model_cls.model_validate(data)
        return TypeAdapter(model_cls).validate_python(data)  # cheap: the models' schemas are built once
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # A misspelt key also makes its intended key "missing"; the unknown key is the one to report.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        message, suggestion = _describe(first, data, model_cls)
        raise ConfigError(f"{source}: {message}", suggestion) from None


def first_error(exc: ValidationError) -> Any:
    """The error to report: pydantic's first, except that an unknown key wins (a misspelt key also makes its
    intended key "missing")."""
    errors = exc.errors(include_url=False)
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def _data_path(loc: tuple[int | str, ...], data: Any) -> list[int | str]:
    """The part of pydantic's error location that is a real key path into ``data``.

    pydantic inserts tags (e.g. a union member's name) into locations; those are not keys of the input, so
    they are dropped by walking the input alongside.
    """
    path: list[int | str] = []
    node = data
    for i, item in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(item, int) and isinstance(node, list | tuple):
            path.append(item)
            node = node[item] if 0 <= item < len(node) else None
        elif isinstance(item, str) and isinstance(node, Mapping) and (item in node or last):
            path.append(item)
            node = node.get(item)
    return path


def _render(path: list[int | str]) -> str:
    text = ""
    for item in path:
        text += f"[{item}]" if isinstance(item, int) else (f".{item}" if text else item)
    return text


def _model_at(tp: Any, path: list[int | str], data: Any) -> type[BaseModel] | None:
    """The pydantic model that describes the mapping at ``path`` inside ``tp``, if there is one."""
    for item in path:
        tp = _descend(tp, item, data)
        data = _child(data, item)
        if tp is None:
            return None
    return _find_model(tp, data)


def _child(data: Any, item: int | str) -> Any:
    if isinstance(item, int) and isinstance(data, list | tuple) and 0 <= item < len(data):
        return data[item]
    if isinstance(data, Mapping):
        return data.get(item)
    return None


def _descend(tp: Any, item: int | str, data: Any) -> Any:
    model = _find_model(tp, data)
    if model is not None:
        field = model.model_fields.get(str(item))
        return field.annotation if field is not None else None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _descend(args[0], item, data)
    if origin is tuple and isinstance(item, int):
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
        return args[item] if item < len(args) else None
    if origin in (list, dict) and args:
        return args[-1]
    return None


def _find_model(tp: Any, data: Any = None) -> type[BaseModel] | None:
    """The model ``tp`` describes; in a union of models, the one whose ``kind`` matches the data's."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _find_model(args[0], data)
    if origin in (typing.Union, types.UnionType):
        models = [found for arg in args if (found := _find_model(arg)) is not None]
        kind = data.get("kind") if isinstance(data, Mapping) else None
        for model in models:
            field = model.model_fields.get("kind")
            if field is not None and kind in typing.get_args(field.annotation):
                return model
        return models[0] if models else None
    return None


def _short(value: Any) -> str:
    """A value as messages quote it: a scalar cut to ``errors.ECHO_MAX`` characters; a mapping or a list only
    described unless it holds nothing but numbers and plain names, since it may be a whole file of another kind
    (whose text is never shown)."""
    if isinstance(value, Mapping | list | tuple) and not _plain(value):
        return (f"a mapping of {len(value)} key(s)" if isinstance(value, Mapping)
                else f"a list of {len(value)} item(s)")
    return echo(value)


def _plain(value: Any) -> bool:
    """Whether ``value`` holds nothing but numbers, booleans, nulls and plain names (``_NAME``)."""
    if isinstance(value, Mapping):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, int | float) or (isinstance(value, str) and bool(_NAME.fullmatch(value)))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
"""A key as a configuration file spells one: only such a key is quoted in a message."""
_QUOTED = re.compile(r"""\s*(?:'[^']*'|"[^"]*")""")


def _shape(value: Any) -> str:
    """A value where a mapping was expected, where a whole file of another kind (a private key read as one string)
    may stand: a number or a plain name as it is, any other string only by its length."""
    if isinstance(value, str) and not _NAME.fullmatch(value):
        return f"a string of {len(value)} characters"
    return _short(value)


def key_text(key: Any) -> str:
    """A key as messages name it: a plain name quoted, anything else (a line of a file of another kind: a password
    entry, a key) only described, so that no message shows a named file's text."""
    if isinstance(key, str) and _NAME.fullmatch(key):
        return repr(key)
    return "(not a plain name; its text is not shown)"


def _unquoted(problem: str) -> str:
    """A YAML parser's problem without the text it quotes from the file (a tag, an alias, a character)."""
    return _QUOTED.sub("", problem)


def _describe(error: Any, data: Any, model_cls: type[BaseModel]) -> tuple[str, str | None]:
    path = _data_path(tuple(error["loc"]), data)
    kind = error["type"]
    if kind == "missing" and path and isinstance(path[-1], int):
        where = _render(path[:-1])
        return f"{where}: {_short(error['input'])} has no item [{path[-1]}]", None
    if kind in ("extra_forbidden", "missing") and path:
        key, parent = path[-1], _render(path[:-1]) or "top level"
        model = _model_at(model_cls, path[:-1], data)
        # the keys as written in YAML: a field's alias where it has one (e.g. 'lambda' for lambda_)
        valid = sorted(f.alias or n for n, f in model.model_fields.items()) if model is not None else []
        if kind == "missing":
            return f"missing required key {key!r} at {parent}", None
        listing = f"; valid keys: {', '.join(valid)}" if valid else ""
        guess = closest(str(key), valid) if _NAME.fullmatch(str(key)) else None
        return (f"unknown key {key_text(key)} at {parent}{listing}",
                (f"did you mean {guess!r}?" if guess else None))
    where = _render(path)
    if kind == "tpusim":
        if error["ctx"]["style"] == Problem.RULE:
            text = render_problem(error, "", _short(error["input"])).lstrip()
        else:
            text = str(error["ctx"]["text"])
        return (f"{where}: {text}" if where else text), (error["ctx"]["suggestion"] or None)
    if kind == "quantity":
        text = error["msg"]
    elif kind in ("value_error", "assertion_error") and "error" in error.get("ctx", {}):
        text = str(error["ctx"]["error"])
    elif kind in ("model_type", "dict_type"):
        text = f"expected a mapping of keys, got {_shape(error['input'])}"
    else:
        msg = error["msg"]
        text = f"{_short(error['input'])} is invalid: {msg[:1].lower()}{msg[1:]}"
    return (f"{where}: {text}" if where else text), None
