"""Role-axis placement for algorithms that do not put both role axes on the two mesh axes.

The 2D algorithms map role axis 0 and role axis 1 onto the logical axes through ``Layout``. The 1D
baselines run over one logical axis of P chips and leave the other role axis unsplit: Megatron TP puts
role axis 1 on the P chips (activations split on features), FSDP puts role axis 0 there (activations
split on the batch). ``RoleAxes`` names the logical axis playing each role (None: unsplit), so the role
table still drives both the sharding and the program. Also: the logical name of each stored dimension.
"""

from __future__ import annotations

from tpusim.errors import InfeasibleError
from tpusim.gemm.sharding import Sharding
from tpusim.vocabulary import Dataflow

RoleAxes = tuple[int | None, int | None]


def role_sharding(axes: RoleAxes) -> Sharding:
    """Every stored matrix split with dimension 0 over ``axes[0]`` and dimension 1 over ``axes[1]``."""
    placement = (axes[0], axes[1])
    return Sharding(placement, placement, placement)


def line_axis(algorithm: str, mesh: tuple[int, int]) -> int:
    """The logical axis holding all P chips of a P x 1 (or 1 x P) mesh."""
    rows, cols = mesh
    if cols == 1:
        return 0
    if rows == 1:
        return 1
    raise InfeasibleError(
        f"algorithm {algorithm!r} runs on a P x 1 mesh; got {rows}x{cols}",
        f"use a {rows * cols}x1 (or 1x{rows * cols}) mesh",
    )


def stored_dims(dataflow: Dataflow, operand: str) -> tuple[str, str]:
    """Logical names ("m", "n", "k") of the two stored dimensions of ``operand`` ("x", "w" or "y")."""
    if operand == "x":
        return ("k", "m") if dataflow is Dataflow.RS else ("m", "k")
    if operand == "w":
        return ("n", "k") if dataflow is Dataflow.LS else ("k", "n")
    return ("m", "n")
