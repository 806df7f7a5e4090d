"""Idle-termination policies replayed over the stored history (``gpuscope whatif idle``).

``read.py`` reads the sessions and their busy/idle/unknown runs from the store (SQL in
``idle_whatif.sql``, the idle detector's own busy signal and gap rule); ``points.py`` is
the ladder and the configured policies; ``replay.py`` is the pure replay; ``figures.py``
puts them together with the recommendation, for the CLI, the API and the weekly report.
"""
