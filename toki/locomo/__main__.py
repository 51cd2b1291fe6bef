"""`python -m toki.locomo`: the same as `toki locomo`."""

import sys

from toki.locomo.cli import main

sys.exit(main())
