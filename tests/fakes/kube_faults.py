"""Scripted answers for the fake Kubernetes API server, with the real server's bodies.

A test plants an :class:`Answer` for the next requests that match a method and a path
prefix (:meth:`tests.fakes.kube_api.FakeKubeApi.script`); the server then answers them with
the ``Status`` object kube-apiserver sends for that code, headers included:

- 401 ``Unauthorized`` (a bad or expired token), 403 ``Forbidden`` (RBAC's message),
  404 ``NotFound``, 409 ``Conflict`` (the optimistic-lock message), 422 ``Invalid``;
- 429 ``TooManyRequests``: API Priority and Fairness throttling ("Too many requests, please
  try again later.", ``Retry-After`` header and ``details.retryAfterSeconds`` when given),
  or, with ``disruption_budget``, the Eviction API's refusal with its ``DisruptionBudget``
  cause (no ``Retry-After``: the budget, not the server, says when);
- 500 ``InternalError``, 504 ``Timeout``;
- status 0: no answer at all; the connection is held until the client gives up (its read
  timeout), as from a server or load balancer that hangs.

``apply=True`` first carries the request out (the change persists), then answers with the
planted code: the "did my delete go through?" case after a 500 or a timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.fakes.kube_store import ApiError


@dataclass
class Answer:
    """One planted answer; see the module docstring."""

    status: int
    retry_after: int | None = None
    #: Carry the request out before answering with ``status`` (the change persists).
    apply: bool = False
    #: For a 429 on an eviction: the PodDisruptionBudget named in the cause.
    disruption_budget: str | None = None
    #: Overrides the default message.
    message: str = ""


@dataclass
class Planted:
    answer: Answer
    times: int
    method: str
    path: str


@dataclass(frozen=True)
class Target:
    """What a request is about, for the messages."""

    plural: str
    kind: str
    name: str
    namespace: str | None
    group: str
    verb: str
    user: str


def forbidden(t: Target) -> ApiError:
    """RBAC's 403, word for word as the authorizer phrases it."""
    where = f' in the namespace "{t.namespace}"' if t.namespace else " at the cluster scope"
    return ApiError(
        403,
        "Forbidden",
        f'{t.plural} "{t.name}" is forbidden: User "{t.user}" cannot {t.verb} '
        f'resource "{t.plural}" in API group "{t.group}"{where}',
        {"name": t.name, "kind": t.plural.partition("/")[0]},
    )


def conflict(plural: str, name: str, why: str = "") -> ApiError:
    """409 from the optimistic lock (a stale resourceVersion) or a failed precondition."""
    why = (
        why
        or "the object has been modified; please apply your changes to the latest version and try again"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {plural} "{name}": {why}',
        {"name": name, "kind": plural},
    )


def invalid(kind: str, name: str, field: str, cause: str, message: str) -> ApiError:
    """422 with one field cause, as a validation failure is answered."""
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {field}: {message}',
        {
            "name": name,
            "kind": kind,
            "causes": [{"reason": cause, "message": message, "field": field}],
        },
    )


def disruption_budget_refusal(
    pdb: str, needed: int, healthy: int, *, processing: bool = False
) -> ApiError:
    """The Eviction API's 429 when a PodDisruptionBudget allows no disruption now (no
    ``retryAfterSeconds``: the handler passes 0, which the Status leaves out), or, with
    ``processing``, while its controller has not caught up (``retryAfterSeconds`` 10 and
    a ``Retry-After`` header)."""
    if processing:
        return ApiError(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            {
                "retryAfterSeconds": 10,
                "causes": [
                    {
                        "reason": "DisruptionBudget",
                        "message": f"The disruption budget {pdb} is still being processed "
                        "by the server.",
                    }
                ],
            },
            headers={"Retry-After": "10"},
        )
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pdb} needs {needed} healthy pods "
                    f"and has {healthy} currently",
                }
            ]
        },
    )


def planted_error(answer: Answer, t: Target) -> ApiError:
    """The error the server answers for a planted status (never status 0)."""
    code, msg = answer.status, answer.message
    if code == 401:
        return ApiError(401, "Unauthorized", msg or "Unauthorized")
    if code == 403:
        err = forbidden(t)
        if msg:
            err.message = msg
        return err
    if code == 404:
        return ApiError(
            404,
            "NotFound",
            msg or f'{t.plural} "{t.name}" not found',
            {"name": t.name, "kind": t.plural},
        )
    if code == 409:
        return conflict(t.plural.partition("/")[0], t.name, msg)
    if code == 422:
        return invalid(t.kind, t.name, "metadata", "FieldValueInvalid", msg or "Invalid value")
    if code == 429 and answer.disruption_budget:
        return disruption_budget_refusal(answer.disruption_budget, 1, 1)
    if code == 429:
        details = (
            {"retryAfterSeconds": answer.retry_after} if answer.retry_after is not None else None
        )
        headers = {"Retry-After": str(answer.retry_after)} if answer.retry_after is not None else {}
        return ApiError(
            429,
            "TooManyRequests",
            msg or "Too many requests, please try again later.",
            details,
            headers=headers,
        )
    if code == 504:
        return ApiError(
            504,
            "Timeout",
            msg or "Timeout: request did not complete within the allotted timeout",
            {
                "causes": [
                    {"reason": "UnexpectedServerResponse", "message": "context deadline exceeded"}
                ]
            },
        )
    return ApiError(
        code,
        "InternalError",
        f"Internal error occurred: {msg or 'planted failure'}",
        {"causes": [{"message": msg or "planted failure"}]},
    )
