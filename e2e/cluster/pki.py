"""Certificates and keys for the local cluster, made with the openssl CLI.

ECDSA P-256 keeps generation to a few milliseconds, so every fresh `up` gets a new PKI and
nothing from a previous run can be stale. Kubernetes accepts EC keys everywhere we use them
(serving, client certificates, service-account token signing with ES256).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import settings

OPENSSL_TIMEOUT_S = 30.0
# A config with no defaults: the system openssl.cnf would add CA extensions to every leaf.
MINIMAL_CONFIG = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = unused\n"
SERVING_SANS = (
    "IP:127.0.0.1",
    "IP:10.96.0.1",  # first address of the service CIDR: the `kubernetes` Service
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)


class PkiError(RuntimeError):
    pass


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate: CN is the user name, O the groups."""

    file_stem: str
    common_name: str
    organization: str | None = None


# Each component authenticates as the user Kubernetes' bootstrap RBAC policy expects.
ADMIN = ClientIdentity("admin", "gpuserve-admin", "system:masters")
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
# KWOK plays every kubelet at once; the Node authorizer would confine it to one node name.
KWOK = ClientIdentity("kwok", "gpuserve-kwok", "system:masters")
CLIENTS = (ADMIN, CONTROLLER_MANAGER, SCHEDULER, KWOK)
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def front_proxy_ca_cert(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key(self) -> Path:
        return self.directory / "front-proxy-ca.key"

    @property
    def front_proxy_client_cert(self) -> Path:
        return self.directory / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.directory / "front-proxy-client.key"

    @property
    def sa_private_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_public_key(self) -> Path:
        return self.directory / "sa.pub"

    def client_cert(self, identity: ClientIdentity) -> Path:
        return self.directory / f"{identity.file_stem}.crt"

    def client_key(self, identity: ClientIdentity) -> Path:
        return self.directory / f"{identity.file_stem}.key"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise PkiError("openssl is not installed (Debian: apt-get install openssl)")
    result = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=OPENSSL_TIMEOUT_S)
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.strip()}")


CA_EXTENSIONS = ["basicConstraints=critical,CA:TRUE",
                 "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"]
CLIENT_EXTENSIONS = ["basicConstraints=critical,CA:FALSE",
                     "keyUsage=critical,digitalSignature,keyEncipherment",
                     "extendedKeyUsage=clientAuth"]


def _new_cert(config: Path, cert: Path, key: Path, subject: str, extensions: list[str],
              days: int, signer: tuple[Path, Path] | None) -> None:
    """One openssl call: new EC key and certificate, self-signed or signed by (cert, key)."""
    args = ["req", "-config", str(config), "-x509", "-new", "-nodes", "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-keyout", str(key), "-out", str(cert),
            "-days", str(days), "-subj", subject]
    if signer is not None:
        args += ["-CA", str(signer[0]), "-CAkey", str(signer[1])]
    for extension in extensions:
        args += ["-addext", extension]
    _openssl(*args, cwd=cert.parent)
    key.chmod(0o600)


def _subject(identity: ClientIdentity) -> str:
    org = f"/O={identity.organization}" if identity.organization else ""
    return f"{org}/CN={identity.common_name}"


def create(directory: Path) -> Pki:
    """Writes a fresh CA, API server serving cert, client certs and SA key pair."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)
    pki = Pki(directory)
    config = directory / "openssl.cnf"
    config.write_text(MINIMAL_CONFIG)
    cluster_ca = (pki.ca_cert, pki.ca_key)
    _new_cert(config, pki.ca_cert, pki.ca_key, f"/CN={settings.CLUSTER_NAME}-local-ca",
              CA_EXTENSIONS, days=3650, signer=None)
    _new_cert(config, pki.serving_cert, pki.serving_key, "/CN=kube-apiserver",
              ["basicConstraints=critical,CA:FALSE",
               "keyUsage=critical,digitalSignature,keyEncipherment",
               "extendedKeyUsage=serverAuth",
               "subjectAltName=" + ",".join(SERVING_SANS)], days=825, signer=cluster_ca)
    for identity in CLIENTS:
        _new_cert(config, pki.client_cert(identity), pki.client_key(identity),
                  _subject(identity), CLIENT_EXTENSIONS, days=825, signer=cluster_ca)
    # The aggregation layer (metrics/custom-metrics APIs) authenticates the API server to
    # extension servers with a separate CA; without it components log errors forever.
    _new_cert(config, pki.front_proxy_ca_cert, pki.front_proxy_ca_key,
              f"/CN={settings.CLUSTER_NAME}-front-proxy-ca", CA_EXTENSIONS, days=3650,
              signer=None)
    _new_cert(config, pki.front_proxy_client_cert, pki.front_proxy_client_key,
              f"/CN={FRONT_PROXY_CLIENT}", CLIENT_EXTENSIONS, days=825,
              signer=(pki.front_proxy_ca_cert, pki.front_proxy_ca_key))
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(pki.sa_private_key), cwd=directory)
    pki.sa_private_key.chmod(0o600)
    _openssl("pkey", "-in", str(pki.sa_private_key), "-pubout", "-out", str(pki.sa_public_key),
             cwd=directory)
    return pki
