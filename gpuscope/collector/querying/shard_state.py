"""Where each fleet-mode shard stands, for ``/api/v1/status``: asked, answered, failed,
timed out or left for the next cycle, since when, and why.

Written by the cycle (the shard's own worker thread while it asks, the cycle's thread
when it stores), read by the API's threads: each field is replaced whole, never mutated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gpuscope.core.timefmt import rfc3339

State = Literal["new", "asking", "ok", "failed", "timed_out", "not_asked"]


@dataclass
class ShardState:
    state: State = "new"
    #: When the state was entered (the cycle's time).
    since: float | None = None
    error: str = ""
    #: Cycles in a row that ended without this shard's answer.
    failures: int = 0
    #: The number of the cycle that last asked it (0: never): of two shards as far
    #: behind, the one asked longer ago goes first.
    asked_in: int = 0
    last_success: float | None = None

    def enter(self, state: State, at: float, error: str = "") -> None:
        self.state, self.since, self.error = state, at, error
        if state == "ok":
            self.failures, self.last_success = 0, at
        elif state != "asking":
            self.failures += 1

    def shown(self, shard: int, cursor: float | None) -> dict[str, Any]:
        return {
            "shard": shard,
            "state": self.state,
            "since": rfc3339(self.since) if self.since is not None else None,
            "next_bucket": rfc3339(cursor) if cursor is not None else None,
            "failures_in_a_row": self.failures,
            "last_success": rfc3339(self.last_success) if self.last_success else None,
            "error": self.error or None,
        }
