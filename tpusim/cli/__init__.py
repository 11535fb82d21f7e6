"""The ``tpusim`` command line: argument parsing and output only; modelling lives in the layers below.

Loading the command line takes a moment; a Ctrl-C meanwhile ends the command as one during it does (``interrupted``,
exit status 130), not with a traceback of whichever import it cut short.
"""

import sys

try:
    from tpusim.cli.main import main
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None

__all__ = ["main"]
