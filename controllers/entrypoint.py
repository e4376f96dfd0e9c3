"""`gpuserve-operator`: run the operator (the same handlers as `kopf run operator/main.py`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

import kopf

import controllers.handlers  # noqa: F401  (registers every handler)


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
        default="http://0.0.0.0:8080/healthz",
        help="liveness endpoint URL (empty to disable)",
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
