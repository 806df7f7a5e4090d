"""``POST /api/v1/act``: ``gpuscope act`` run inside the collector that holds the database.

DuckDB admits one writer, and the collector is it: an ``act`` that opened the file itself
needed the collector stopped, and each stop left a gap in the data (every session then read
"unknown" and every action was postponed). The CLI hands the run to the collector instead
(``gpuscope act --collector URL``): the same policies, dry run unless ``execute``, as of
``at`` (default the collector's now); the answer is the run's JSON, as ``act --json``
prints it. Runs are serialized with the collector's own scheduled ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from gpuscope.actions.policy import Policy, parse_policies
from gpuscope.core.errors import ConfigError, SourceError

#: Runs the policies (execute, at) in the collector: :func:`gpuscope.actions.runner.run_policies`
#: on its store, client and notifier.
RunActions = Callable[[Sequence[Policy], bool, datetime], dict[str, Any]]
#: Refuses an ``at`` further ahead of the collector's clock than this with ``execute``.
FUTURE_SLACK_SECONDS = 60.0


class ActIn(BaseModel):
    """The policy file's text, whether to change the cluster, and as of when."""

    policies: str = Field(max_length=60_000)
    execute: bool = False
    at: datetime | None = None


def actions_router(
    run: RunActions, clock: Callable[[], float], lock: threading.Lock
) -> Callable[[list[Any], list[Any]], APIRouter]:
    """The route, built with the collector's (reader, writer) token checks: it always
    needs the token (a dry run writes its audit rows too)."""

    def make(reader: list[Any], writer: list[Any]) -> APIRouter:
        del reader
        router = APIRouter(tags=["actions"])

        @router.post("/api/v1/act", dependencies=list(writer))
        def act(body: ActIn) -> Any:
            try:
                data = yaml.safe_load(body.policies)
                policies = parse_policies(data, "policies")
            except (yaml.YAMLError, ConfigError) as exc:
                raise HTTPException(400, f"policies: {exc}".splitlines()[0]) from None
            if not policies:
                raise HTTPException(400, "policies: none given")
            now = datetime.fromtimestamp(clock(), UTC)
            at = body.at.astimezone(UTC) if body.at and body.at.tzinfo else body.at
            at = (at.replace(tzinfo=UTC) if at else None) or now
            if body.execute and (at - now).total_seconds() > FUTURE_SLACK_SECONDS:
                raise HTTPException(400, "at is in the future; execute acts now")
            with lock:  # one run at a time, the scheduled ones included
                try:
                    return run(policies, body.execute, at)
                except SourceError as exc:
                    raise HTTPException(503, str(exc).splitlines()[0]) from None

        return router

    return make
