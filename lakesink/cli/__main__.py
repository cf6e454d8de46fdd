"""``python -m lakesink.cli``: the ``lakesink`` command."""

import sys

from lakesink.cli.commands import main

sys.exit(main())
