"""Kubernetes by URL over real https on loopback: the fake API server behind TLS with a CA
made for the test (trustme), bearer tokens and client certificates.

``collector.kubernetes: https://...`` used to take no CA or credentials, so it worked only
behind ``kubectl proxy``, and a TLS failure read ``cannot reach the Kubernetes API ...
MaxRetryError``. Each failure here must name its real cause in one line.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from gpuscope.actions.kube import ClusterClient, Forbidden
from gpuscope.collector.cluster.inventory import InventoryError, KubeInventory, kube_configuration
from gpuscope.collector.cluster.kube_api import RetryPolicy
from gpuscope.core.collector_settings import CollectorSettings
from gpuscope.core.errors import ConfigError
from gpuscope.core.settings import load_settings
from tests.conftest import free_port
from tests.fakes.kube_api import FakeKubeApi

pytestmark = pytest.mark.integration
TOKEN = "t0ken-for-the-fake-apiserver"


@dataclass
class Tls:
    api: FakeKubeApi
    ca_file: Path
    other_ca_file: Path
    cert_file: Path
    key_file: Path
    token_file: Path
    tmp: Path


@pytest.fixture
def tls(tmp_path: Path) -> Iterator[Tls]:
    ca, stranger = trustme.CA(), trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    ca.configure_trust(server)  # client certificates signed by the CA authenticate
    server.verify_mode = ssl.CERT_OPTIONAL
    client = ca.issue_cert("gpuscope-collector")
    paths = {name: tmp_path / f"{name}.pem" for name in ("ca", "other", "cert", "key")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    stranger.cert_pem.write_to_path(str(paths["other"]))
    client.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    client.private_key_pem.write_to_path(str(paths["key"]))
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    with FakeKubeApi(tls=server, token=TOKEN) as api:
        api.store.load({"kind": "Node", "metadata": {"name": "gpu-node-1"}})
        yield Tls(api, paths["ca"], paths["other"], paths["cert"], paths["key"], token, tmp_path)


def access(url: str, **files: Path | None) -> CollectorSettings:
    return CollectorSettings.model_validate(
        {"kubernetes": url, **{f"kubernetes_{k}": v for k, v in files.items()}}
    )


def sync(settings: CollectorSettings) -> Any:
    cfg = kube_configuration(settings)
    assert cfg is not None
    inventory = KubeInventory(cfg, retry=RetryPolicy(attempts=1), sleep=lambda s: None)
    try:
        return inventory.sync_once()
    finally:
        inventory.close()


def sync_error(settings: CollectorSettings) -> str:
    with pytest.raises(InventoryError) as err:
        sync(settings)
    message = str(err.value)
    assert "\n" not in message and "MaxRetryError" not in message
    return message


def test_the_right_ca_and_a_token_file_list_the_cluster(tls: Tls) -> None:
    snap = sync(access(tls.api.url, ca_file=tls.ca_file, token_file=tls.token_file))
    assert [n.name for n in snap.nodes] == ["gpu-node-1"]


def test_a_client_certificate_authenticates(tls: Tls) -> None:
    snap = sync(access(tls.api.url, ca_file=tls.ca_file, client_cert_file=tls.cert_file,
                       client_key_file=tls.key_file))  # fmt: skip
    assert [n.name for n in snap.nodes] == ["gpu-node-1"]


def test_the_wrong_ca_is_a_tls_verification_line(tls: Tls) -> None:
    message = sync_error(access(tls.api.url, ca_file=tls.other_ca_file, token_file=tls.token_file))
    assert "TLS verification failed: certificate verify failed" in message
    assert "collector.kubernetes_ca_file" in message
    # and without a CA file the system's CAs do not know the test CA either
    assert "TLS verification failed" in sync_error(access(tls.api.url))


def test_a_bad_token_is_a_401_line(tls: Tls) -> None:
    bad = tls.tmp / "bad-token"
    bad.write_text("not-the-token")
    message = sync_error(access(tls.api.url, ca_file=tls.ca_file, token_file=bad))
    assert "401 Unauthorized" in message and "did not accept the credentials" in message
    # no credentials at all: the same
    assert "401" in sync_error(access(tls.api.url, ca_file=tls.ca_file))


def test_a_rotated_token_file_is_read_again(tls: Tls) -> None:
    """A projected service-account token is replaced in place; the next request uses it."""
    token = tls.tmp / "rotating"
    token.write_text("old-token")
    settings = access(tls.api.url, ca_file=tls.ca_file, token_file=token)
    cfg = kube_configuration(settings)
    assert cfg is not None
    inventory = KubeInventory(cfg, retry=RetryPolicy(attempts=1), sleep=lambda s: None)
    try:
        with pytest.raises(InventoryError, match="401"):
            inventory.sync_once()
        token.write_text(TOKEN)
        os.utime(token, (1, 1))  # a new mtime even within the file system's granularity
        assert [n.name for n in inventory.sync_once().nodes] == ["gpu-node-1"]
    finally:
        inventory.close()


def test_rbac_refusal_is_a_403_line_naming_the_verb(tls: Tls) -> None:
    tls.api.deny("list", "nodes")
    message = sync_error(access(tls.api.url, ca_file=tls.ca_file, token_file=tls.token_file))
    assert "403" in message and 'cannot list resource "nodes"' in message


def test_a_refused_port_and_an_unknown_host_name_say_so() -> None:
    refused = sync_error(access(f"https://127.0.0.1:{free_port()}"))
    assert refused.endswith("Connection refused")
    unknown = sync_error(access("https://gpuscope-no-such-host.invalid:6443"))
    assert "DNS lookup of gpuscope-no-such-host.invalid failed" in unknown


def test_the_actions_client_uses_the_same_access(tls: Tls) -> None:
    """``gpuscope act`` and the collector's actions build their client from the same
    settings: the CA and token reach it, and its errors are typed as before."""
    settings = access(tls.api.url, ca_file=tls.ca_file, token_file=tls.token_file)
    client = ClusterClient.from_setting(settings, sleep=lambda s: None)
    assert client is not None
    try:
        assert client.get_node("gpu-node-1")["metadata"]["name"] == "gpu-node-1"
        tls.api.deny("get", "nodes")
        with pytest.raises(Forbidden, match="403"):
            client.get_node("gpu-node-1")
    finally:
        client.close()


def test_unusable_access_files_are_one_line_at_start(tls: Tls) -> None:
    garbage = tls.tmp / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(InventoryError, match="kubernetes_ca_file: not usable PEM"):
        kube_configuration(access(tls.api.url, ca_file=garbage))
    with pytest.raises(InventoryError, match="kubernetes_client_cert_file: not usable PEM"):
        kube_configuration(
            access(tls.api.url, client_cert_file=tls.cert_file, client_key_file=tls.ca_file)
        )
    empty = tls.tmp / "empty"
    empty.write_text("\n")
    with pytest.raises(InventoryError, match=r"kubernetes_token_file .* is empty"):
        kube_configuration(access(tls.api.url, token_file=empty))
    with pytest.raises(ConfigError, match="go together"):
        load_settings(
            env={},
            overrides={"collector": {"kubernetes": tls.api.url,
                                     "kubernetes_client_cert_file": str(tls.cert_file)}},
        )  # fmt: skip
