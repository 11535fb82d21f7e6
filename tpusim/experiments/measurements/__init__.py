"""Measured training runs (configs/measurements/): reading a table of them, turning each row into a step
request, and setting the simulated step time next to the measured one (docs/validation.md#measured-training-runs).
"""
