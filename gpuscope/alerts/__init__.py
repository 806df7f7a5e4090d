"""Alerts: turn findings and metric conditions into notifications (docs/alerts.md).

rules (which findings and metric conditions raise an alert) -> lifecycle (pending, firing,
resolved; kept in the store) -> routing (receivers, groups, silences, inhibition, repeat
interval) -> delivery (Slack, PagerDuty, Alertmanager, webhook; retries with backoff and a
deadline). :mod:`gpuscope.alerts.engine` runs it all once per analytics run;
:func:`gpuscope.alerts.notify.
send_notice` sends one notice routed like an alert (the actions executor's warnings).
"""
