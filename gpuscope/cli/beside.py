"""The CLI beside a live collector: ``analyze``, ``report weekly`` and ``whatif --db`` on the
database a running collector holds run inside that collector, through its API.

DuckDB lets one process open a file, and a running collector is that process: a read-only
open of its database by another process fails on the lock, and stopping the collector for
a CLI command left a gap in its data (every session then read "unknown"). So:

- ``--collector URL`` runs the command through the collector at URL (``--db`` is then not
  opened, and may be left out);
- without it, a database held by another process is handed to the collector the settings
  name (``http://`` + ``collector.listen`` of ``--config``, 0.0.0.0 read as 127.0.0.1),
  once that collector's ``/api/v1/status`` says it holds this very file; otherwise the old
  one-line refusal, now saying how to reach it.

The token is ``$GPUSCOPE_API_TOKEN``, else ``collector.api_token(_file/_env)`` of
``--config``. What comes back is printed exactly as a local run prints it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError
from gpuscope.core.settings import Settings

log = logging.getLogger(__name__)

#: The token the CLI sends, when set (as ``gpuscope alerts silence``).
TOKEN_ENV = "GPUSCOPE_API_TOKEN"  # noqa: S105 - the variable's name, not a secret

#: How long one command may run inside the collector (a week's report on a big store).
TIMEOUT_S = 600.0

COLLECTOR_HELP = (
    "run inside the collector at URL (its API), which holds the database: it keeps "
    "collecting, so its data has no gap; --db is then not opened (default: when --db is "
    "held by a running collector, the one collector.listen of --config names)"
)


def add_collector_argument(parser: Any) -> None:
    """``--collector URL`` on ``analyze``, ``report weekly`` and ``whatif``."""
    parser.add_argument("--collector", metavar="URL", help=COLLECTOR_HELP)


def is_held(path: Path) -> bool:
    """Whether another process (a running collector) holds the DuckDB file at ``path``:
    DuckDB refuses even a read-only open of it then, naming the lock."""
    import duckdb

    if not path.is_file():
        return False
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        return "lock" in str(exc).lower()
    con.close()
    return False


def _listen_url(settings: Settings) -> str:
    host, _, port = settings.collector.listen.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - we connect, we do not bind
        host = "127.0.0.1"
    return f"http://{host}:{port}"


class Collector:
    """A collector's API, for one command of the CLI."""

    def __init__(self, url: str, token: str) -> None:
        if not url.startswith(("http://", "https://")):
            raise UserError(f"--collector {url}: expected an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.token = token

    def get(self, path: str, params: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """GET ``path`` with ``params``; the JSON object answered, or one line."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self._send(urllib.request.Request(self.url + path + query, headers=self._auth()))  # noqa: S310

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``path``; the JSON object answered, or one line."""
        headers = {**self._auth(), "Content-Type": "application/json"}
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method="POST")  # noqa: S310
        return self._send(request)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _send(self, request: urllib.request.Request) -> dict[str, Any]:
        """One request, its HTTP and connection errors each one line (UserError)."""
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:  # noqa: S310
                out = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                detail = json.loads(exc.read()).get("detail")
            except (ValueError, AttributeError):
                detail = exc.reason
            if isinstance(detail, list):  # FastAPI's validation errors
                detail = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
            raise UserError(f"the collector at {self.url} refused: {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            why = getattr(exc, "reason", exc)
            raise UserError(f"cannot reach the collector at {self.url}: {why}") from None
        if not isinstance(out, dict):
            raise UserError(f"the collector at {self.url} answered something else than an object")
        return out


def beside(args: argparse.Namespace, settings: Settings, db: Path | None) -> Collector | None:
    """The collector to run this command through, or None to open ``db`` here.

    ``--collector URL`` always; else, when another process holds ``db``, the collector the
    settings name, provided it says it holds that file (a different collector's data must
    not stand in for this database's)."""
    token = os.environ.get(TOKEN_ENV) or settings.collector.resolve_api_token()
    given = getattr(args, "collector", None)
    if given:
        return Collector(given, token)
    if db is None or not is_held(db):
        return None
    collector = Collector(_listen_url(settings), token)
    held = f"{db} is in use by another process (a running collector?)"
    try:
        status = collector.get("/api/v1/status")
    except UserError as exc:
        raise UserError(
            f"{held}, and {str(exc)[0].lower()}{str(exc)[1:]}: give --collector URL of the "
            "collector that holds it (or --config with its collector.listen and token)"
        ) from None
    theirs = status.get("database")
    if not isinstance(theirs, str) or not _same_file(Path(theirs), db):
        raise UserError(
            f"{held}; the collector at {collector.url} holds {theirs or 'another database'}: "
            "give --collector URL of the one that holds it"
        )
    log.info("%s is held by the collector at %s: running there", db, collector.url)
    return collector


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def analyze_through(collector: Collector, what: str, at: str | None, as_json: bool) -> int:
    """``gpuscope analyze WHAT`` run in the collector (``GET /api/v1/analyze``), printed as
    a local run prints it (the data-age note on stderr)."""
    import sys

    from gpuscope.analytics.runner import as_json as analyses_json
    from gpuscope.analytics.runner import render_text

    out = collector.get("/api/v1/analyze", [("what", what)] + ([("at", at)] if at else []))
    if out.get("note"):
        print(f"gpuscope analyze: {out['note']}", file=sys.stderr)
    try:
        analyses = {name: _analysis(a) for name, a in dict(out["analyses"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UserError(f"the collector at {collector.url} answered no analysis") from None
    if as_json:
        print(json.dumps(analyses_json(analyses), indent=2, default=str))
    else:
        print(render_text(analyses), end="")
    return 0


def _analysis(got: dict[str, Any]) -> Any:
    """An analysis back from its JSON (``runner.as_json`` of one analysis)."""
    from datetime import datetime

    from gpuscope.analytics.base import Analysis
    from gpuscope.core.records import Finding

    findings = []
    for f in got["findings"]:
        since = f.get("since")
        findings.append(
            Finding(
                id=f["id"],
                kind=f["kind"],
                severity=f["severity"],
                subject=dict(f["subject"]),
                since=datetime.fromisoformat(since) if since else None,
                observed_at=datetime.fromisoformat(f["observed_at"]),
                evidence=dict(f.get("evidence") or {}),
                recommendation=f.get("recommendation"),
            )
        )
    return Analysis(tuple(sorted({f.kind for f in findings})), findings, dict(got["summary"]))


def report_through(collector: Collector, week: str, out_dir: Path, as_json: bool) -> int:
    """``gpuscope report weekly`` run in the collector (``GET /api/v1/report/weekly``): its
    files written into ``out_dir/WEEK`` here (swapped in whole), printed as a local run."""
    import base64
    import binascii

    from gpuscope.analytics.report.weekly import write_folder

    final = out_dir / week
    html = final / "report.html"
    got = collector.get("/api/v1/report/weekly", [("week", week), ("link", str(html))])
    try:
        files = {str(k): base64.b64decode(v, validate=True) for k, v in dict(got["files"]).items()}
        summary = str(got["summary"])
    except (KeyError, TypeError, ValueError, binascii.Error):
        raise UserError(f"the collector at {collector.url} answered no report") from None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_folder(final, files)
    except OSError as exc:
        raise UserError(f"cannot write the report to {final}: {exc.strerror}") from None
    if as_json:
        doc = {
            "week": got.get("week", week),
            "directory": str(final),
            "html": str(html),
            "files": sorted(str(p) for p in final.iterdir() if p.is_file()),
            "cluster": got.get("cluster", {}),
            "notes": got.get("notes", []),
            "summary": summary,
        }
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(summary, end="")
    return 0


def whatif_through(
    collector: Collector,
    week: str,
    policies: list[str],
    seeds: int | None,
    drop: bool,
    level: str | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """``gpuscope whatif --db`` run in the collector (``GET /api/v1/whatif``): the figures
    ``--json`` prints (``extra``: more parameters, the capacity what-if's)."""
    params = [("week", week)] + [("policy", p) for p in policies]
    if seeds is not None:
        params.append(("seeds", str(int(seeds))))
    if drop:
        params.append(("drop", "true"))
    if level:
        params.append(("topology_level", level))
    params += extra or []  # the capacity flags, --calibrate
    return collector.get("/api/v1/whatif", params)
