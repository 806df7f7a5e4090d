"""``python -m gpuscope.cli``: the same as the ``gpuscope`` command."""

from gpuscope.cli.main import main

main()
