"""The control plane's certificates and keys, generated per cluster.

One CA signs everything: the API server's serving certificate (127.0.0.1,
::1, localhost and the in-cluster names), the client certificates the tests
and kube-controller-manager authenticate with (CN is the user, O the group:
``system:masters`` for the admin), and it is the ``ca.crt`` every
ServiceAccount token directory carries.  The ServiceAccount tokens are signed
with a separate RSA key, as on a real cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["PKI", "ClientCert"]

SERVING_NAMES = (
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class ClientCert:
    user: str
    cert: Path
    key: Path


class PKI:
    """Writes the files into ``directory`` (created) at construction."""

    def __init__(self, directory: Path, extra_names: tuple[str, ...] = ()) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._ca = trustme.CA(organization_name="pid1-supervisor tests")
        self.ca = self._write("ca.crt", self._ca.cert_pem.bytes())
        serving = self._ca.issue_cert(*SERVING_NAMES, *extra_names, common_name="kube-apiserver")
        self.serving_cert = self._write("apiserver.crt", b"".join(c.bytes() for c in serving.cert_chain_pems))
        self.serving_key = self._write("apiserver.key", serving.private_key_pem.bytes())
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = self._write(
            "sa.key",
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            ),
        )
        self.sa_pub = self._write(
            "sa.pub",
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
        )

    def client(self, user: str, *groups: str) -> ClientCert:
        """A client certificate for ``user`` in ``groups`` (x509 authentication:
        CN is the user name, each O a group; only the first O is set here)."""
        # trustme needs one subjectAltName; it plays no part in client auth.
        leaf = self._ca.issue_cert(
            f"{_file_name(user)}.client.invalid",
            common_name=user,
            organization_name=groups[0] if groups else None,
        )
        name = _file_name(user)
        return ClientCert(
            user,
            self._write(f"{name}.crt", b"".join(c.bytes() for c in leaf.cert_chain_pems)),
            self._write(f"{name}.key", leaf.private_key_pem.bytes()),
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path


def _file_name(user: str) -> str:
    return user.replace(":", "-")
