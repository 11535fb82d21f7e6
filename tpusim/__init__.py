"""tpusim: a discrete-event simulator of TPUv4 torus clusters for 2D tensor-parallel training."""

__version__ = "0.1.0"
