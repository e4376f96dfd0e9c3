"""Command line: python -m e2e.cluster build|up|down|status|nodes."""

from __future__ import annotations

import argparse
import sys

from e2e.cluster.progress import Progress

# The third-party CRDs `build` caches and `up` installs (e2e/cluster/extension_crds.py).
CRDS = "inference-crds"


def _build(args: argparse.Namespace) -> int:
    from e2e.cluster import binaries, extension_crds, settings

    progress = Progress()
    selected = tuple(c for c in binaries.ALL if not args.only or c.name in args.only)
    try:
        binaries.build_all(progress, selected, force=args.force)
        if not args.only or CRDS in args.only:
            extension_crds.fetch(progress, force=args.force)
    except (binaries.BuildError, extension_crds.CrdError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    progress.step(f"binaries ready in {settings.bin_root()}")
    return 0


def _up(args: argparse.Namespace) -> int:
    from e2e.cluster import lifecycle

    return lifecycle.up(Progress(), timeout=args.timeout)


def _down(args: argparse.Namespace) -> int:
    from e2e.cluster import lifecycle

    return lifecycle.down(Progress())


def _status(args: argparse.Namespace) -> int:
    from e2e.cluster import lifecycle

    return lifecycle.status()


def _nodes(args: argparse.Namespace) -> int:
    import yaml

    from e2e.cluster import nodepools, settings

    path = settings.nodepools_path()
    try:
        pools = nodepools.load(path)
        manifests = nodepools.node_manifests(pools)
    except nodepools.NodePoolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.summary:
        print(f"{path}: {len(manifests)} nodes: {nodepools.summary(pools)}")
    else:
        yaml.safe_dump_all(manifests, sys.stdout, sort_keys=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser("build", help="build the pinned binaries into the cache")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.add_argument("--only", nargs="*", choices=["controlplane", "kwok", "helm", CRDS],
                       help="build (or fetch) only these components")
    build.set_defaults(func=_build)

    up = commands.add_parser("up", help="start the cluster (no-op when already up)")
    up.add_argument("--timeout", type=float, default=120.0,
                    help="seconds to wait for each component to become ready")
    up.set_defaults(func=_up)

    commands.add_parser("down", help="stop what `up` started").set_defaults(func=_down)
    commands.add_parser("status", help="show components and nodes").set_defaults(func=_status)

    nodes = commands.add_parser("nodes", help="validate e2e/nodepools.yaml, print Node manifests")
    nodes.add_argument("--summary", action="store_true", help="one line instead of manifests")
    nodes.set_defaults(func=_nodes)

    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
