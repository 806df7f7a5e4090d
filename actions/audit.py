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
    "done",  # carried out
    "would-do",  # a dry run: the API server accepted the server-side dry run, or no cluster
    "blocked",  # a PodDisruptionBudget said not now (429)
    "not-found",  # the pod or node is gone (404): nothing left to do
    "conflict",  # it changed under us (409): re-read on the next run
    "forbidden",  # RBAC (403): fix the Role
    "failed",  # any other answer; the run stops here
    "skipped",  # a safety rule held it back (kill switch, allowlist, limit, protection)
]
ACTOR = "gpuscope"

#: The Kubernetes Event reason per action (CamelCase, as kubectl shows them).
EVENT_REASONS: dict[str, str] = {
    "warn": "GpuscopeIdleWarning",
    "clear-warning": "GpuscopeIdleWarningCleared",
    "delete": "GpuscopeDeleted",
    "evict": "GpuscopeEvicted",
    "stop-notebook": "GpuscopeNotebookStopped",
    "annotate": "GpuscopeAnnotated",
    "cordon": "GpuscopeCordoned",
    "uncordon": "GpuscopeUncordoned",
    "tolerate": "GpuscopeReservedNode",
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
    #: warn, clear-warning, delete, evict, stop-notebook, annotate, cordon, uncordon,
    #: tolerate
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
    actor: str = ACTOR

    def as_record(self) -> dict[str, Any]:
        """The stored JSON (``at`` as a datetime; the store writes it as UTC)."""
        out = asdict(self)
        out["action"] = self.kind
        out["actor"] = f"{self.actor}/policy:{self.policy}"
        return out
