"""Pydantic models of every YAML file, and the strict loader that reports errors by file and key path."""

from tpusim.config.hardware import Calibration, ChipSpec, HardwareProfile, IciSpec, OpCalibration
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
    "Calibration",
    "ChipSpec",
    "FlopsPerSecond",
    "FrozenModel",
    "HardwareProfile",
    "IciSpec",
    "OpCalibration",
    "Seconds",
    "TransformerModel",
    "deep_merge",
    "display_path",
    "load_yaml",
    "validate",
]
