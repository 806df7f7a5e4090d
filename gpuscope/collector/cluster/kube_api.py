"""How gpuscope calls the Kubernetes API: one retry policy and one retry loop (tenacity),
shared by the inventory (list and watch) and the actions' cluster client.

What may pass later is retried with exponential backoff, capped, or after the server's
``Retry-After`` when it sends one: throttling (429), the server's own failures (5xx) and
connection errors for reads; only a throttled 429 for a change (``gpuscope/actions/kube.py``), which
the server did not process. The sleep is injected, so tests do not wait. A call that
outlasts its attempts raises :class:`~gpuscope.collector.cluster.kube_config.InventoryError` with
one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import urllib3
from kubernetes.client.rest import ApiException
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from gpuscope.collector.cluster.kube_config import InventoryError, connection_reason, status_hint

log = logging.getLogger(__name__)
T = TypeVar("T")

#: What a failed request raises below the client when no answer came.
CONNECTION_ERRORS = (urllib3.exceptions.HTTPError, OSError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts for 5xx, 429 and connection errors, with exponential backoff."""

    attempts: int = 4
    base_delay: float = 0.25
    max_delay: float = 5.0


def may_pass_later(status: int) -> bool:
    """Statuses worth another try: throttling (429) and the server's own failures (5xx)."""
    return status == 429 or status >= 500


def retry_after(exc: ApiException) -> float | None:
    """The ``Retry-After`` of an answer in seconds (whole seconds only), or None."""
    value = str((exc.headers or {}).get("Retry-After", "")).strip()
    return float(value) if value.isdigit() else None


def api_message(exc: ApiException) -> str:
    """The API server's own message for a refused request, on one line."""
    try:
        message = str(json.loads(exc.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        message = str(exc.reason or "")
    return " ".join(message.split())


def retrying(
    what: str,
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    retry_on: Callable[[BaseException], bool],
) -> Retrying:
    """The retry loop: ``retry_on`` says which exceptions may pass; the last one is raised
    as it came, for the caller to turn into its own error class."""

    def wait(state: RetryCallState) -> float:
        delay = min(policy.max_delay, policy.base_delay * 2 ** (state.attempt_number - 1))
        exc = state.outcome.exception() if state.outcome else None
        after = retry_after(exc) if isinstance(exc, ApiException) else None
        return min(policy.max_delay, after) if after is not None else delay

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        why = exc.status if isinstance(exc, ApiException) else exc
        pause = state.next_action.sleep if state.next_action else 0.0
        log.debug("%s: %s, retrying in %.2fs", what, why, pause)

    return Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=wait,
        retry=retry_if_exception(retry_on),
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )


def call_with_retry(
    what: str,
    host: str,
    fn: Callable[[], T],
    policy: RetryPolicy,
    sleep: Callable[[float], None],
    retryable: Callable[[int], bool] = may_pass_later,
) -> T:
    """Run ``fn``; retry what may pass (``retryable`` statuses, connection errors); raise
    :class:`InventoryError` with one line."""

    def may_pass(exc: BaseException) -> bool:
        if isinstance(exc, ApiException):
            return retryable(int(exc.status or 0))
        return isinstance(exc, CONNECTION_ERRORS)

    try:
        return retrying(what, policy, sleep, may_pass)(fn)
    except ApiException as exc:
        status = int(exc.status or 0)
        raise InventoryError(
            f"Kubernetes API {what} at {host} failed: {status} {api_message(exc)}"
            f"{status_hint(status)}",
            status,
        ) from None
    except CONNECTION_ERRORS as exc:
        raise InventoryError(
            f"cannot reach the Kubernetes API at {host} ({what}): {connection_reason(exc)}"
        ) from None
