"""Log set-up for every command: text for people, JSON lines for log collectors.

``--log-format json`` (or the ``logging.format`` setting, ``GPUSCOPE_LOGGING__FORMAT``)
writes one JSON object per record (``time``, ``level``, ``logger``, ``message``, and
``exc_info`` with the traceback), which Loki, Elasticsearch or Cloud Logging parse without a
pattern. The formatter is python-json-logger's; only the time is ours, RFC 3339 with Z like
everything else gpuscope prints.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO

from gpuscope.core.timefmt import rfc3339

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: Libraries that log every request at INFO; gpuscope keeps them at WARNING.
NOISY = ("httpx", "httpcore", "kubernetes", "urllib3", "apscheduler", "matplotlib")


def make_handler(fmt: LogFormat, stream: TextIO | None = None) -> logging.Handler:
    """A handler writing ``fmt`` lines to ``stream`` (stderr by default)."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    if fmt == "json":
        # imported for JSON logs only: the node agent logging text never loads it
        from pythonjsonlogger.json import JsonFormatter

        class _Json(JsonFormatter):
            def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
                return rfc3339(record.created)

        renamed = {"asctime": "time", "levelname": "level", "name": "logger"}
        handler.setFormatter(_Json(TEXT_FORMAT, rename_fields=renamed))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(level: str, fmt: LogFormat = "text") -> None:
    """Root logging to stderr at ``level`` in ``fmt``. Like :func:`logging.basicConfig`, it
    leaves a root logger that something else configured (a test runner, a program that
    embeds gpuscope) as it is."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(make_handler(fmt))
        root.setLevel(level)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
