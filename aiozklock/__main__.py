"""``python -m aiozklock COMMAND``: the command line lives in :mod:`aiozklock._cli`."""

from __future__ import annotations

import sys

from aiozklock._cli import build_parser as build_parser
from aiozklock._cli import main as main

if __name__ == "__main__":
    sys.exit(main())
