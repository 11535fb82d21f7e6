"""The built-in distributed GeMM algorithms, one module each; importing registers them."""

from tpusim.gemm.algorithms import (
    collective,  # noqa: F401
    meshslice,  # noqa: F401
)
