"""Pydantic models of every YAML file, and the strict loader that reports errors by file and key path."""

from tpusim.config.experiment import Experiment, Point, Sweep
from tpusim.config.hardware import (
    CalibratedProfile,
    Calibration,
    ChipSpec,
    DcnSpec,
    HardwareProfile,
    HostSpec,
    IciSpec,
    LaunchOverheads,
    OpCalibration,
    OverlapLimits,
    PhysicalProfile,
    ProfileDocument,
)
from tpusim.config.loader import (
    Bytes,
    BytesPerSecond,
    FlopsPerSecond,
    FrozenModel,
    Seconds,
    deep_merge,
    display_path,
    load_yaml,
    validate,
)
from tpusim.config.model import TransformerModel

__all__ = [
    "Bytes",
    "BytesPerSecond",
    "CalibratedProfile",
    "Calibration",
    "ChipSpec",
    "DcnSpec",
    "Experiment",
    "FlopsPerSecond",
    "FrozenModel",
    "HardwareProfile",
    "HostSpec",
    "IciSpec",
    "LaunchOverheads",
    "OpCalibration",
    "OverlapLimits",
    "PhysicalProfile",
    "Point",
    "ProfileDocument",
    "Seconds",
    "Sweep",
    "TransformerModel",
    "deep_merge",
    "display_path",
    "load_yaml",
    "validate",
]
