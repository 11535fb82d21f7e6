"""A reader that goes away (``tpusim schema | head -1``) ends the command quietly, exit 0, nothing on stderr."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_closed_stdout_is_not_an_internal_error() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write, so every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "tpusim", "schema"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(write_end)
    assert done.stderr == ""
    assert done.returncode == 0
