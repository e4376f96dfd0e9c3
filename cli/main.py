"""The `gpuserve` command line."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from cli.errors import CLIError

# Subcommand modules, each with register(subparsers); a module that is not present in
# this build is skipped rather than breaking the whole CLI.
_COMMANDS = ("cli.rendering", "cli.status", "cli.simulate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuserve",
        description="gpuserve: SLO-driven Triton serving on Kubernetes GPUs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code: int = args.func(args)
    except CLIError as exc:
        print(f"gpuserve {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"gpuserve {args.command}: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
