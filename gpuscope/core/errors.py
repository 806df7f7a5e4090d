"""Errors a user can cause, reported as one line and an exit code, never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """A problem with input the user controls: a flag, a file, a setting, a target.

    The CLI prints ``gpuscope: <message>`` on stderr and exits with ``exit_code``.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ConfigError(UserError):
    """A settings file, environment variable or flag value that does not validate."""


class SourceError(Exception):
    """A data source (NVML, DCGM, sysfs, kubelet) that cannot give readings right now.

    Raised by sources, caught by the agent's collection loop, which reports the source as
    down (``gpuscope_agent_source_up 0``) and carries on with the others.
    """
