"""One pod's tritonserver: started from the pod's config and flags, stopped with its drain.

States: ``starting`` -> ``ready`` (model loaded) -> ``stopping`` -> ``stopped``; a start that
fails or a process that dies goes to ``failed`` (the runner restarts it after a back-off,
as a kubelet would restart the container).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from pathlib import Path

from e2e.runner.flags import LocalFlags
from e2e.runner.podview import PodView
from e2e.runner.targets import InstanceInfo
from e2e.triton import TritonServer, TritonStartError
from e2e.triton.process import LOOPBACK

# After SIGTERM Triton drains for --exit-timeout-secs, then its Python stub needs ~3 s.
STUB_STOP_S = 10.0


class PodInstance:
    """A Triton for one pod. Thread-safe for reads; start/stop run on worker threads."""

    def __init__(self, view: PodView, workdir: Path) -> None:
        self.view = view
        self.workdir = workdir
        self.state = "starting"
        self.error = ""
        self.restarts = 0
        self.failed_at = 0.0
        self.ready_at: float | None = None
        self.changes: list[str] = []
        self.flags: LocalFlags | None = None
        self._server: TritonServer | None = None
        self._lock = threading.Lock()
        # Set when a start attempt is over (ready or failed): a stop waits for it, so a
        # process being launched is never left behind.
        self._start_done = threading.Event()
        self._stop_lock = threading.Lock()  # the drain job and a runner shutdown may overlap

    # ------------------------------------------------------------------ lifecycle
    def start(self, repository: Path, flags: LocalFlags, timeout: float) -> None:
        """Starts Triton and blocks until the pod's model is ready (bounded by ``timeout``).
        Sets ``state`` to ready or failed; never raises for Triton's own failures."""
        self.flags = flags
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_path = self.workdir / f"tritonserver-{self.restarts}.log"
        server = TritonServer(
            repository,
            load_models=flags.load_models,
            extra_flags=list(flags.extra_flags),
            exit_timeout_s=flags.exit_timeout_s,
            log_path=log_path,
        )
        try:
            with self._lock:
                if self.state != "starting":  # deleted while we were preparing
                    return
                self._server = server
            try:
                server.start(wait_ready=True, timeout=timeout)
                missing = [m for m in flags.load_models if not server.model_ready(m)]
                if missing:
                    raise TritonStartError(f"models not ready: {missing}", server.errors(), None)
            except TritonStartError as err:
                server.stop(timeout=STUB_STOP_S)
                self._fail(str(err))
                return
            with self._lock:
                if self.state == "starting":
                    self.state = "ready"
                    self.ready_at = time.monotonic()
        finally:
            self._start_done.set()

    def _fail(self, message: str) -> None:
        with self._lock:
            if self.state in ("starting", "ready"):
                self.state = "failed"
                self.error = message
                self.failed_at = time.monotonic()

    def fail(self, message: str) -> None:
        """Marks a start that could not even be attempted (e.g. the config is unreadable)."""
        self._fail(message)
        self._start_done.set()

    def start_over(self) -> None:
        """The current start attempt has ended (launched, failed or skipped)."""
        self._start_done.set()

    def check(self) -> bool:
        """True while the process runs and answers ready; marks the instance failed when the
        process has exited (it stays ``ready`` but unhealthy when it only stops answering)."""
        server = self._server
        if server is None or self.state != "ready":
            return False
        if not server.running:
            with self._stop_lock:
                code = server.stop(timeout=STUB_STOP_S)  # reaps it and any stub left behind
            self._fail(f"tritonserver exited with status {code}")
            return False
        return server.is_ready()

    def reset_for_restart(self) -> None:
        with self._lock:
            if self.state == "failed":
                self.state = "starting"
                self.restarts += 1
                self._server = None
                self._start_done.clear()

    def begin_stop(self) -> bool:
        """Takes the instance out of service; False if it was already stopping."""
        with self._lock:
            if self.state in ("stopping", "stopped"):
                return False
            self.state = "stopping"
            return True

    def finish_stop(self, start_timeout: float) -> int | None:
        """SIGTERM, wait for Triton to drain in-flight requests (its exit timeout) and exit."""
        with self._lock:
            server = self._server  # after begin_stop() no new server is ever assigned
        if server is not None:
            self._start_done.wait(timeout=start_timeout + STUB_STOP_S)
        code = None
        with self._stop_lock:
            if server is not None:
                timeout = (self.flags.exit_timeout_s if self.flags else 30) + STUB_STOP_S
                code = server.stop(timeout=timeout)
            with self._lock:
                self.state = "stopped"
        return code

    def remove_files(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ views
    @property
    def server(self) -> TritonServer | None:
        return self._server

    def info(self, view: PodView) -> InstanceInfo:
        server = self._server
        started = server is not None and server.grpc_port > 0
        pid: int | None = None
        if server is not None:
            with contextlib.suppress(RuntimeError):  # ports picked, process not yet launched
                pid = server.pid
        return InstanceInfo(
            namespace=view.namespace,
            pod=view.name,
            service=view.service,
            accelerator_class=view.accelerator_class,
            role=view.role,
            pod_ip=view.pod_ip,
            state=self.state,
            pod_ready=view.ready,
            deleting=view.deleting,
            grpc=f"{LOOPBACK}:{server.grpc_port}" if server and started else None,
            http=f"{LOOPBACK}:{server.http_port}" if server and started else None,
            metrics=f"{LOOPBACK}:{server.metrics_port}" if server and started else None,
            restarts=self.restarts,
            pid=pid if started else None,
        )
