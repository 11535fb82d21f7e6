"""The built-in distributed GeMM algorithms, one module each (registered in ``tpusim.gemm.registry``)."""
