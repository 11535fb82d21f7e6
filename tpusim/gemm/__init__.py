"""Distributed GeMM algorithms as SPMD chip programs, the dataflow role table, and their twins."""

# The registry first, whichever GeMM module is asked for: its import loads the plug-ins, and a plug-in that imports
# (say) tpusim.gemm.simulate must not find that module half-imported above it.
import tpusim.gemm.registry  # noqa: F401
