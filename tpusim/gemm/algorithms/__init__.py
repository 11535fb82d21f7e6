"""The built-in distributed GeMM algorithms, one module each; importing registers them."""

from tpusim.gemm.algorithms import (
    cannon,  # noqa: F401
    collective,  # noqa: F401
    fsdp,  # noqa: F401
    meshslice,  # noqa: F401
    summa,  # noqa: F401
    tp1d,  # noqa: F401
    wang,  # noqa: F401
)
