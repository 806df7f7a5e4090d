"""The ``gpuscope`` command line (``main.py``), one module per command group.

``main.py`` builds the parser and dispatches; ``act.py``, ``alerts.py``, ``report.py`` and
``whatif.py`` add their subcommands; ``common.py`` holds what they share (opening the
database, the years ``--at``/``--week`` accept), so no subcommand imports ``main.py`` back.
"""
