"""One request model per entry point: a collective, a GeMM, a training step, a tuning run.

Each request is a frozen pydantic model whose fields, types, defaults and descriptions are the single source of
what the entry point takes: the command line derives its flags from them (``tpusim.cli.derive``), the Python
API its keyword arguments (``tpusim.api``), an experiment file's ``point`` is one of them (chosen by ``kind``),
and ``tpusim schema`` prints their JSON Schema. A field added here appears everywhere with one help text.

Values are checked where they enter: counts are integers >= 1 (``"8"`` is fine, ``2.5`` is not), sizes take
units (``"64MB"``), names of the shared vocabulary are case-insensitive with a "did you mean", meshes are
``"RxC"`` (or a pair). Whatever names a registered thing (hardware, model, algorithm) is resolved when the
request runs. ``parse_request`` turns the first problem into one line naming the field as the caller wrote it.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Discriminator, Field, Tag, ValidationError, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from tpusim.config.hardware import HardwareProfile, kind_defaults
from tpusim.config.layout import FSDP_ZERO_STAGE, parse_layout
from tpusim.config.loader import FrozenModel, Problem, first_error, problem, render_problem
from tpusim.config.model import TransformerModel
from tpusim.errors import InfeasibleError, TopologyError, UnknownNameError, UserError, closest
from tpusim.limits import (
    BEYOND_ANY_LIMIT,
    LIMIT_DIGITS,
    LimitError,
    capped_int,
    exceeds,
    shape_chips,
    shorten,
    verify_operand_bytes,
)
from tpusim.units import UnitError, dtype_bytes, parse_count, parse_size
from tpusim.vocabulary import (
    ZERO_STAGES,
    Activation,
    Attention,
    Choice,
    CollectiveOp,
    Dataflow,
    Fidelity,
    MultiAxis,
    Precision,
    Prefetch,
    Recompute,
    Ring,
    check_remat,
    check_zero_stage,
)

__all__ = [
    "FF_LAYERS",
    "REQUESTS",
    "CollectiveRequest",
    "GemmRequest",
    "Metavar",
    "PlanRequest",
    "Request",
    "Scale",
    "StepRequest",
    "TuneRequest",
    "parse_request",
]

_SHOWN_CHARACTERS = 40

FF_LAYERS = ("qkv", "out_proj", "ff1", "ff2")
"""The four feed-forward layers of a transformer block, in order; per-layer settings follow this order."""


@dataclass(frozen=True)
class Metavar:
    """How the command line shows a field's value in its usage, where the type alone would mislead (a per-layer
    list is not one choice); put it in the field's ``Annotated``."""

    text: str

    @classmethod
    def per_layer(cls, one: str) -> Metavar:
        """One value for all four FF layers, or one each: ``DF[,DF,DF,DF]``."""
        return cls(f"{one}[,{','.join([one] * (len(FF_LAYERS) - 1))}]")

    @classmethod
    def several(cls, one: str) -> Metavar:
        """Any number of values, comma-separated: ``NAME[,NAME...]``."""
        return cls(f"{one}[,{one}...]")


# ---------------------------------------------------------------------------------------------- field types


def _count(value: Any) -> int:
    if isinstance(value, float) and value.is_integer() and not isinstance(value, bool):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise problem("must be an integer >= 1")
    try:
        return parse_count(value)
    except UnitError:
        raise problem("must be an integer >= 1") from None


def _limited(name: str) -> Callable[[Any], int]:
    """A count (integer >= 1) that must also be within the size limit ``name`` (tpusim.limits)."""

    def check(value: Any) -> int:
        text = str(value).strip() if isinstance(value, str) else ""
        if text.isdigit() and len(text) > LIMIT_DIGITS:
            number = BEYOND_ANY_LIMIT  # stands for any integer too long to convert (or to be a float)
        else:
            number = _count(value)
        too_many = exceeds(name, number)
        if too_many is not None:
            raise problem(too_many, category="limit")
        return number

    return check


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise problem("must be an integer")
    try:
        return int(str(value).strip())
    except ValueError:
        raise problem("must be an integer") from None


