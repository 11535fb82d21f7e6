"""Experiments: YAML specs and sweeps, executors (local processes, Dask), results files, figures, families."""
