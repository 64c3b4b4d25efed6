"""pika parameters of an ``amqps`` URI with certificate files made by openssl: verification,
EXTERNAL authentication and SNI."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pika
import pika.credentials
import pytest
from pumpd.config.uri import parse_uri
from pumpd.engine.parameters import to_pika_parameters


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed CA certificate and a client key and certificate (signed by it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=pumpd test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
        "-subj", "/CN=pumpd client")
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "client.pem", "-days", "2")
    return d


@pytest.mark.parametrize("verify", ["verify_peer", "verify_none"])
def test_pika_parameters_amqps_with_files(tls_files: Path, verify: str) -> None:
    q = (f"cacertfile={tls_files / 'ca.pem'}&certfile={tls_files / 'client.pem'}"
         f"&keyfile={tls_files / 'client.key'}&verify={verify}&fail_if_no_peer_cert=true")
    p = to_pika_parameters(parse_uri(f"amqps://u:p@rabbit.example/v?{q}"), client_name="x")
    ctx = p.ssl_options.context
    if verify == "verify_peer":
        assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    else:
        assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname
    assert any("pumpd test CA" in str(c.get("subject")) for c in ctx.get_ca_certs())


def test_pika_parameters_external_and_sni(tls_files: Path) -> None:
    q = (f"cacertfile={tls_files / 'ca.pem'}&certfile={tls_files / 'client.pem'}"
         f"&keyfile={tls_files / 'client.key'}&auth_mechanism=external"
         "&server_name_indication=rabbit.internal")
    p = to_pika_parameters(parse_uri(f"amqps://rabbit.example?{q}"), client_name="x")
    assert isinstance(p.credentials, pika.credentials.ExternalCredentials)
    assert p.ssl_options.server_hostname == "rabbit.internal"
    assert p.ssl_options.context.verify_mode == ssl.CERT_REQUIRED
    p = to_pika_parameters(parse_uri(f"amqps://h?cacertfile={tls_files / 'ca.pem'}"
                                     "&server_name_indication=disable"), client_name="x")
    assert p.ssl_options.server_hostname is None and not p.ssl_options.context.check_hostname

