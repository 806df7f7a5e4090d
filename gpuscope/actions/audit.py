"""The audit record: every step the executor plans or carries out, with who, what, why, when
and the result. Stored append-only in the ``actions`` table, served by the API
(``/api/v1/actions``), counted in the collector's gauges and (for the pod or node it is
about) emitted as a Kubernetes Event.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

#: What a step did, or would do in a dry run.
Result = Literal[
    "done",  # the API server accepted the change
    "would-do",  # a dry run: the API server accepted the server-side dry run, or no cluster
    "skipped",  # nothing sent: a safety rule held it back, or the re-read object showed
    # there was nothing to do (already done, Terminating); ``message`` says which
    "not-found",  # the object is gone (404): nothing left to do
    "blocked",  # a PodDisruptionBudget said not now (429 with a DisruptionBudget cause)
    "conflict",  # it changed under us, or is another object now (409, or a UID mismatch)
    "invalid",  # the API server's validation refused it (422)
    "forbidden",  # RBAC (403): fix the Role
    "unauthorized",  # 401: the credentials are not accepted
    "failed",  # 5xx, a 429 that outlasted its retries, or no answer (timeout)
    "gave-up",  # the step failed max_attempts times: no more tries (an alert says so)
]
#: Results that make ``gpuscope act`` exit 3: the server refused, or the step failed.
REFUSED: frozenset[str] = frozenset(
    {"blocked", "conflict", "invalid", "forbidden", "unauthorized", "failed", "gave-up"}
)
ACTOR = "gpuscope"

#: The Kubernetes Event reason per action (CamelCase, as kubectl shows them).
EVENT_REASONS: dict[str, str] = {
    "warn": "GpuscopeIdleWarning",
    "clear-warning": "GpuscopeIdleWarningCleared",
    "delete": "GpuscopeDeleted",
    "evict": "GpuscopeEvicted",
    "stop-notebook": "GpuscopeNotebookStopped",
    "annotate": "GpuscopeAnnotated",
    "reserve": "GpuscopeReservedNode",
    "tolerate": "GpuscopeToleratesReservation",
    "lift": "GpuscopeReservationLifted",
    "uncordon": "GpuscopeUncordoned",
}


def step_id(*parts: object) -> str:
    """A stable id for a step: the same step of the same run plan has the same id."""
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One row of the audit log (``actions`` table; ``record`` JSON is this whole)."""

    id: str
    at: datetime
    #: warn, clear-warning, delete, evict, stop-notebook, annotate, reserve, tolerate,
    #: lift (and uncordon, for cordons left by versions before the reservation taint)
    kind: str
    policy: str
    dry_run: bool
    result: Result
    reason: str
    namespace: str = ""
    pod: str = ""
    node: str = ""
    uid: str = ""
    gpus: float = 0.0
    finding_id: str | None = None
    goal: str | None = None
    #: GPU-hours the workload had held idle when it was stopped (idle policies), or the
    #: GPUs x hours a consolidation step makes usable; None for warnings and cordons.
    gpu_hours_freed: float | None = None
    #: The API server's answer (one line) or the safety rule that held the step back.
    message: str = ""
    #: The change sent ("" when nothing was sent), e.g. ``evict pod ml/x (uid precondition)``.
    sent: str = ""
    #: The HTTP status the API server answered the change with (None: nothing sent, or
    #: no answer).
    status: int | None = None
    actor: str = ACTOR

    def as_record(self) -> dict[str, Any]:
        """The stored JSON (``at`` as a datetime; the store writes it as UTC)."""
        out = asdict(self)
        out["action"] = self.kind
        out["actor"] = f"{self.actor}/policy:{self.policy}"
        return out
