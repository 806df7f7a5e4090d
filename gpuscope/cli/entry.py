"""The ``gpuscope`` command's entry point: ``agent`` first, everything else after.

``gpuscope agent`` runs on every GPU node, so it is dispatched before the full command
line is imported (its parser, every command's module, the settings model and pydantic):
:mod:`gpuscope.agent.command` parses and runs it with the agent's imports alone. Any other
command (and ``--help``, ``--version``) goes to :func:`gpuscope.cli.main.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _agent_argv(argv: Sequence[str]) -> tuple[list[str], str | None] | None:
    """``(the arguments after "agent", the --log-format given before it)`` when the command
    is ``agent`` (``--log-format X`` may come first, as for any command); None otherwise."""
    args = list(argv)
    log_format = None
    while args and args[0].startswith("--log-format"):
        flag = args.pop(0)
        if "=" in flag:
            log_format = flag.partition("=")[2]
        elif args:
            log_format = args.pop(0)
        else:
            return None
        if log_format not in ("text", "json"):
            return None  # the full parser says what is wrong, in its words
    if args and args[0] == "agent":
        return args[1:], log_format
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    agent = _agent_argv(argv)
    if agent is not None:
        from gpuscope.agent.command import main as agent_main

        return agent_main(*agent)
    from gpuscope.cli.main import main as full_main

    return full_main(argv)
