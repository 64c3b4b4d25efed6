"""Certificates for TLS tests (tests/integration/test_tls.py, tests/integration/test_stream_tls.py): a CA that signs a
server certificate for 127.0.0.1 / localhost and a client certificate, and a second CA that
signs nothing (a client trusting it must refuse the server)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import quote

from pumpd.testing.localnode import TLSListener


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)


def make_cert(d: Path, ca: str, name: str, ext: str) -> None:
    (d / f"{name}.ext").write_text(ext)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=d)


def make_certs(d: Path) -> Path:
    """ca, other-ca, server (signed by ca) and client (signed by ca) in ``d``."""
    make_ca(d, "ca")
    make_ca(d, "other-ca")
    make_cert(d, "ca", "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    make_cert(d, "ca", "client", "extendedKeyUsage=clientAuth\n")
    return d


def amqps_uri(port: int | None, certs: Path, ca: str = "ca", password: str = "guest") -> str:
    """An amqps URI to 127.0.0.1:``port`` trusting ``ca`` and presenting the client certificate."""
    q = {"cacertfile": certs / f"{ca}.pem", "certfile": certs / "client.pem",
         "keyfile": certs / "client.key", "verify": "verify_peer", "fail_if_no_peer_cert": "true"}
    query = "&".join(f"{k}={quote(str(v), safe='/')}" for k, v in q.items())
    return f"amqps://guest:{password}@127.0.0.1:{port}/%2F?{query}"


def server_listener(certs: Path, require_client_cert: bool = True) -> TLSListener:
    """A node's TLS listener with the server certificate :func:`make_certs` made."""
    return TLSListener(str(certs / "ca.pem"), str(certs / "server.pem"), str(certs / "server.key"),
                       require_client_cert=require_client_cert)


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` / 127.0.0.1 and its key, for the endpoint."""
    cert, key = directory / "endpoint.pem", directory / "endpoint.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key
