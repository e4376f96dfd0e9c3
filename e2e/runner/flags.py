"""The pod's tritonserver flags, translated for a Triton on loopback (pure).

Kept: every flag that changes what Triton does with requests or metrics (``--metrics-config``,
``--strict-readiness``, ``--cache-config``, ``--log-*``, ``--rate-limit*``...). Replaced: the
model repository, listeners (ports and addresses: the local server binds 127.0.0.1 on free
ports), and model control (``--load-model`` / ``--exit-timeout-secs`` become TritonServer
arguments). Dropped: what would reach outside loopback or point at container paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_EXIT_TIMEOUT_S = 30  # tritonserver's own default
# Set by TritonServer itself from our arguments, or meaningless on loopback.
_REPLACED = {
    "--model-repository",
    "--model-store",
    "--model-control-mode",
    "--load-model",
    "--exit-timeout-secs",
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--sagemaker-port",
    "--vertex-ai-port",
    "--http-address",
    "--grpc-address",
    "--metrics-address",
    "--backend-directory",
    "--repoagent-directory",
    "--cache-directory",
    "--allow-gpu-metrics",
    "--disable-auto-complete-config",
    "--allow-sagemaker",
    "--allow-vertex-ai",
}
# Flags that take no value (everything else in tritonserver takes one).
_NO_VALUE = {"--disable-auto-complete-config"}


@dataclass(frozen=True)
class LocalFlags:
    """What TritonServer is given for one pod."""

    load_models: tuple[str, ...]
    exit_timeout_s: int
    extra_flags: tuple[str, ...]
    dropped: tuple[str, ...] = field(default=())


def split_flags(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """``[(--flag, value)]`` from ``--flag=value`` and ``--flag value`` forms; a leading
    program name (``tritonserver``) and stray positionals are skipped."""
    pairs: list[tuple[str, str | None]] = []
    items = list(args)
    i = 0
    while i < len(items):
        arg = items[i]
        i += 1
        if not arg.startswith("--"):
            continue
        if "=" in arg:
            name, value = arg.split("=", 1)
            pairs.append((name, value))
        elif arg in _NO_VALUE or i >= len(items) or items[i].startswith("--"):
            pairs.append((arg, None))
        else:
            pairs.append((arg, items[i]))
            i += 1
    return pairs


def translate_args(args: Sequence[str], *, cache_directory: Path | None = None) -> LocalFlags:
    """LocalFlags for the pod's container ``args``. ``cache_directory`` is the wheel's
    ``caches/`` folder, passed when the pod enables the response cache."""
    load: list[str] = []
    exit_timeout = DEFAULT_EXIT_TIMEOUT_S
    extra: list[str] = []
    dropped: list[str] = []
    for name, value in split_flags(args):
        if name == "--load-model" and value:
            load.append(value)
        elif name == "--exit-timeout-secs" and value is not None:
            try:
                exit_timeout = max(0, int(value))
            except ValueError:
                dropped.append(f"{name}={value}")
        elif name in _REPLACED:
            if name not in ("--model-repository", "--model-control-mode"):
                dropped.append(name if value is None else f"{name}={value}")
        else:
            extra.append(name if value is None else f"{name}={value}")
            if name == "--cache-config" and cache_directory is not None:
                extra.append(f"--cache-directory={cache_directory}")
    return LocalFlags(
        load_models=tuple(dict.fromkeys(load)),
        exit_timeout_s=exit_timeout,
        extra_flags=tuple(dict.fromkeys(extra)),
        dropped=tuple(dropped),
    )
