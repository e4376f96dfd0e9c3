"""What tests get from the `cluster` fixture, plus a bounded polling helper."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the kubernetes package is slow to import; only api_client() needs it
    from kubernetes.client import ApiClient

T = TypeVar("T")
KUBECTL_TIMEOUT_S = 60.0


class KubectlError(subprocess.CalledProcessError):
    """CalledProcessError whose message includes kubectl's stderr."""

    def __str__(self) -> str:
        return (f"{' '.join(map(str, self.cmd))} exited with {self.returncode}: "
                f"{(self.stderr or '').strip()}")


def run_cluster_cli(
    command: str, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs `python -m e2e.cluster <command>` the way a user would, in ``env`` (default:
    this process's environment, where GPUSERVE_CLUSTER_DIR and GPUSERVE_PORT_OFFSET
    choose the cluster)."""
    return subprocess.run(
        [sys.executable, "-m", "e2e.cluster", command],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ if env is None else env),
        check=False,
    )


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise FileNotFoundError("kubectl is not on PATH")
    return found


@dataclass(frozen=True)
class ClusterHandle:
    kubeconfig: Path
    # True when this pytest session started the cluster (and therefore stops it).
    started_here: bool
    # True for the local harness (KWOK nodes, our PID files); False for a foreign cluster.
    local: bool

    def kubectl(self, *args: str, check: bool = True, timeout: float = KUBECTL_TIMEOUT_S,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [kubectl_binary(), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                input=stdin)
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def api_client(self) -> ApiClient:
        from kubernetes import config

        api: ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig))
        return api


def wait_for(probe: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.2, explain: Callable[[], str] | None = None) -> T:
    """Calls probe until it returns something truthy; AssertionError after timeout, with
    what ``explain`` says of the state then (so a CI log shows why, not only that)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            why = f": {explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{why}")
        time.sleep(interval)


@contextlib.contextmanager
def tolerating(status: int) -> Iterator[None]:
    """Swallows a Kubernetes API answer of ``status`` (409 to a create, 404 to a delete:
    what the call wanted is already so, e.g. after a retry)."""
    from kubernetes.client.exceptions import ApiException

    try:
        yield
    except ApiException as exc:
        if exc.status != status:
            raise
