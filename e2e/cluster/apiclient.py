"""A minimal HTTPS JSON client for the harness itself.

The harness talks to the API server with the admin client certificate through urllib, which
avoids importing the (slow to load) kubernetes package on every `up`/`status`.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from e2e.cluster.pki import ADMIN, Pki


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def admin_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    context.load_cert_chain(str(pki.client_cert(ADMIN)), str(pki.client_key(ADMIN)))
    return context


def insecure_tls() -> ssl.SSLContext:
    """For the controller manager's and scheduler's self-signed health endpoints."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def get_status(url: str, tls: ssl.SSLContext | None, timeout: float = 2.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, context=tls, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        return 0, str(exc)


@dataclass(frozen=True)
class ApiClient:
    server: str
    tls: ssl.SSLContext
    timeout: float = 10.0

    def request(self, method: str, path: str, body: object | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.tls, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(exc.code, detail) from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: object) -> Any:
        return self.request("POST", path, body)
