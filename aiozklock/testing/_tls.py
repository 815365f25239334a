"""Certificates for TLS test servers, made with the ``openssl`` command line tool.

One private CA signs a server certificate (valid for 127.0.0.1 only, so that reaching the
server as ``localhost`` is a host name mismatch) and a client certificate (for mutual TLS).
ZooKeeper reads the PEM files directly (``ssl.keyStore.type=PEM``): no Java keystore.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["TLSFiles"]

ClientAuth = Literal["none", "want", "need"]

_OPENSSL_TIMEOUT = 30.0
_RSA = "rsa:2048"


def _openssl(directory: Path, *args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("TLS test servers need the openssl command line tool")
    result = subprocess.run(
        [openssl, *args],
        cwd=directory,
        capture_output=True,
        timeout=_OPENSSL_TIMEOUT,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"openssl {' '.join(args)} failed: {result.stderr.decode('utf-8', 'replace')}"
        )


def _sign(directory: Path, name: str, subject: str, extensions: str, days: int) -> None:
    """``name.key`` and ``name.pem``, a certificate signed by the CA in ``directory``."""
    _openssl(
        directory,
        *("req", "-newkey", _RSA, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr"),
        *("-subj", f"/CN={subject}"),
    )
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        directory,
        *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-out", f"{name}.pem", "-days", str(days)),
        *("-extfile", f"{name}.ext"),
    )


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for a TLS ZooKeeper and its clients, in ``directory``.

    ``ca``: the CA certificate that signed both others; ``server_key``/``server_cert``: the
    server's, valid for ``IP:127.0.0.1`` only (``expired=True`` makes one that expired at
    creation); ``client_key``/``client_cert``: a client certificate for mutual TLS.
    """

    directory: Path
    ca: Path
    server_key: Path
    server_cert: Path
    client_key: Path
    client_cert: Path

    @classmethod
    def generate(cls, directory: Path, *, expired: bool = False) -> TLSFiles:
        """Create a CA and the certificates in ``directory`` (created if missing). Blocking
        (a second or so); raises ``RuntimeError`` if ``openssl`` is missing or fails."""
        directory.mkdir(parents=True, exist_ok=True)
        _openssl(
            directory,
            *("req", "-x509", "-newkey", _RSA, "-nodes", "-keyout", "ca.key", "-out", "ca.pem"),
            *("-days", "3650", "-subj", "/CN=aiozklock test CA"),
            *("-addext", "basicConstraints=critical,CA:TRUE"),
            *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        )
        usage = "keyUsage=critical,digitalSignature,keyEncipherment\n"
        # Valid for 0 days: it expires the second it is made.
        _sign(
            directory,
            "server",
            "aiozklock test server",
            f"subjectAltName=IP:127.0.0.1\n{usage}extendedKeyUsage=serverAuth,clientAuth\n",
            0 if expired else 365,
        )
        client_usage = f"{usage}extendedKeyUsage=clientAuth\n"
        _sign(directory, "client", "aiozklock test client", client_usage, 365)
        return cls(
            directory=directory,
            ca=directory / "ca.pem",
            server_key=directory / "server.key",
            server_cert=directory / "server.pem",
            client_key=directory / "client.key",
            client_cert=directory / "client.pem",
        )

    def client_context(self, *, client_cert: bool = False) -> ssl.SSLContext:
        """A client context that trusts ``ca`` (host names checked), with the client
        certificate loaded if ``client_cert``."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def server_config(self, client_auth: ClientAuth = "none") -> dict[str, str]:
        """The ``zoo.cfg`` keys of a server that uses these files (ZooKeeper's Netty
        connection factory, the one that does TLS)."""
        keystore = self.directory / "server-keystore.pem"
        if not keystore.exists():
            # ZooKeeper's PEM keystore: the private key and its certificate in one file.
            keystore.write_text(self.server_key.read_text() + self.server_cert.read_text())
        return {
            "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
            "ssl.keyStore.location": str(keystore),
            "ssl.keyStore.type": "PEM",
            "ssl.trustStore.location": str(self.ca),
            "ssl.trustStore.type": "PEM",
            "ssl.clientAuth": client_auth,
        }
