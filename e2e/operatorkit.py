"""Run the real operator process against a test cluster, and install what it needs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.manifests import EXAMPLES
from e2e.memlimit import MemoryCgroup
from e2e.startstop import StartStop
from gpuserve.api.models import GROUP
from gpuserve.resources.naming import CLASSES_PLURAL, SERVICES_PLURAL

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "crds"
EXAMPLE_CLASSES = EXAMPLES / "accelerator-classes.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def install_crds(cluster: ClusterHandle) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))

    # Polled rather than `kubectl wait`, which can fail on a CRD created a moment ago.
    def established() -> bool:
        out = cluster.kubectl(
            "get",
            "crd",
            f"{SERVICES_PLURAL}.{GROUP}",
            f"{CLASSES_PLURAL}.{GROUP}",
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.type=='Established')].status}",
            check=False,
        ).stdout.split()
        return out == ["True", "True"]

    wait_for(established, 60, "CRDs established")


def install_classes(cluster: ClusterHandle, path: Path = EXAMPLE_CLASSES) -> None:
    cluster.kubectl("apply", "-f", str(path))


def healthz_ok(port: int) -> bool:
    """Whether an operator's liveness endpoint on loopback ``port`` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def delete_services(cluster: ClusterHandle, namespace: str, timeout_s: int = 60) -> None:
    """Deletes the namespace's InferenceServices and waits up to ``timeout_s`` for them to
    go; a timeout is left to the caller's own checks (kubectl's failure is not raised)."""
    cluster.kubectl(
        "delete", SERVICES_PLURAL, "--all", "-n", namespace, "--wait=true",
        f"--timeout={timeout_s}s", check=False, timeout=timeout_s + 30,
    )


class OperatorProcess(StartStop):
    """The operator as a child process: `python -m controllers.entrypoint`.

    ``launcher`` goes between the interpreter and ``-m controllers.entrypoint``: a profiler
    that runs a module in its own process (``-m memray run -o FILE``) keeps the PID the
    operator's, so RSS sampling and a cgroup limit apply to the operator itself. With
    ``cgroup``, the process joins it before the interpreter starts, so every byte it ever
    allocates counts against the limit."""

    def __init__(
        self,
        cluster: ClusterHandle,
        log_path: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        launcher: tuple[str, ...] = (),
        cgroup: MemoryCgroup | None = None,
    ) -> None:
        self.cluster = cluster
        self.log_path = log_path
        self.extra = extra
        self.env = env or {}
        self.launcher = launcher
        self.cgroup = cgroup
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        env = dict(
            os.environ,
            KUBECONFIG=str(self.cluster.kubeconfig),
            PYTHONUNBUFFERED="1",
            **self.env,
        )
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *self.launcher,
                "-m",
                "controllers.entrypoint",
                "--liveness",
                f"http://127.0.0.1:{self.port}/healthz",
                *self.extra,
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=self._join_cgroup if self.cgroup else None,
        )
        log.close()
        wait_for(self._live, timeout, "operator liveness endpoint")
        return self

    def _join_cgroup(self) -> None:  # in the child, between fork and exec
        assert self.cgroup is not None
        self.cgroup.add(os.getpid())

    def _live(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"operator exited early; log:\n{self.log_tail()}")
        return healthz_ok(self.port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _running(self) -> bool:
        return self.alive()

    def kill9(self) -> None:
        """Crash it: SIGKILL, no chance to clean up (as a node failure would)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def operator_with_classes(cluster: ClusterHandle, log_dir: Path) -> Iterator[OperatorProcess]:
    """The body of a fixture: the CRDs and example classes installed, then an operator that
    runs until the fixture ends."""
    install_crds(cluster)
    install_classes(cluster)
    with OperatorProcess(cluster, log_dir / "operator.log") as proc:
        yield proc


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def write_counts(
    cluster: ClusterHandle, verbs: tuple[str, ...] = WRITE_VERBS
) -> dict[str, float]:
    """Mutating requests the API server has served, per resource, from its own metrics."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = {
            key: raw.strip('"')
            for key, _, raw in (
                part.partition("=")
                for part in labels[len("apiserver_request_total{") : -1].split(",")
            )
        }
        verb = fields.get("verb", "")
        if verb not in verbs:
            continue
        key = f"{fields.get('resource', '')}/{fields.get('subresource', '')}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def settle(seconds: float) -> None:
    """A bounded pause for asynchronous effects that have no event to wait for."""
    time.sleep(seconds)
