"""Kubeconfig files for the admin and for each component, with the certificates embedded.

Embedding keeps a kubeconfig usable after being copied elsewhere (CI artefacts, a second
shell) and means no component depends on the PKI directory layout.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml

from e2e.cluster import settings
from e2e.cluster.pki import ClientIdentity, Pki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def render(pki: Pki, identity: ClientIdentity, server: str) -> dict[str, object]:
    name = settings.CLUSTER_NAME
    user = identity.file_stem
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": server,
            "certificate-authority-data": _b64(pki.ca_cert),
        }}],
        "users": [{"name": user, "user": {
            "client-certificate-data": _b64(pki.client_cert(identity)),
            "client-key-data": _b64(pki.client_key(identity)),
        }}],
        "contexts": [{"name": f"{user}@{name}", "context": {"cluster": name, "user": user}}],
        "current-context": f"{user}@{name}",
        "preferences": {},
    }


def write(path: Path, pki: Pki, identity: ClientIdentity, server: str) -> Path:
    """Writes atomically with mode 0600 (it holds a private key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        yaml.safe_dump(render(pki, identity, server), out, sort_keys=False)
    tmp.replace(path)
    return path
