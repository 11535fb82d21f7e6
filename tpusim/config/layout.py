"""Named layouts: the ``layout`` text of a step ("fsdp=16,tensor=8x1") parsed into its axes, and named back.

A named layout gives each parallelism axis its size: ``data`` (replicas at the request's ZeRO stage), ``fsdp``
(replicas that shard weights, gradients and optimizer state: ZeRO 3) and ``tensor`` (``T``, a T x 1 mesh, or
``RxC``) on the slice's ICI, and ``dcn_data``, ``dcn_fsdp`` across slices over the data-centre network. Absent
axes are 1. ICI fsdp and data are the one data axis of a D x R x C layout (``tpusim.topology.pod``) at ZeRO 3 or at
the request's stage, so a layout is run as that mesh (docs/workloads.md#layouts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tpusim.errors import UserError
from tpusim.limits import LIMIT_DIGITS

__all__ = ["AXES", "DCN_AXES", "FSDP_ZERO_STAGE", "NamedLayout", "layout_name", "parse_layout"]

AXES = ("dcn_data", "dcn_fsdp", "data", "fsdp", "tensor")
"""The axis names a layout may give, in the order a layout is named."""

DCN_AXES = ("dcn_data", "dcn_fsdp")

FSDP_ZERO_STAGE = 3
"""An fsdp axis shards weights, gradients and optimizer state: ZeRO stage 3 over that axis."""

_DIGITS = rf"\d{{1,{LIMIT_DIGITS}}}"  # longer numbers are beyond any size limit
_SIZE = re.compile(_DIGITS)
_TENSOR = re.compile(rf"({_DIGITS})(?:x({_DIGITS}))?")
_VALID = ("valid: comma-separated name=value with names " + ", ".join(AXES) + " (tensor=T for a T x 1 mesh or "
          "tensor=RxC), each value a whole number >= 1, e.g. 'fsdp=16,tensor=8'")


@dataclass(frozen=True)
class NamedLayout:
    """The size of every axis of a layout (1 where the layout does not name it)."""

    data: int = 1
    fsdp: int = 1
    rows: int = 1
    cols: int = 1
    dcn_data: int = 1
    dcn_fsdp: int = 1

    @property
    def ici_chips(self) -> int:
        """Chips of one slice: data x fsdp x R x C."""
        return self.data * self.fsdp * self.rows * self.cols

    @property
    def slices(self) -> int:
        """Slices joined over DCN: dcn_data x dcn_fsdp."""
        return self.dcn_data * self.dcn_fsdp

    @property
    def chips(self) -> int:
        """Every chip of the layout: the slices times the chips of one slice."""
        return self.slices * self.ici_chips

    @property
    def replicas(self) -> int:
        """D of the equivalent D x R x C mesh: the ICI data-like axis (data or fsdp, at most one above 1)."""
        return self.data * self.fsdp

    @property
    def mesh(self) -> str:
        """The equivalent mesh text: ``DxRxC`` with data-like replicas, else ``RxC``."""
        tensor = f"{self.rows}x{self.cols}"
        return f"{self.replicas}x{tensor}" if self.replicas > 1 else tensor

    @property
    def name(self) -> str:
        """The canonical text: axes in the order of ``AXES``, those of size 1 left out but tensor always RxC."""
        sizes = {"dcn_data": self.dcn_data, "dcn_fsdp": self.dcn_fsdp, "data": self.data, "fsdp": self.fsdp}
        parts = [f"{axis}={size}" for axis, size in sizes.items() if size > 1]
        return ",".join([*parts, f"tensor={self.rows}x{self.cols}"])


def parse_layout(text: str) -> NamedLayout:
    """``text`` ("name=value,...") as a layout; a bad name, value or repetition is one ``UserError`` line."""
    sizes: dict[str, int] = {}
    tensor = (1, 1)
    seen: set[str] = set()
    for raw in text.split(","):
        part = raw.strip()
        name, equals, value = part.partition("=")
        name, value = name.strip().lower(), value.strip().lower()
        if not equals or name not in AXES:
            raise UserError(f"layout {text!r}: {part!r} is not name=value with a known name; {_VALID}")
        if name in seen:
            raise UserError(f"layout {text!r} names {name} twice; {_VALID}")
        if name == "tensor":
            match = _TENSOR.fullmatch(value)
            if match is None or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
                raise UserError(f"layout {text!r}: tensor={value!r} is not T or RxC; {_VALID}")
            tensor = (int(match.group(1)), int(match.group(2) or 1))
        else:
            if _SIZE.fullmatch(value) is None or int(value) < 1:
                raise UserError(f"layout {text!r}: {name}={value!r} is not a whole number >= 1; {_VALID}")
            sizes[name] = int(value)
        seen.add(name)
    return NamedLayout(rows=tensor[0], cols=tensor[1], **sizes)


def layout_name(data: int, rows: int, cols: int, zero_stage: int, dcn_slices: int = 1, *, sharded: bool = False
                ) -> str:
    """The named layout of a D x R x C mesh at ``zero_stage`` on each of ``dcn_slices`` slices (``sharded``: a
    dcn_fsdp axis, else dcn_data): D replicas at ZeRO 3 are an fsdp axis (the same mechanism), at a lower stage a
    data axis."""
    axis = "fsdp" if zero_stage >= FSDP_ZERO_STAGE else "data"
    sizes = {axis: data} if data > 1 else {}
    across = {"dcn_fsdp": dcn_slices} if sharded else {"dcn_data": dcn_slices}
    return NamedLayout(**sizes, rows=rows, cols=cols, **across).name

