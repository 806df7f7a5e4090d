"""The ``gpuscope`` command line (``main.py``), one module per command group.

``entry.py`` is the console script's entry point: it sends ``gpuscope agent`` to the
agent's own light command (gpuscope/agent/command.py) before anything else is imported,
and every other command to ``main.py``.

``main.py`` builds the parser and dispatches; ``act.py``, ``alerts.py``, ``report.py`` and
``whatif.py`` add their subcommands; ``common.py`` holds what they share (opening the
database, the years ``--at``/``--week`` accept), so no subcommand imports ``main.py`` back.
"""
