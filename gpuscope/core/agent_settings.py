"""The ``agent`` section of the settings, declared once.

Two loaders read it: the full settings model (:class:`gpuscope.core.settings.Settings`,
pydantic, every command but the agent) validates this dataclass directly, and the agent's
own loader (:mod:`gpuscope.agent.config`, no pydantic: the DaemonSet's process stays small)
derives its checks from the same fields. So a key, a default, a type, a bound or a check is
written here and nowhere else. The field types say what a value is (``str``, ``float``,
``int``, ``Path``, ``Path | None``, a ``Literal`` of choices); two markers in ``Annotated``
add the rest:

- :class:`Bounds`: a number above ``gt`` and at most ``le``;
- :class:`Check`: a function of the typed value that returns it or raises ``ValueError``
  with the message a person reads.

Both markers tell pydantic what they mean (``__get_pydantic_core_schema__``, which imports
pydantic's core only when pydantic itself asks); this module imports only the standard
library and the layers' own checks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from gpuscope.core.settings_layers import check_http_url, parse_listen

DAY_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class Bounds:
    """A number ``> gt`` and ``<= le`` (pydantic's ``Field(gt=..., le=...)``)."""

    gt: float
    le: float

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        return {**handler(source), "gt": self.gt, "le": self.le}


@dataclass(frozen=True, slots=True)
class Check:
    """A check of the typed value: ``fn`` returns it (or what it stands for) or raises
    ``ValueError`` (pydantic's ``AfterValidator``)."""

    fn: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: Callable[[Any], Any]) -> Any:
        from pydantic_core import core_schema  # only when pydantic builds the full model

        return core_schema.no_info_after_validator_function(self.fn, handler(source))


def _listen_address(value: str) -> str:
    parse_listen(value)
    return value


def _http_url_or_empty(value: str) -> str:
    return value and check_http_url(value)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """The ``agent`` section: what ``gpuscope agent`` serves and where it reads from."""

    # unknown keys and NaN/infinite numbers are refused, as in every section of the model
    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid", "allow_inf_nan": False}

    listen: Annotated[str, Check(_listen_address)] = "0.0.0.0:9835"
    #: Node name on every series; the host name when empty (the first node under sim).
    node: str = ""
    gpu_source: Literal["auto", "nvml", "dcgm", "sim"] = "auto"
    #: Root of sysfs (IB counters); /sys when empty, and simulated ports under sim.
    sysfs_root: Path | None = None
    #: Root of procfs (GPU processes' cgroups); /proc when empty.
    procfs_root: Path | None = None
    #: The kubelet's pod-resources socket (gRPC, ``v1`` List).
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    #: A local dcgm-exporter to read instead of DCGM's bindings, e.g. http://localhost:9400/metrics.
    dcgm_exporter_url: Annotated[str, Check(_http_url_or_empty)] = ""
    dcgm_bindings_path: Path = Path("/usr/local/dcgm/bindings/python3")
    #: nv-hostengine's address for DCGM's bindings (``host`` or ``host:port``, port 5555 by
    #: default); ``embedded`` starts a host engine inside the agent.
    dcgm_hostengine: str = "localhost"
    #: Where pod metadata (labels, owner) comes from: the API server, or nowhere.
    pod_metadata: Literal["apiserver", "none"] = "apiserver"
    pod_metadata_ttl_seconds: Annotated[float, Bounds(0, DAY_SECONDS)] = 30.0
    #: The most a scrape waits for any one source before reporting it down.
    source_timeout_seconds: Annotated[float, Bounds(0, 60)] = 2.0
    #: Scenario file for ``--gpu-source sim`` (the embedded default when empty).
    sim_scenario: Path | None = None
    sim_seed: int = 42
