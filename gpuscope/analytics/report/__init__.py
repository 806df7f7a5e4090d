"""The weekly utilization report.

``weekly.py`` is the entry (``weekly_report``: numbers, page, summary, tables on disk);
``data.py`` fetches the rows with the named SQL of ``report.sql`` (run by ``sql.py``),
``tables.py``, ``fragmentation.py`` and ``whatif.py`` compute the sections, ``charts.py``,
``html.py`` (``templates/``) and ``markdown.py`` render them, ``week.py`` is the ISO week.
"""
