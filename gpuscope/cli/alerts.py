"""``gpuscope alerts``: check the receivers' wiring, and manage silences over the API.

``test`` sends one sample alert to each receiver with the real retries and prints one line
per receiver (never a URL, token or key). ``silence`` talks to a running collector's API
(``/api/v1/silences``) with its bearer token, so it works while the collector holds the
database.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gpuscope.core.errors import UserError

TOKEN_ENV = "GPUSCOPE_API_TOKEN"  # noqa: S105 - the variable's name, not a secret


def add_alerts_parser(sub: Any, add_logging: Any) -> None:
    al = sub.add_parser("alerts", help="test receivers; add, list and expire silences")
    al_sub = al.add_subparsers(dest="alerts_command", required=True, parser_class=type(al))

    test = al_sub.add_parser("test", help="send one sample alert to each receiver")
    test.add_argument(
        "--config",
        type=Path,
        required=True,
        metavar="FILE",
        help="the alerts config, or settings whose alerts.config_file names it",
    )
    test.add_argument("--receiver", action="append", metavar="NAME",
                      help="only this receiver (repeatable)")  # fmt: skip
    add_logging(test)

    sil = al_sub.add_parser("silence", help="silences over the collector's API")
    sil_sub = sil.add_subparsers(dest="silence_command", required=True, parser_class=type(al))
    add = sil_sub.add_parser("add", help="mute alerts matching every --match until it expires")
    add.add_argument(
        "--match",
        action="append",
        required=True,
        metavar="MATCHER",
        help='label matcher, e.g. namespace=ml or alertname=~"Idle.*" (repeatable)',
    )
    add.add_argument("--duration", metavar="DURATION", help="how long, e.g. 2h (or --until)")
    add.add_argument("--until", metavar="TIME", help="until this time (RFC 3339)")
    add.add_argument("--comment", default="", help="why")
    add.add_argument("--author", default=os.environ.get("USER", ""), help="who (default $USER)")
    lst = sil_sub.add_parser("list", help="active silences")
    lst.add_argument("--all", action="store_true", help="include expired silences")
    lst.add_argument("--json", action="store_true", help="the API's answer as JSON")
    exp = sil_sub.add_parser("expire", help="end a silence now")
    exp.add_argument("id", help="the silence's id")
    for p in (add, lst, exp):
        p.add_argument(
            "--url", metavar="URL", help="collector API (default: from --config collector.listen)"
        )
        p.add_argument(
            "--config",
            type=Path,
            metavar="FILE",
            help="settings file (API address and token; also $GPUSCOPE_CONFIG)",
        )
        add_logging(p)


def cmd_alerts(args: argparse.Namespace) -> int:
    if args.alerts_command == "test":
        return _test(args)
    return _silence(args)


def _test(args: argparse.Namespace) -> int:
    from gpuscope.alerts.config import load_any
    from gpuscope.alerts.testing import send_samples

    config = load_any(args.config)
    names = [r.name for r in config.receivers]
    wanted = args.receiver or names
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise UserError(f"no receiver named {', '.join(unknown)} in {args.config}")
    if not wanted:
        raise UserError(f"{args.config} has no receivers")
    failed = 0
    for line, ok in send_samples(config, wanted):
        print(line)
        failed += not ok
    return 1 if failed else 0


def _api(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    from gpuscope.core.settings import load_settings

    settings = load_settings(args.config)
    url = args.url
    if not url:
        host, _, port = settings.collector.listen.rpartition(":")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::"):  # noqa: S104 - we connect, we do not bind
            host = "127.0.0.1"
        url = f"http://{host}:{port}"
    token = os.environ.get(TOKEN_ENV) or settings.collector.resolve_api_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return url.rstrip("/"), headers


def _call(method: str, url: str, headers: dict[str, str], **kw: Any) -> Any:
    import httpx

    try:
        r = httpx.request(method, url, headers=headers, timeout=10, **kw)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach the collector API: {type(exc).__name__}") from None
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise UserError(f"the collector API answered {r.status_code}: {detail}")
    return r.json()


def _silence(args: argparse.Namespace) -> int:
    base, headers = _api(args)
    cmd = args.silence_command
    if cmd == "add":
        if (args.duration is None) == (args.until is None):
            raise UserError("give --duration or --until (one of them)")
        body: dict[str, Any] = {"matchers": args.match, "comment": args.comment,
                                "created_by": args.author}  # fmt: skip
        if args.duration:
            body["duration"] = args.duration
        else:
            body["ends_at"] = args.until
        got = _call("POST", f"{base}/api/v1/silences", headers, json=body)
        print(f"{got['id']} until {got['ends_at']}")
        return 0
    if cmd == "list":
        got = _call("GET", f"{base}/api/v1/silences", headers, params={"all": args.all})
        if args.json:
            print(json.dumps(got, indent=2))
            return 0
        for s in got["items"]:
            matchers = ",".join(s["matchers"])
            print(f"{s['id']}  {s['starts_at']} -> {s['ends_at']}  {matchers}  "
                  f"{s['created_by']}: {s['comment']}".rstrip())  # fmt: skip
        if not got["items"]:
            print("no silences", file=sys.stderr)
        return 0
    got = _call("DELETE", f"{base}/api/v1/silences/{args.id}", headers)
    print(f"{got['id']} expired" if got["was_active"] else f"{got['id']} had already ended")
    return 0
