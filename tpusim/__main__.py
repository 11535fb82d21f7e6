"""``python -m tpusim``: the same command line as ``tpusim``."""

from tpusim.cli import main

raise SystemExit(main())
