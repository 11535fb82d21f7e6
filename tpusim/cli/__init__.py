"""The ``tpusim`` command line: argument parsing and output only; modelling lives in the layers below."""

from tpusim.cli.main import main

__all__ = ["main"]
