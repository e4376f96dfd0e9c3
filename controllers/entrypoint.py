"""`gpuserve-operator`: run the operator (the same handlers as `kopf run operator/main.py`)."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket
import sys
from urllib.parse import urlsplit

import kopf

import controllers.handlers  # noqa: F401  (registers every handler)

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"


def liveness_unavailable(url: str) -> str | None:
    """Why the liveness endpoint cannot be served, or None. Checked before kopf starts:
    kopf binds it inside a task, and a taken port would end there in a traceback."""
    parts = urlsplit(url)
    host, port = parts.hostname or "0.0.0.0", parts.port or 80
    hint = (
        "choose another with --liveness http://0.0.0.0:<port>/healthz (Helm: healthPort), "
        "or turn it off with --liveness ''"
    )
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        # The same option aiohttp sets, so a port in TIME_WAIT is not reported as taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            reason = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            return f"cannot serve the liveness endpoint on {host}:{port} ({reason}); {hint}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuserve-operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="namespace to watch (repeatable; glob patterns allowed); default: all",
    )
    parser.add_argument(
        "--liveness",
        default=DEFAULT_LIVENESS,
        help="liveness endpoint URL, empty to disable (default: %(default)s)",
    )
    parser.add_argument(
        "--peering", default="", help="kopf peering name for HA (empty: standalone)"
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=int(os.environ.get("GPUSERVE_PEERING_PRIORITY", "0")),
        help="peering priority: the highest live replica acts, the others stand by "
        "(give HA replicas distinct values; env GPUSERVE_PEERING_PRIORITY)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    problem = liveness_unavailable(args.liveness) if args.liveness else None
    if problem:
        print(f"{parser.prog}: {problem}", file=sys.stderr)
        return 2
    asyncio.run(
        kopf.operator(
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness or None,
            standalone=not args.peering,
            peering_name=args.peering or None,
            priority=args.priority,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
