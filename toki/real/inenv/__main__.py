"""`python -m inenv ADAPTER`: serve the line-JSON protocol (see server.py)."""

import sys

from .server import main

sys.exit(main(sys.argv[1:]))
