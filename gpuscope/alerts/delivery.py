"""Delivery: send rendered messages with retries, backoff, Retry-After and a deadline.

Each receiver is served by its own thread, so a failing or hanging one never holds up
another; within a receiver, messages go one after the other at no more than its rate
(Slack: about one a second per webhook). Retries use tenacity: 429, 5xx and transport
errors are retried after the receiver's Retry-After, or with exponential backoff and
jitter, until ``max_attempts`` or until the next attempt would start past the deadline.
Every attempt is reported (for the delivery log and the counters), with secrets removed.
The clock and the sleep are injected, so tests never wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential_jitter

from gpuscope.alerts.config import DeliveryConfig
from gpuscope.alerts.model import Attempt, Notification, Outcome
from gpuscope.alerts.notifiers import DeliveryError, Message, Notifier

log = logging.getLogger(__name__)

Sleep = Callable[[float], None]
Clock = Callable[[], float]


def redact(text: str, secrets: Sequence[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def _now(clock: Clock) -> datetime:
    return datetime.fromtimestamp(clock(), UTC).replace(tzinfo=None)


@dataclass
class Pacer:
    """At most one message per ``min_interval`` per receiver (thread-safe)."""

    clock: Clock
    sleep: Sleep
    _next: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait(self, key: str, min_interval: float) -> None:
        if min_interval <= 0:
            return
        with self._lock:
            now = self.clock()
            at = max(now, self._next.get(key, now))
            self._next[key] = at + min_interval
        if at > now:
            self.sleep(at - now)

    def push_back(self, key: str, seconds: float) -> None:
        """A 429's Retry-After holds the next message too."""
        with self._lock:
            self._next[key] = max(self._next.get(key, 0.0), self.clock() + seconds)


class Deliverer:
    """Sends notifications through notifiers; reports every attempt to ``on_attempt``."""

    def __init__(
        self,
        config: DeliveryConfig,
        *,
        client: httpx.Client | None = None,
        clock: Clock = time.time,
        sleep: Sleep = time.sleep,
        on_attempt: Callable[[Attempt], None] | None = None,
    ) -> None:
        self.config = config
        self.client = client or httpx.Client(timeout=config.timeout_seconds)
        self.clock, self.sleep = clock, sleep
        self.pacer = Pacer(clock, sleep)
        self.on_attempt = on_attempt or (lambda _a: None)
        self._lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    # -- one message --------------------------------------------------------------------------
    def _post(self, notifier: Notifier, message: Message) -> httpx.Response:
        try:
            return self.client.post(message.url, json=message.body, headers=message.headers,
                                    timeout=self.config.timeout_seconds)  # fmt: skip
        except httpx.TimeoutException:
            raise DeliveryError("timed out", retryable=True) from None
        except httpx.TransportError as exc:
            # httpx's text may carry the URL; keep only the kind of failure
            raise DeliveryError(f"transport error {type(exc).__name__}", retryable=True) from None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        backoff = wait_exponential_jitter(
            initial=self.config.backoff_initial_seconds, max=self.config.backoff_max_seconds
        )(state)
        if isinstance(exc, DeliveryError) and exc.retry_after is not None:
            return exc.retry_after
        return float(backoff)

    def send(self, notifier: Notifier, notification: Notification) -> Outcome:
        """Deliver every message of one notification; the outcome of the last one tried."""
        attempts = 0
        for message in notifier.render(notification):
            outcome = self._send_one(notifier, notification, message)
            attempts += outcome.attempts
            if not outcome.ok:
                return Outcome(notifier.name, notification.group_key, False, attempts,
                               outcome.error, outcome.http_status)  # fmt: skip
        return Outcome(notifier.name, notification.group_key, True, attempts)

    def _send_one(self, notifier: Notifier, n: Notification, message: Message) -> Outcome:
        cfg = self.config
        start = self.clock()
        counter = {"attempt": 0}

        def attempt() -> httpx.Response:
            counter["attempt"] += 1
            self.pacer.wait(notifier.name, notifier.min_interval)
            began = self.clock()
            status: int | None = None
            try:
                response = self._post(notifier, message)
                status = response.status_code
                notifier.check(response)
            except DeliveryError as exc:
                if exc.retry_after is not None:
                    self.pacer.push_back(notifier.name, exc.retry_after)
                self._report(notifier, n, counter["attempt"], "error", status or exc.status,
                             redact(str(exc), notifier.secrets), began)  # fmt: skip
                raise
            self._report(notifier, n, counter["attempt"], "ok", status, None, began)
            return response

        def stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            if (
                isinstance(exc, DeliveryError)
                and exc.retry_after is not None
                and (exc.retry_after > cfg.max_retry_after_seconds)
            ):
                return True
            upcoming = state.upcoming_sleep or 0.0
            late = self.clock() - start + upcoming > cfg.deadline_seconds
            return state.attempt_number >= cfg.max_attempts or late

        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, DeliveryError) and e.retryable),
            wait=self._wait,
            stop=stop,
            sleep=self.sleep,
            reraise=True,
        )
        try:
            retrying(attempt)
        except DeliveryError as exc:
            error = redact(str(exc), notifier.secrets)
            log.warning("delivery failed receiver=%s group=%s attempts=%d error=%s",
                        notifier.name, n.group_key, counter["attempt"], error)  # fmt: skip
            self._report(notifier, n, counter["attempt"], "failed", exc.status, error, None)
            return Outcome(notifier.name, n.group_key, False, counter["attempt"], error,
                           exc.status)  # fmt: skip
        return Outcome(notifier.name, n.group_key, True, counter["attempt"])

    def _report(self, notifier: Notifier, n: Notification, number: int, outcome: Any,
                status: int | None, error: str | None, began: float | None) -> None:  # fmt: skip
        duration = 0.0 if began is None else max(0.0, self.clock() - began)
        a = Attempt(_now(self.clock), notifier.name, notifier.kind, n.group_key, n.status,
                    len(n.alerts), number, outcome, status, error, round(duration, 4))  # fmt: skip
        with self._lock:
            self.on_attempt(a)

    # -- many ---------------------------------------------------------------------------------
    def deliver(
        self, notifiers: Mapping[str, Notifier], notifications: Sequence[Notification]
    ) -> list[Outcome]:
        """Every notification to its receiver, receivers in parallel, each in order."""
        by_receiver: dict[str, list[Notification]] = {}
        for n in notifications:
            by_receiver.setdefault(n.receiver, []).append(n)
        outcomes: list[Outcome] = []
        missing = [r for r in by_receiver if r not in notifiers]
        for r in missing:
            for n in by_receiver.pop(r):
                outcomes.append(Outcome(r, n.group_key, False, 0, "no such receiver"))
        if not by_receiver:
            return outcomes

        def serve(receiver: str) -> list[Outcome]:
            notifier = notifiers[receiver]
            done = []
            for n in by_receiver[receiver]:
                try:
                    done.append(self.send(notifier, n))
                except Exception as exc:  # a broken notifier must not stop the others
                    error = redact(f"{type(exc).__name__}: {exc}", notifier.secrets)
                    log.warning("notifier raised receiver=%s error=%s", receiver, error)
                    done.append(Outcome(receiver, n.group_key, False, 0, error))
            return done

        with ThreadPoolExecutor(max_workers=min(16, len(by_receiver)),
                                thread_name_prefix="alerts") as pool:  # fmt: skip
            for result in pool.map(serve, list(by_receiver)):
                outcomes.extend(result)
        return outcomes
