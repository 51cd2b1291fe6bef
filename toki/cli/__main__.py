"""`python -m toki.cli`."""

import sys

from toki.cli.main import main

sys.exit(main())
