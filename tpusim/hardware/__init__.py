"""Chip timing model and the registry of named hardware profiles (no simulation engine here)."""

from tpusim.hardware.chip import ChipModel
from tpusim.hardware.profiles import (
    hardware_names,
    list_hardware,
    load_hardware,
    scaled_profile,
    with_collective_switches,
)

__all__ = [
    "ChipModel", "hardware_names", "list_hardware", "load_hardware", "scaled_profile", "with_collective_switches",
]
