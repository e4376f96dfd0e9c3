"""kopf's connection to the API server, with a bounded connection pool.

kopf's own session opens a new TLS connection for every request in flight, without a
bound: when 1,000 services were created at once, ~1,000 status and finalizer patches were
in flight together and their connections (TLS buffers, aiohttp state) were the largest
single part of the operator's memory, ~200 MiB of its peak
(docs/bench-notes/scale-memory.md). The same credentials kopf would use, but a pool of
API_CONNECTIONS connections: requests beyond it wait for a free connection, which costs
a future, not a TLS session, and connections are reused instead of handshaken again.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

# Each watched kind holds one long-lived connection (eight kinds, plus kopf's own watches
# of CRDs and peering); the rest serve patches and events. Past ~20 concurrent requests
# the API server on a small control plane answers no faster.
API_CONNECTIONS = 32


@kopf.on.login()
async def bounded_session(**kwargs: Any) -> kopf.AiohttpSession | None:
    """kopf's own login (in-cluster service account, else the kubeconfig), with a pool.
    A coroutine: the session must be made in the event loop that will use it."""
    info = kopf.login_via_client(**kwargs)
    if info is None:
        return None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=API_CONNECTIONS, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        priority=info.priority,
        aiohttp_session=session,
    )
