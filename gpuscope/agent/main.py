"""Run the agent: print one exposition (``--once``) or serve until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import TextIO

from gpuscope.agent.build import build_agent
from gpuscope.agent.config import AgentConfig
from gpuscope.agent.serving.process_metrics import ProcessMetrics
from gpuscope.agent.serving.server import AgentHttpServer
from gpuscope.core.errors import UserError
from gpuscope.core.settings_layers import parse_listen

log = logging.getLogger(__name__)


def run_agent(settings: AgentConfig, *, once: bool = False, out: TextIO = sys.stdout) -> int:
    collector = build_agent(settings)
    try:
        if once:
            out.write(collector.render(process=ProcessMetrics()).decode())
            out.flush()
            return 0
        host, port = parse_listen(settings.agent.listen)
        try:
            server = AgentHttpServer((host, port), None, collector)
        except OSError as exc:
            raise UserError(f"cannot listen on {settings.agent.listen}: {exc.strerror}") from None
        stop = threading.Event()

        def _stop(signum: int, _frame: object) -> None:
            log.info("stopping signal=%s", signal.Signals(signum).name)
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        server.start_in_thread()
        log.info(
            "agent serving listen=%s:%s node=%s gpu_source=%s",
            host,
            server.server_address[1],
            collector.node,
            collector.gpu_source.name if collector.gpu_source else "none",
        )
        stop.wait()
        server.shutdown()
        server.server_close()
        return 0
    finally:
        collector.close()
