"""Action policies: a YAML file of named policies (docs/design.md, Policies).

Three types. ``idle`` and ``time_limit`` select interactive workloads (by namespace and
labels), warn their owner, wait the warning period, check again and then act (``delete``,
``evict``, ``stop-notebook`` or ``annotate``). ``consolidation`` says which pods may move
(preemptible batch only by default), the most evictions per run and per node, a cool-down
between runs, and how long a node freed for a pending job stays cordoned at most.

Every policy is a dry run unless it says ``dry_run: false`` *and* the run was asked to
execute (``gpuscope act --execute``, or ``actions.execute`` for the collector's schedule).
Protected namespaces (``workloads.protected_namespaces``) and pods labelled
``gpuscope.io/protect=true`` are never touched; batch workloads are never idle-killed and
interactive ones never moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import read_yaml_file

PolicyType = Literal["idle", "time_limit", "consolidation"]
IdleAction = Literal["delete", "evict", "stop-notebook", "annotate"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Policy(_Model):
    """One named policy; the fields that do not apply to its type are ignored."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    type: PolicyType
    #: Dry run unless this is false and the run executes.
    dry_run: bool = True
    #: Namespaces the policy covers (empty: every namespace not protected).
    namespaces: list[str] = Field(default_factory=list)
    #: Labels a pod must carry (all of them) to be covered.
    match_labels: dict[str, str] = Field(default_factory=dict)

    # idle / time_limit
    #: GPU utilization under this is idle (defaults to analytics.idle_utilization_below).
    idle_utilization_below: float | None = Field(default=None, ge=0, le=1)
    #: Idle this long before the warning (defaults to analytics.idle_window_minutes).
    idle_minutes: float | None = Field(default=None, gt=0)
    #: Sessions older than this are warned and then acted on (time_limit policies).
    max_session_age_hours: float | None = Field(default=None, gt=0)
    #: Time between the warning and the action; the workload is checked again then.
    warning_minutes: float = Field(default=30, ge=0)
    action: IdleAction = "annotate"
    #: Tries of a step the API server refused or failed, before it is given up (with a
    #: ``gave-up`` audit row and a notice through the alerts routes).
    max_attempts: int = Field(default=5, ge=1)

    # consolidation
    #: Which pods may move: ``preemptible`` (label gpuscope.io/preemptible=true or a
    #: priority under workloads.preemptible_priority_below), batch and training only.
    movable: Literal["preemptible"] = "preemptible"
    max_evictions_per_run: int = Field(default=4, ge=0)
    max_evictions_per_node: int = Field(default=2, ge=0)
    cooldown_minutes: float = Field(default=60, ge=0)
    #: The longest a node freed for a pending job stays reserved for it (lifted sooner once
    #: the job is bound, gone or the plan abandoned).
    cordon_minutes: float = Field(default=20, gt=0)

    @model_validator(mode="after")
    def _check(self) -> Policy:
        if self.type == "time_limit" and self.max_session_age_hours is None:
            raise ValueError("a time_limit policy needs max_session_age_hours")
        return self

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is selected by this policy."""
        if self.namespaces and namespace not in self.namespaces:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels.items())


class PolicyFile(_Model):
    policies: list[Policy] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> PolicyFile:
        names = [p.name for p in self.policies]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"policy names must be unique: {', '.join(dupes)}")
        return self


def parse_policies(data: Any, where: str = "policy file") -> list[Policy]:
    """Validate a loaded YAML document; one :class:`ConfigError` line on bad input."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping with a 'policies' list")
    try:
        return list(PolicyFile.model_validate(data).policies)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        if loc.startswith("policies."):
            index = loc.split(".")[1]
            if index.isdigit() and isinstance(data.get("policies"), list):
                item = data["policies"][int(index)]
                name = item.get("name") if isinstance(item, dict) else None
                if name:
                    loc = loc.replace(f"policies.{index}", f"policies[{name}]", 1)
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{where}: {loc or 'policies'}: {msg}") from None


def load_policies(path: Path) -> list[Policy]:
    """Policies from a YAML file; a missing or malformed file is one ConfigError line."""
    return parse_policies(read_yaml_file(path, "policy file"), f"policy file {path}")
