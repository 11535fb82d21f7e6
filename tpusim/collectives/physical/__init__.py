"""The physical network backend: directed ICI links, per-link collective plans and the physical closed forms
(``network``: the model)."""

from tpusim.collectives.physical.network import PhysicalNetwork

__all__ = ["PhysicalNetwork"]
