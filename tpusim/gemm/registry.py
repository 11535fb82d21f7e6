"""The named distributed GeMM algorithms: the built-in ones, listed here, the plug-ins', and any a user adds.

``get_algorithm`` resolves a name (an unknown one is an error listing the known names, never a silent fallback);
``register_algorithm`` adds an algorithm object under its ``name``, and a name taken twice is an error. The last
step of this module's import loads the plug-ins (``tpusim.gemm.plugins``), so every process that can look a name
up has them; the package's ``__init__`` imports this module first, so a plug-in may import any GeMM module.
"""

from __future__ import annotations

from tpusim.errors import unknown_name
from tpusim.gemm.algorithm import GemmAlgorithm
from tpusim.gemm.algorithms.cannon import Cannon
from tpusim.gemm.algorithms.collective import CollectiveGemm
from tpusim.gemm.algorithms.fsdp import FsdpGemm
from tpusim.gemm.algorithms.meshslice import MeshSlice
from tpusim.gemm.algorithms.summa import Summa
from tpusim.gemm.algorithms.tp1d import Tp1dGemm
from tpusim.gemm.algorithms.wang import WangGemm
from tpusim.gemm.plugins import load_plugins

__all__ = ["algorithms", "get_algorithm", "register_algorithm"]

_ALGORITHMS: dict[str, GemmAlgorithm] = {}


def register_algorithm(algorithm: GemmAlgorithm) -> GemmAlgorithm:
    """Make ``algorithm`` available by its name; a name already taken is an error."""
    if algorithm.name in _ALGORITHMS:
        raise ValueError(f"an algorithm named {algorithm.name!r} is already registered")
    _ALGORITHMS[algorithm.name] = algorithm
    return algorithm


for _builtin in (CollectiveGemm(), Summa(), Cannon(), WangGemm(), MeshSlice(), Tp1dGemm(), FsdpGemm()):
    register_algorithm(_builtin)


def get_algorithm(name: str) -> GemmAlgorithm:
    """The algorithm registered as ``name``."""
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise unknown_name("algorithm", name, list(_ALGORITHMS)) from None


def algorithms() -> dict[str, GemmAlgorithm]:
    """Every registered algorithm, by name, sorted."""
    return dict(sorted(_ALGORITHMS.items()))


load_plugins()  # last: a plug-in's own import of this module finds every name above defined
