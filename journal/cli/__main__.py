"""`python -m journal.cli`: the `journal` command."""

import sys

from .commands import main

sys.exit(main())