def _index(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise problem("must be an integer >= 0")
    try:
        number = int(str(value).strip())
    except ValueError:
        raise problem("must be an integer >= 0") from None
    if number < 0:
        raise problem("must be an integer >= 0")
    return number


def _positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise problem("must be a finite number > 0")
    try:
        number = float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond any float
        raise problem("must be a finite number > 0") from None
    if not math.isfinite(number) or number <= 0:
        raise problem("must be a finite number > 0")
    return number


def _non_negative(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise problem("must be a finite number >= 0")
    try:
        number = float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond any float
        raise problem("must be a finite number >= 0") from None
    if not math.isfinite(number) or number < 0:
        raise problem("must be a finite number >= 0")
    return number


def _size(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise problem(f"size {value!r} is not a number of bytes", style=Problem.LABELLED)
    try:
        nbytes = parse_size(value)
    except UnitError as error:
        raise problem(str(error), style=Problem.LABELLED) from None
    if nbytes != int(nbytes):
        raise problem(f"size {value!r} is not a whole number of bytes", style=Problem.LABELLED)
    return value if isinstance(value, str) else int(nbytes)


def _flag(value: Any) -> bool:
    """True/False, 1/0 or their strings (any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if not isinstance(value, float) and text in ("0", "1", "true", "false"):
        return text in ("1", "true")
    raise problem("must be 0 or 1 (or true/false)")


def _dtype(value: Any) -> str:
    try:
        dtype_bytes(str(value))
    except UnitError as error:
        raise problem(str(error), style=Problem.LABELLED) from None
    return str(value)


def _choice(kind: type[Choice]) -> Callable[[Any], Choice]:
    def parse(value: Any) -> Choice:
        if isinstance(value, kind):
            return value
        try:
            return kind.parse(value)
        except UnknownNameError as error:
            raise problem(error.message, style=Problem.PLAIN, suggestion=error.suggestion,
                          category="unknown_name") from None

    return parse


_MESH = re.compile(r"(\d+)(?:x(\d+))?(?:x(\d+))?")


def _mesh(value: Any) -> str:
    """"RxC" (or one number N: an N x 1 mesh), a pair (R, C), or a pod layout "DxRxC" (D data-parallel replicas of
    an R x C mesh); kept as "RxC" or "DxRxC"."""
    if isinstance(value, tuple | list) and len(value) in (2, 3) and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        return "x".join(str(v) for v in value)
    match = _MESH.fullmatch(value.strip()) if isinstance(value, str) else None
    parts = [part for part in match.groups() if part is not None] if match is not None else []
    if match is None or any(int(part[:LIMIT_DIGITS]) < 1 for part in parts):
        raise problem(f"mesh {shorten(repr(value), _SHOWN_CHARACTERS)} is not a mesh shape; valid: 'RxC' with "
                      "whole numbers >= 1 (e.g. '16x16'), one number N for an N x 1 mesh, a pair (R, C), or 'DxRxC' "
                      "for D data-parallel replicas of an R x C mesh (step)", style=Problem.PLAIN, category="topology")
    sides = [capped_int(part) for part in parts] + ([1] if len(parts) == 1 else [])
    chips = math.prod(sides)
    too_many = exceeds("chips", chips)
    if too_many is not None:
        raise problem(f"mesh {shorten(value.strip())!r} has {_chips_text(chips)} chips, which {too_many}",
                      style=Problem.PLAIN, category="limit")
    return "x".join(str(side) for side in sides)


def _zero_stage(value: Any) -> int:
    stage = value
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= LIMIT_DIGITS:
        stage = int(value.strip())
    try:
        return check_zero_stage(stage)
    except UserError as error:
        raise problem(error.message, style=Problem.PLAIN) from None


def _chips_text(chips: int) -> str:
    return f"more than {BEYOND_ANY_LIMIT:.0e}" if chips >= BEYOND_ANY_LIMIT else str(chips)


_TOPOLOGY_SIDES = re.compile(r"(?:[a-z0-9]+:)?(\d+(?:x\d+)*)t?")  # a trailing t: a twisted slice


def _topology(value: Any) -> Any:
    """A topology spec is parsed where it runs (its rules depend on the hardware); its chip count is checked
    against the limit here, so that a sweep refuses it before any point runs."""
    match = _TOPOLOGY_SIDES.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is not None:
        chips = shape_chips(match.group(1))
        too_many = exceeds("chips", chips)
        if too_many is not None:
            raise problem(f"topology {shorten(value.strip())!r} has {_chips_text(chips)} chips, which {too_many}",
                          style=Problem.PLAIN, category="limit")
    return value


def _axis(value: Any) -> int:
    if isinstance(value, bool) or str(value).strip() not in ("0", "1") or isinstance(value, float):
        raise problem("is out of range; valid: 0, 1")
    return int(str(value).strip())


def _per_layer(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One value for all four FF layers, or one each: a list, or text such as ``"os,ls,os,ls"``."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or (isinstance(value, str) and len(items) == 1):
            return parse(value)
        if len(items) not in (1, len(FF_LAYERS)):
            raise problem(f"needs 1 or {len(FF_LAYERS)} values ({', '.join(FF_LAYERS)})")
        parsed = []
        for item in items:
            try:
                parsed.append(parse(item.strip() if isinstance(item, str) else item))
            except PydanticCustomError as error:
                if error.context is None or error.context.get("style") != Problem.RULE:
                    raise
                raise problem(f"value {item!r} {error.context['text']}", style=Problem.LABELLED) from None
        return parsed[0] if len(parsed) == 1 and isinstance(value, str) else parsed

    return check


def _choices(kind: type[Choice]) -> Callable[[Any], tuple[Choice, ...]]:
    """A set of names, as a list or comma-separated text; order kept, duplicates dropped."""
    one = _choice(kind)

    def check(value: Any) -> tuple[Choice, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not [i for i in items if str(i).strip()]:
            raise problem(f"names no {kind.noun()}; valid: {', '.join(kind.names())} (comma-separated)")
        return tuple(dict.fromkeys(one(item) for item in items if str(item).strip()))

    return check


def _activations(value: Any) -> tuple[Activation, ...]:
    """MaxText activation names, as a list or comma-separated text (empty: none); order kept, duplicates dropped."""
    one = _choice(Activation)
    items = value.split(",") if isinstance(value, str) else value
    if items is None:
        return ()
    if not isinstance(items, list | tuple):
        raise problem(f"must be activation names; valid: {', '.join(Activation.names())} (comma-separated)")
    return tuple(dict.fromkeys(Activation(one(item)) for item in items if str(item).strip()))


def _overlap_limit(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == UNLIMITED:
        return UNLIMITED
    try:
        return _count(value)
    except PydanticCustomError:
        raise problem(f"must be an integer >= 1 or {UNLIMITED!r}") from None


UNLIMITED = "unlimited"
_COUNT_SCHEMA = Field(json_schema_extra={"type": "integer", "minimum": 1})
Count = Annotated[int, BeforeValidator(_count), _COUNT_SCHEMA]
# counts with a size limit (tpusim.limits): the limit in force is read when a value is checked
Chips = Annotated[int, BeforeValidator(_limited("chips")), _COUNT_SCHEMA]
Chunks = Annotated[int, BeforeValidator(_limited("chunks")), _COUNT_SCHEMA]
Slices = Annotated[int, BeforeValidator(_limited("slices")), _COUNT_SCHEMA]
GemmDim = Annotated[int, BeforeValidator(_limited("gemm_dim")), _COUNT_SCHEMA]
Batch = Annotated[int, BeforeValidator(_limited("batch")), _COUNT_SCHEMA]
Topology = Annotated[str, BeforeValidator(_topology)]
OverlapLimit = Annotated[int | str, BeforeValidator(_overlap_limit),
                         Field(json_schema_extra={"anyOf": [{"type": "integer", "minimum": 1}, {"const": UNLIMITED}]})]
Index = Annotated[int, BeforeValidator(_index), Field(json_schema_extra={"type": "integer", "minimum": 0})]
Integer = Annotated[int, BeforeValidator(_integer), Field(json_schema_extra={"type": "integer"})]
Positive = Annotated[float, BeforeValidator(_positive)]
NonNegative = Annotated[float, BeforeValidator(_non_negative)]
Size = Annotated[int | str, BeforeValidator(_size)]
Flag = Annotated[bool, BeforeValidator(_flag)]
Dtype = Annotated[str, BeforeValidator(_dtype)]
Mesh = Annotated[str, BeforeValidator(_mesh)]
ZeroStage = Annotated[int, BeforeValidator(_zero_stage), Field(json_schema_extra={"enum": list(ZERO_STAGES)})]
EVERY_ALGORITHM = "all"
"""``tune --algorithm all``: every registered algorithm tuned, the fastest kept."""
EVERY_ZERO_STAGE = "any"
"""``tune --zero-stage any``: layouts with D > 1 replicas are searched at every ZeRO stage, the fastest kept."""


def _zero_stage_or_any(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() == EVERY_ZERO_STAGE:
        return EVERY_ZERO_STAGE
    stage = int(value.strip()) if isinstance(value, str) and value.strip().isdigit() and len(
        value.strip()) <= LIMIT_DIGITS else value
    try:
        return check_zero_stage(stage)
    except UserError as error:
        raise problem(f"{error.message}, or {EVERY_ZERO_STAGE} (every stage searched)", style=Problem.PLAIN) from None


TuneZeroStage = Annotated[int | Literal["any"], BeforeValidator(_zero_stage_or_any),
                          Field(json_schema_extra={"enum": [*ZERO_STAGES, EVERY_ZERO_STAGE]})]
Axis = Annotated[Literal[0, 1], BeforeValidator(_axis)]
DataflowName = Annotated[Dataflow, BeforeValidator(_choice(Dataflow))]
WHOLE_STEP_FIDELITIES = (Fidelity.AUTO, Fidelity.FULL, Fidelity.SYMMETRIC)
"""The fidelities a whole step is timed at: a step has no closed form, so ``analytic`` is not among them."""


def _offered(offered: tuple[Fidelity, ...], what: str) -> Callable[[Any], Fidelity]:
    one = _choice(Fidelity)

    def check(value: Any) -> Fidelity:
        fidelity = Fidelity(one(value))
        if fidelity not in offered:
            raise problem(f"is not offered for {what}; valid: {', '.join(offered)}")
        return fidelity

    return check


FidelityName = Annotated[Fidelity, BeforeValidator(_choice(Fidelity))]
StepFidelityName = Annotated[Fidelity, BeforeValidator(_offered(WHOLE_STEP_FIDELITIES, "a whole step (it has no "
                                                                                       "closed form)")),
                             Field(json_schema_extra={"enum": [str(f) for f in WHOLE_STEP_FIDELITIES]})]
PrefetchName = Annotated[Prefetch, BeforeValidator(_choice(Prefetch))]


def _profile_default(field: str) -> str:
    """What each kind of profile uses for ``field`` unless the profile says otherwise, read from the profile
    models: "the profile's: previous-gemm on physical profiles, ideal on calibrated ones"."""
    shown = [f"{value} on {kind} profiles" if number == 0 else f"{value} on {kind} ones"
             for number, (kind, value) in enumerate(kind_defaults(field))]
    return f"default: the profile's, {', '.join(shown)}"


PrefetchField = Annotated[PrefetchName | None, Field(description="when a data-independent gather may run "
                                                                 f"({_profile_default('prefetch')})")]
RecomputeName = Annotated[Recompute, BeforeValidator(_choice(Recompute))]
AttentionName = Annotated[Attention, BeforeValidator(_choice(Attention))]
PrecisionName = Annotated[Precision, BeforeValidator(_choice(Precision))]
PrecisionField = Annotated[PrecisionName, Field(description="GeMM precision: bf16, or int8 (the profile's int8 rate, "
                                                            "1-byte operands; activations, weights and collectives "
                                                            "stay bf16)")]

# fields that step and tune requests share, described once
RecomputeField = Annotated[RecomputeName, Field(description="activation recomputation: auto (the least that fits "
                                                            "in HBM), none, selective, minimal, full, custom")]
Activations = Annotated[tuple[Activation, ...], BeforeValidator(_activations), Metavar.several("NAME"),
                        Field(json_schema_extra={"type": "array", "items": {"enum": Activation.names()}})]
RematSaveField = Annotated[Activations, Field(description="under --recompute custom: activations saved in HBM, "
                                              "comma-separated")]
RematOffloadField = Annotated[Activations, Field(description="under --recompute custom: activations written to host "
                                                 "memory in forward and read back for backward")]
AttentionField = Annotated[AttentionName, Field(description="attention core: unfused (scores and probabilities "
                                                            "through HBM in fp32), fused (flash-style, one pass) or "
                                                            "fused-causal (flash, the causal half of the scores)")]
PrefetchWindowField = Annotated[Index, Field(description="under --prefetch window: how many ops before its GeMM a "
                                                         "data-independent gather may start (0: none)")]
PrefetchBudgetField = Annotated[Size | None, Field(description="under --prefetch window: bytes of gathered buffers "
                                                               "a chip may hold early (default: no bound); reserved "
                                                               "in the memory estimate")]
OpName = Annotated[CollectiveOp, BeforeValidator(_choice(CollectiveOp))]
RingName = Annotated[Ring, BeforeValidator(_choice(Ring))]
MultiAxisName = Annotated[MultiAxis, BeforeValidator(_choice(MultiAxis))]
HardwareRef = str | SkipJsonSchema[HardwareProfile]
ModelRef = str | SkipJsonSchema[TransformerModel]


class Scale(FrozenModel):
    """Multipliers on the hardware profile's constants, for sensitivity studies (docs/hardware-profiles.md).

    ``beta`` multiplies bandwidth (0.5 halves every link and calibrated bandwidth: slower communication);
    ``alpha`` and ``lambda`` multiply the per-collective overhead and the per-step latency (2 = slower);
    ``flops`` multiplies the MXU rate GeMMs achieve (MFU stays against the nominal peak); ``hbm`` the HBM
    bandwidth ops achieve; ``step`` the software handshake of every transfer on
    a physical network, ``op`` the fixed launch time of every compute op, ``vector`` the vector units' rate,
    ``dma`` the HBM traffic charged for collective DMA (0: compute and DMA share HBM for free); ``dcn`` the
    host bandwidth of the data-centre network between slices (``alpha`` and ``lambda`` also scale its launch
    overhead and latency).
    """

    alpha: NonNegative = Field(default=1.0, description="factor on every per-collective launch overhead (2: slower)")
    lambda_: NonNegative = Field(default=1.0, alias="lambda", description="factor on every per-hop or per-step latency "
                              "(2: slower)")
    beta: Positive = Field(default=1.0, description="factor on every link and calibrated bandwidth (0.5: slower)")
    flops: Positive = Field(default=1.0, description="factor on the MXU rate GeMMs achieve; MFU stays against the "
                            "nominal peak (0.5: slower)")
    hbm: Positive = Field(default=1.0, description="factor on the HBM bandwidth ops achieve (0.5: slower)")
    step: NonNegative = Field(default=1.0, description="factor on the software handshake of every physical "
                              "transfer (2: slower)")
    op: NonNegative = Field(default=1.0, description="factor on the fixed launch time of every compute op "
                            "(2: slower)")
    vector: Positive = Field(default=1.0, description="factor on the vector units' elementwise rate (0.5: slower)")
    dma: NonNegative = Field(default=1.0, description="factor on the HBM traffic charged for collective DMA "
                             "(0: no HBM contention; 2: slower compute under communication)")
    dcn: Positive = Field(default=1.0, description="factor on the data-centre network's host bandwidth between "
                          "slices (0.5: slower)")

    model_config = FrozenModel.model_config | {"populate_by_name": True}

    def factors(self) -> dict[str, float]:
        """The factors that differ from 1, by their YAML names."""
        return {key: value for key, value in self.model_dump(by_alias=True).items() if value != 1.0}


# ---------------------------------------------------------------------------------------------- requests


class Request(FrozenModel):
    """What every request names: the hardware profile it runs on, and how its constants are scaled."""

    kind: str
    hardware: HardwareRef = Field(description="hardware profile name (see 'tpusim list hardware') or YAML path")
    scale: Scale = Field(Scale(), description="multipliers on the profile's constants")
    multi_axis: MultiAxisName | None = Field(None, description="collectives over a logical axis of several "
                                             "physical axes: dimensional (every link) or snake (one ring); "
                                             f"{_profile_default('multi_axis')}")
    overlap_limit: OverlapLimit | None = Field(None, description="all-gathers, reduce-scatters and all-reduces "
                                               "each in flight per chip: an integer >= 1 or 'unlimited'; "
                                               "default: the profile's")


class _Placed(Request):
    """A request that runs on a physical network of the hardware's generation."""

    topology: Topology | None = Field(None, description="physical network: a slice of the hardware's generation "
                                 "(AxBxC on tpuv4), torus:AxB[xC] or mesh:AxB[xC] (default: the generation's "
                                 "slice for the chip count)")


class _OnMesh(_Placed):
    """A request placed on one logical mesh of the network, with optional what-if slowdowns."""

    mesh: Mesh = Field(description="logical mesh RxC: R chips along axis 0, C along axis 1 (Px1 for tp1d, fsdp)")
    chips: Chips | None = Field(None, description="chip count; optional, must equal R x C when given")
    axis_map: str | None = Field(None, description="logical axes onto physical ones, e.g. 'x*y,z'")
    slow_chips: list[str] = Field(default_factory=list, description="chips that compute FACTOR times slower, "
                                  "e.g. '3,5:1.5' (repeatable)")
    slow_links: list[str] = Field(default_factory=list, description="links FACTOR times slower to serialize (and "
                                  "LAT times the latency): TARGET:FACTOR[:LAT], TARGET a link id, SRC-DST, x/y/z or "
                                  "axis0/axis1 (repeatable)")

    @model_validator(mode="after")
    def _chips_match_mesh(self) -> Self:
        sides = [int(v) for v in self.mesh.split("x")]
        if len(sides) == 3 and self.kind != "step":
            raise problem(f"mesh {self.mesh} is a D x R x C layout, which only 'step' runs; {self.kind} runs on one "
                          "R x C mesh", style=Problem.PLAIN)
        chips = self.data * math.prod(sides[-2:])
        if self.chips is not None and self.chips != chips:
            shape = "D x R x C with D * R * C" if self.data > 1 else "R x C with R * C"
            raise problem(f"mesh {self.mesh} has {chips} chips but chips is {self.chips}; valid: a mesh {shape} = "
                          f"{self.chips}, or chips {chips}", style=Problem.PLAIN)
        return self

    @property
    def shape(self) -> tuple[int, int]:
        """(R, C) of the tensor-parallel mesh."""
        rows, cols = self.mesh.split("x")[-2:]
        return int(rows), int(cols)

    @property
    def data(self) -> int:
        """D, the data-parallel replicas of a layout (1 for a plain mesh)."""
        sides = self.mesh.split("x")
        return int(sides[0]) if len(sides) == 3 else 1


def _arrange(kind: type[Request], order: str, **specialised: tuple[Any, str]) -> None:
    """Put the fields of ``kind`` in ``order`` (names, space-separated: the order its flags, keywords, schema and
    results columns show them, whichever base declares each) and give inherited fields its own (default, help
    text) where a default means something else here; their type and checks stay declared once, in the base."""
    names = order.split()
    if sorted(names) != sorted(kind.model_fields):
        raise AssertionError(f"{kind.__name__}: the order names {sorted(set(names) ^ set(kind.model_fields))} "
                             "wrongly")  # a field added without a place, or a name mistyped
    fields = {name: copy.copy(kind.model_fields[name]) for name in names}
    for name, (default, description) in specialised.items():
        fields[name].default, fields[name].description = default, description
    kind.model_fields.clear()
    kind.model_fields.update(fields)
    kind.__pydantic_complete__ = False  # built on first use with these fields (defer_build), not at import


class CollectiveRequest(_OnMesh):
    """One collective on every group of a logical axis (``tpusim collective``)."""

    kind: Literal["collective"] = "collective"
    op: OpName = Field(description="the collective: " + ", ".join(CollectiveOp.names()))
    axis: Axis = Field(description="0: the R chips sharing a column index; 1: the C chips sharing a row index")
    bytes: Size = Field(description="the whole tensor of one group (all-gather, reduce-scatter, all-reduce, "
                        "all-to-all) or the message (broadcast, reduce, shift, send-recv), e.g. 64MB or 8MiB")
    chunks: Chunks | None = Field(None, description="pipelined chunks per message (default: one on rings; for "
                                 "broadcast and reduce the count that minimises their closed form)")
    ring: RingName = Field(Ring.BIDIRECTIONAL, description="ring variant: bi (halves both ways) or uni")
    root: Index = Field(0, description="broadcast/reduce root; send-recv source rank")
    offset: Integer = Field(1, description="shift distance; send-recv destination rank")


_arrange(CollectiveRequest, "kind hardware scale multi_axis overlap_limit mesh chips topology axis_map slow_chips "
         "slow_links op axis bytes chunks ring root offset")


class _Timed(Request):
    """How every GeMM of a request runs: its algorithm, when its data-independent gathers may start, its
    precision."""

    algorithm: str = Field("meshslice", description="see 'tpusim list algorithms'")
    prefetch: PrefetchField = None
    precision: PrecisionField = Precision.BF16


class _Algorithm(_OnMesh, _Timed):
    """What a distributed GeMM algorithm is run with on one mesh."""

    variant: str | None = Field(None, description="algorithm variant (cannon: textbook, bidirectional-halves)")


class GemmRequest(_Algorithm):
    """One distributed GeMM (``tpusim gemm``)."""

    kind: Literal["gemm"] = "gemm"
    dataflow: DataflowName = Field(description="os: Y = X W; ls: Y = X W^T (W is [N,K]); rs: Y = X^T W (X is [K,M])")
    m: GemmDim = Field(description="output rows M")
    n: GemmDim = Field(description="output columns N")
    k: GemmDim = Field(description="contraction dimension K")
    slices: Annotated[Slices | None, Metavar("S")] = Field(
        None, description="slice count S: MeshSlice's slices, SUMMA's panels (default: the fastest feasible)")
    block: Count = Field(8, description="MeshSlice strided-slice run length")
    transpose: Flag = Field(False, description="swap the roles of the two mesh axes")
    dtype: Dtype = Field("bf16", description="element type being timed")
    compat_mean_overlap: Flag = Field(False, description="twin only: the MeshSlice authors' simulation-branch "
                                      "(a+b)/2 rule (labelled in results)")
    fidelity: FidelityName = Field(Fidelity.AUTO, description="auto (symmetric where exact, else full), full, "
                                   "symmetric or analytic")
    verify: Flag = Field(False, description="run real float64 data and report max_abs_error")
    seed: Index = Field(0, description="seed of the --verify operands")

    @model_validator(mode="after")
    def _verify_fits(self) -> Self:
        if self.verify:
            operands = verify_operand_bytes(self.m, self.n, self.k)
            too_many = exceeds("verify_bytes", operands)
            if too_many is not None:
                raise problem(f"verify of M={self.m} N={self.n} K={self.k} needs {operands} bytes of operands, "
                              f"which {too_many}; or drop --verify", style=Problem.PLAIN, category="limit")
        return self


_arrange(GemmRequest, "kind hardware scale multi_axis overlap_limit mesh chips topology axis_map slow_chips slow_links "
         "algorithm variant prefetch dataflow m n k slices block transpose dtype precision compat_mean_overlap "
         "fidelity verify seed")


class _Training(_Placed, _Timed):
    """What a training step's requests share (``step`` times one configuration, ``tune`` searches them): the
    model, its batch, how its memory is planned and how its steps are timed. Each field is declared once here."""

    model: ModelRef = Field(description="model name (see 'tpusim list models') or YAML path")
    batch: Batch | None = Field(None, description="global batch in sequences (default: the chip count)")
    fidelity: StepFidelityName = Field(Fidelity.AUTO, description="auto (symmetric where exact, else full), full "
                                       "or symmetric")
    recompute: RecomputeField = Recompute.AUTO
    remat_save: RematSaveField = ()
    remat_offload: RematOffloadField = ()
    prefetch_window: PrefetchWindowField = 1
    prefetch_budget: PrefetchBudgetField = None
    attention: AttentionField = Attention.UNFUSED
    bytes_per_param: Positive = Field(16.0, description="bytes per parameter of weights, gradients and optimizer "
                                      "state")
    ignore_memory: Flag = Field(False, description="time a configuration that overflows HBM (recompute auto then "
                                "means none)")
    allow_infeasible: Flag = Field(False, description="time an infeasible point anyway (heads padded, the "
                                   "nearest feasible slice count below) and mark it")
    dp: Count | None = Field(None, description="data-parallel replicas D of the R x C mesh (the same as a mesh "
                             "DxRxC); chips = D x R x C")

    @model_validator(mode="after")
    def _remat_names(self) -> Self:
        """Activation names only with recompute custom, each in one list (``vocabulary.check_remat``)."""
        try:
            check_remat(self.recompute, self.remat_save, self.remat_offload)
        except UserError as error:
            raise problem(error.message, style=Problem.PLAIN) from None
        return self


class StepRequest(_Algorithm, _Training):
    """One training step of a model (``tpusim step``)."""

    kind: Literal["step"] = "step"
    layout: str | None = Field(None, description="named layout instead of mesh: name=value,... with data, fsdp "
                               "(ZeRO 3 replicas), tensor (T or RxC) on a slice's ICI and dcn_data or dcn_fsdp "
                               "(slices over DCN), e.g. 'fsdp=16,tensor=8' or 'dcn_data=2,fsdp=4,tensor=4x4'")
    slices: Annotated[Count | list[Count] | None, BeforeValidator(_per_layer(_limited("slices"))),
                      Metavar.per_layer("S")] = Field(
        None, description="slice count S (MeshSlice's slices, SUMMA's panels): one for all four FF layers, or one "
                          "per layer, e.g. 8,4,4,8 (default: the fastest per layer)")
    dataflows: Annotated[DataflowName | list[DataflowName] | None,
                         BeforeValidator(_per_layer(_choice(Dataflow))), Metavar.per_layer("DF")] = Field(
        None, description="dataflow DF: one for all four FF layers, or one per layer (qkv,out_proj,ff1,ff2), e.g. "
                          "os,ls,os,ls (default: the heuristic)")
    transposes: Annotated[Flag | list[Flag] | None, BeforeValidator(_per_layer(_flag)), Metavar.per_layer("T")] = Field(
        None, description="transposition T, 0 or 1: one for all four FF layers, or one per layer, e.g. 0,0,1,0")
    microbatches: Count = Field(1, description="run the batch as this many micro-batches, gradients accumulated")
    all_layers: Flag = Field(False, description="simulate every layer instead of extrapolating")
    embedding: Flag = Field(False, description="include the embedding and LM head")
    optimizer: Flag = Field(False, description="include the Adam update")
    zero_stage: ZeroStage = Field(1, description="how D replicas shard model state: 0 replicated (gradients "
                                  "all-reduced), 1 optimizer state, 2 and gradients, 3 and weights (gathered before "
                                  "use)")
    data_axes: str | None = Field(None, description="physical axes of the data axis, e.g. 'z' or 'y*z' (default: "
                                  "chosen by the layout rules)")

    @model_validator(mode="before")
    @classmethod
    def _layout_into_mesh(cls, values: Any) -> Any:
        """A named layout is its D x R x C mesh (fsdp: at ZeRO 3); exactly one of ``mesh`` and ``layout``."""
        if not isinstance(values, dict):
            return values
        text = values.get("layout")
        if text is None:
            if values.get("mesh") is None:
                raise problem("one of mesh and layout is required (e.g. mesh '16x16' or layout 'fsdp=16,tensor=8')",
                              style=Problem.PLAIN)
            return values
        if values.get("mesh") is not None:
            raise problem(f"mesh {values['mesh']!r} and layout {text!r} both given; give exactly one of them",
                          style=Problem.PLAIN)
        if values.get("dp") is not None:
            raise problem(f"dp and layout {text!r} both given; the layout names the data-parallel axes",
                          style=Problem.PLAIN)
        if not isinstance(text, str):
            raise problem(f"layout {text!r} is not text; valid: name=value,... e.g. 'fsdp=16,tensor=8'",
                          style=Problem.PLAIN)
        try:
            layout = parse_layout(text)
        except UserError as error:
            raise problem(error.message, style=Problem.PLAIN) from None
        if layout.data > 1 and layout.fsdp > 1:
            raise problem(f"layout {layout.name!r} has both data and fsdp above 1 on ICI, which is not supported "
                          "(one data-parallel axis per slice); use one of them", style=Problem.PLAIN)
        if layout.dcn_fsdp > 1 and layout.dcn_data > 1:
            raise problem(f"layout {layout.name!r} has both dcn_data and dcn_fsdp above 1, which is not supported "
                          "(one axis across slices); use one of them", style=Problem.PLAIN)
        if layout.dcn_fsdp > 1 and layout.data > 1:
            raise problem(f"layout {layout.name!r} shards weights across slices (dcn_fsdp) but replicates them over "
                          "its ICI data axis, which is not supported; use fsdp= on ICI", style=Problem.PLAIN)
        chips = values.get("chips")
        if chips is not None and str(chips).strip().isdigit() and int(str(chips).strip()) != layout.chips:
            raise problem(f"layout {layout.name!r} has {layout.chips} chips but chips is {int(str(chips).strip())}; "
                          f"valid: a layout whose sizes multiply to {int(str(chips).strip())}", style=Problem.PLAIN)
        values = {**values, "mesh": layout.mesh, "layout": layout.name}
        if layout.slices > 1:
            values.pop("chips", None)  # checked against the whole layout above; the mesh is one slice's
        if layout.fsdp > 1 or layout.dcn_fsdp > 1:
            stage = values.get("zero_stage")
            if stage is not None and _zero_stage(stage) != FSDP_ZERO_STAGE:
                raise problem(f"zero_stage {stage} disagrees with layout {layout.name!r}, whose fsdp axes are ZeRO "
                              f"stage {FSDP_ZERO_STAGE}; drop zero_stage or use data=", style=Problem.PLAIN)
            values["zero_stage"] = FSDP_ZERO_STAGE
        return values

    @property
    def dcn_slices(self) -> int:
        """Slices joined over DCN by the layout's dcn_data or dcn_fsdp axis (1 without a layout or DCN axis)."""
        return parse_layout(self.layout).slices if self.layout is not None else 1

    @property
    def dcn_sharded(self) -> bool:
        """Whether the slices shard the model state (a dcn_fsdp axis) rather than replicate it (dcn_data)."""
        return self.layout is not None and parse_layout(self.layout).dcn_fsdp > 1

    @model_validator(mode="before")
    @classmethod
    def _dp_into_mesh(cls, values: Any) -> Any:
        """``dp`` D with an R x C mesh is the layout D x R x C; with a D x R x C mesh it must agree."""
        if not isinstance(values, dict) or values.get("dp") is None or values.get("mesh") is None:
            return values
        try:
            dp, mesh = _count(values["dp"]), _mesh(values["mesh"])
        except PydanticCustomError:  # a bad dp or mesh: its own field reports it, under its name
            return values
        sides = mesh.split("x")
        if len(sides) == 3 and int(sides[0]) != dp:
            raise problem(f"dp {dp} disagrees with mesh {mesh}, whose first side is the data-parallel degree; give "
                          "one of them", style=Problem.PLAIN)
        return {**values, "dp": dp, "mesh": mesh if len(sides) == 3 else f"{dp}x{mesh}"}


# not required in a step: a named layout may give the mesh instead; _layout_into_mesh guarantees one of them, so
# after validation the mesh is always text
_arrange(StepRequest, "kind hardware scale multi_axis overlap_limit mesh chips topology axis_map slow_chips slow_links "
         "algorithm variant prefetch model layout slices dataflows transposes batch fidelity recompute remat_save "
         "remat_offload microbatches prefetch_window prefetch_budget attention precision bytes_per_param "
         "ignore_memory allow_infeasible all_layers embedding optimizer dp zero_stage data_axes",
         mesh=(None, "logical mesh RxC: R chips along axis 0, C along axis 1 (Px1 for tp1d), or DxRxC for D "
                     "data-parallel replicas; give this or layout"))


class TuneRequest(_Training):
    """A search for the fastest configuration of a training step (``tpusim tune``)."""

    kind: Literal["tune"] = "tune"
    chips: Chips = Field(description="chip count P; every mesh R x C = P is considered")
    microbatches: Count | None = Field(None, description="micro-batches per step (default: 1, or the fewest that "
                                       "fit under full recomputation when nothing fits the whole batch)")
    dataflows: Annotated[tuple[DataflowName, ...], BeforeValidator(_choices(Dataflow)), Metavar.several("DF")] = Field(
        tuple(Dataflow), description="the dataflows each FF layer may use, comma-separated")
    exhaustive: Flag = Field(False, description="simulate every feasible candidate instead of pruning with the "
                             "closed forms")
    refine_meshes: Count = Field(3, description="meshes whose candidates are simulated after analytic ranking")
    zero_stage: TuneZeroStage = Field(1, description="how D > 1 replicas shard model state: 0 replicated, 1 "
                                      "optimizer state, 2 and gradients, 3 and weights (fsdp); any: search every "
                                      "stage")
    dcn_data: Count = Field(1, description="slices over DCN (a dcn_data axis): chips and batch are those of every "
                            "slice, each slice takes an equal share and the same layout")

    @model_validator(mode="after")
    def _dp_divides(self) -> Self:
        if self.dp is not None and self.chips % self.dp:
            raise problem(f"dp {self.dp} does not divide the {self.chips} chips; valid: a divisor of {self.chips}",
                          style=Problem.PLAIN)
        if self.chips % self.dcn_data:
            raise problem(f"dcn_data {self.dcn_data} does not divide the {self.chips} chips; valid: a divisor of "
                          f"{self.chips} (the slices over DCN)", style=Problem.PLAIN)
        return self


# what a default leaves open differs in a search: every slice shape, every data degree
_arrange(TuneRequest, "kind hardware scale multi_axis overlap_limit model chips algorithm batch topology prefetch "
         "prefetch_window prefetch_budget recompute remat_save remat_offload microbatches attention precision "
         "fidelity dataflows exhaustive refine_meshes ignore_memory allow_infeasible bytes_per_param dp zero_stage "
         "dcn_data",
            algorithm=("meshslice", "see 'tpusim list algorithms'; 'all' tunes every one and keeps the fastest"),
            topology=(None, "physical network (default: the TPUv4 slice for the chip count)"),
            dp=(None, "data-parallel replicas D (default: every D that divides the chips and the batch and whose "
                      "data axis takes whole physical axes; 1: tensor parallelism only)"))


class PlanRequest(TuneRequest):
    """The best configuration of every algorithm and layout kind, ranked (``tpusim plan``): the tuner's search over
    every algorithm and ZeRO stage unless narrowed."""

    kind: Literal["plan"] = "plan"  # type: ignore[assignment]


_arrange(PlanRequest, " ".join(TuneRequest.model_fields),
         algorithm=(EVERY_ALGORITHM, "see 'tpusim list algorithms'; 'all' plans every one"),
         zero_stage=(EVERY_ZERO_STAGE, "how D > 1 replicas shard model state: 0 replicated, 1 optimizer state, 2 and "
                                       "gradients, 3 and weights (fsdp); any: every stage"))


REQUESTS: tuple[type[Request], ...] = (CollectiveRequest, GemmRequest, StepRequest, TuneRequest)


def _kind_of(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind", "step"))
    return str(getattr(value, "kind", "step"))


PointRequest = Annotated[
    Annotated[CollectiveRequest, Tag("collective")] | Annotated[GemmRequest, Tag("gemm")]
    | Annotated[StepRequest, Tag("step")] | Annotated[TuneRequest, Tag("tune")],
    Discriminator(_kind_of, custom_error_type="kind",
                  custom_error_message="kind must be one of: collective, gemm, step, tune"),
]
"""An experiment point: the request of its ``kind`` (default ``step``)."""


# ---------------------------------------------------------------------------------------------- parsing

_CATEGORIES: MappingProxyType[str, type[UserError]] = MappingProxyType({
    "unknown_name": UnknownNameError,
    "topology": TopologyError,
    "infeasible": InfeasibleError,
    "limit": LimitError,
})


def parse_request(kind: type[Request], data: dict[str, Any], label: Callable[[str], str] = str) -> Request:
    """``data`` as a request of ``kind``; the first problem becomes one ``UserError`` line.

    ``label`` turns a field name into how the caller wrote it (``--chips`` on the command line, ``chips`` in
    the API); the value is shown as the caller gave it.
    """
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        error = first_error(exc)
    loc = [str(part) for part in error["loc"]]
    field = loc[0] if loc else ""
    name = label(f"scale_{loc[1]}" if field == "scale" and len(loc) > 1 else field)
    if error["type"] == "tpusim":
        category = _CATEGORIES.get(error["ctx"]["category"], UserError)
        shown = shorten(repr(error["input"]), _SHOWN_CHARACTERS)  # a 300-digit value stays one readable line
        raise category(render_problem(error, name, shown), error["ctx"]["suggestion"] or None)
    if error["type"] == "extra_forbidden" and field == "scale":
        valid = sorted(f.alias or n for n, f in Scale.model_fields.items())
        guess = closest(loc[-1], valid)
        raise UnknownNameError(f"unknown scale key {loc[-1]!r}; valid: {', '.join(valid)}",
                               f"did you mean {guess!r}?" if guess else None)
    if error["type"] == "extra_forbidden":
        valid = [label(f) for f in sorted(kind.model_fields) if f != "kind"]
        guess = closest(name, valid)
        raise UserError(f"unknown argument {name!r} of a {kind.model_fields['kind'].default} request; valid: "
                        f"{', '.join(valid)}", f"did you mean {guess!r}?" if guess else None)
    if error["type"] == "missing":
        raise UserError(f"{name} is required")
    message = error["msg"]
    raise UserError(f"{name} {error['input']!r} is invalid: {message[:1].lower()}{message[1:]}")
