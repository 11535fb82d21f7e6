"""The calibrated network backend: the MeshSlice authors' abstract ring per logical axis (``network``: the model)
with their fitted per-op, per-axis closed forms (``closed_forms``)."""

from tpusim.collectives.calibrated.network import CalibratedNetwork

__all__ = ["CalibratedNetwork"]
