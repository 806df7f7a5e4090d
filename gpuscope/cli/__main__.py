"""``python -m gpuscope.cli``: the same as the ``gpuscope`` command."""

import sys

from gpuscope.cli.entry import main

sys.exit(main())
