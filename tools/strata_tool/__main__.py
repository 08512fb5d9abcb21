"""`python3 -m strata_tool ...` (from tools/ without installing): same as `strata ...`."""

import sys

from .cli import main

sys.exit(main())
