"""``TritonServer``: the real tritonserver (nvidia-pytriton wheel) on loopback, on CPU.

Example::

    with TritonServer(repo) as triton:          # starts, waits for /v2/health/ready
        client = tritonclient.grpc.InferenceServerClient(triton.grpc_url)

HTTP, gRPC and metrics bind to 127.0.0.1 on free ports unless given. The server runs in its own
process group (with its Python-backend stubs); ``stop()`` ends exactly that group.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Literal

from e2e.startstop import StartStop
from e2e.triton.install import find_triton
from e2e.triton.logs import error_lines
from e2e.triton.process import (
    LOOPBACK,
    free_loopback_ports,
    group_members,
    http_status,
    http_text,
    port_listening,
    start_process_group,
    stop_process_group,
)

ModelControl = Literal["none", "explicit", "poll"]
_PORT_CLASH = ("already in use", "address in use", "failed to bind")
_START_ATTEMPTS = 3  # only when ports were picked by us and another process took one


class TritonStartError(RuntimeError):
    """tritonserver exited or did not become ready; ``errors`` holds the log's error lines."""

    def __init__(self, message: str, errors: list[str], exit_code: int | None) -> None:
        super().__init__(message)
        self.errors = errors
        self.exit_code = exit_code


class TritonModelError(RuntimeError):
    """A repository-API load/unload failed; ``errors`` holds the matching log lines."""

    def __init__(self, message: str, errors: list[str]) -> None:
        super().__init__(message)
        self.errors = errors


class TritonServer(StartStop):
    """A tritonserver process serving ``model_repository`` on loopback.

    Args:
        model_repository: directory holding ``<model>/config.pbtxt`` and ``<model>/1/...``.
        model_control: ``none`` (load everything), ``explicit`` or ``poll``. Giving
            ``load_models`` implies ``explicit``.
        load_models: models to load at start-up in explicit mode (``--load-model``).
        http_port, grpc_port, metrics_port: fixed ports; ``None`` picks free loopback ports.
        extra_flags: more tritonserver flags, e.g. ``["--metrics-config",
            "summary_latencies=true"]``.
        log_path: where stdout/stderr go; ``None`` uses a temporary file removed by ``stop()``
            (its text stays available through ``log_text()``).
        exit_timeout_s: ``--exit-timeout-secs``: how long Triton drains in-flight work on
            SIGTERM.
    """

    def __init__(
        self,
        model_repository: Path,
        *,
        model_control: ModelControl = "none",
        load_models: Sequence[str] = (),
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        extra_flags: Sequence[str] = (),
        log_path: Path | None = None,
        exit_timeout_s: int = 5,
    ) -> None:
        self.model_repository = Path(model_repository)
        self.model_control: ModelControl = "explicit" if load_models else model_control
        self.load_models = list(load_models)
        self._fixed_ports = (http_port, grpc_port, metrics_port)
        self.extra_flags = list(extra_flags)
        self.exit_timeout_s = exit_timeout_s
        self._own_log_dir: Path | None = None
        self.log_path = log_path
        self._log_file: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._final_log: str | None = None
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.exit_code: int | None = None

    # ----------------------------------------------------------------- addresses
    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("tritonserver is not started")
        return self._proc.pid

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT`` (KServe v2 REST)."""
        return f"http://{LOOPBACK}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        """``127.0.0.1:PORT`` - the form tritonclient.grpc expects (no scheme)."""
        return f"{LOOPBACK}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        """``http://127.0.0.1:PORT/metrics`` (Prometheus text format)."""
        return f"http://{LOOPBACK}:{self.metrics_port}/metrics"

    @property
    def metrics_address(self) -> str:
        """``127.0.0.1:PORT`` - a Prometheus scrape target."""
        return f"{LOOPBACK}:{self.metrics_port}"

    # ----------------------------------------------------------------- lifecycle
    def _argv(self) -> list[str]:
        install = find_triton()
        argv = [
            str(install.binary),
            f"--model-repository={self.model_repository}",
            f"--backend-directory={install.backend_dir}",
            f"--http-address={LOOPBACK}",
            f"--grpc-address={LOOPBACK}",
            f"--metrics-address={LOOPBACK}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",
            "--disable-auto-complete-config",
            f"--exit-timeout-secs={self.exit_timeout_s}",
            f"--model-control-mode={self.model_control}",
        ]
        argv += [f"--load-model={name}" for name in self.load_models]
        return argv + self.extra_flags

    def _open_log(self) -> IO[bytes]:
        if self.log_path is None:
            self._own_log_dir = Path(tempfile.mkdtemp(prefix="gpuserve-triton-log-"))
            self.log_path = self._own_log_dir / "tritonserver.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return open(self.log_path, "wb")

    def start(self, wait_ready: bool = True, timeout: float = 60.0) -> TritonServer:
        """Launches tritonserver; with ``wait_ready`` blocks until ``/v2/health/ready`` is 200.

        Raises TritonStartError (with the log's error lines) if the process exits or is not
        ready within ``timeout`` seconds; the process group is stopped in that case.
        """
        if self._proc is not None:
            raise RuntimeError("tritonserver already started")
        auto_ports = any(p is None for p in self._fixed_ports)
        for attempt in range(1, _START_ATTEMPTS + 1):
            picked = iter(free_loopback_ports(3))
            self.http_port, self.grpc_port, self.metrics_port = (
                p if p is not None else next(picked) for p in self._fixed_ports
            )
            self._log_file = self._open_log()
            self._proc = start_process_group(
                self._argv(), env=find_triton().env, log=self._log_file
            )
            if not wait_ready:
                return self
            try:
                self.wait_ready(timeout)
                return self
            except TritonStartError as err:
                text = self.log_text().lower()
                self.stop()
                retry = auto_ports and any(c in text for c in _PORT_CLASH)
                if not retry or attempt == _START_ATTEMPTS:
                    raise err from None
                self._proc = None
                self._final_log = None
        raise AssertionError("unreachable")

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Waits (bounded) for readiness; raises TritonStartError on exit or timeout."""
        deadline = time.monotonic() + timeout
        ports = self._served_ports()
        while time.monotonic() < deadline:
            code = self._proc.poll() if self._proc else None
            if code is not None:
                raise TritonStartError(
                    f"tritonserver exited with status {code} before it was ready: "
                    + "; ".join(self.errors()[-5:]),
                    self.errors(),
                    code,
                )
            if self.is_ready() and all(port_listening(p) for p in ports):
                return
            time.sleep(0.05)
        raise TritonStartError(
            f"tritonserver not ready after {timeout:.0f}s: " + "; ".join(self.errors()[-5:]),
            self.errors(),
            None,
        )

    def _served_ports(self) -> list[int]:
        """The ports besides HTTP that readiness waits for: gRPC, and metrics unless the
        flags turn them off. Triton can answer ready over HTTP before its metrics service
        listens: a scrape right after start() could find nothing there (a clean-clone CI
        run did, 2026-11-27)."""
        flags = self.extra_flags
        # "--allow-metrics=false" or "--allow-metrics false" (getopt takes both).
        values = [f.split("=", 1)[1] for f in flags if f.startswith("--allow-metrics=")]
        values += [b for a, b in itertools.pairwise(flags) if a == "--allow-metrics"]
        metrics_off = any(v.strip().lower() in ("false", "0") for v in values)
        return [self.grpc_port] + ([] if metrics_off else [self.metrics_port])

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM to this server's PID, SIGKILL after ``timeout``; then ends any stub left in
        the process group it created. Idempotent. Returns the exit status (Triton exits 1 on
        SIGTERM)."""
        if self._proc is not None and self._final_log is None:
            self.exit_code = stop_process_group(self._proc, term_timeout=timeout)
            if self._log_file is not None:
                self._log_file.close()
            self._final_log = self._read_log_file()
            if self._own_log_dir is not None:
                shutil.rmtree(self._own_log_dir, ignore_errors=True)
                self._own_log_dir = None
                self.log_path = None
        return self.exit_code

    def _running(self) -> bool:
        return self._proc is not None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def process_group_pids(self) -> list[int]:
        """Live PIDs in this server's process group (the server and its Python stubs)."""
        return group_members(self.pid) if self._proc is not None else []

    # ----------------------------------------------------------------- log
    def _read_log_file(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_text(self) -> str:
        """The server's combined stdout/stderr so far (kept after ``stop()``)."""
        return self._final_log if self._final_log is not None else self._read_log_file()

    def errors(self) -> list[str]:
        """Error lines of the log, without the harmless CUDA/NVML start-up noise."""
        return error_lines(self.log_text())

    # ----------------------------------------------------------------- HTTP API
    def is_live(self) -> bool:
        return http_status(f"{self.http_url}/v2/health/live", timeout=1.0) == 200

    def is_ready(self) -> bool:
        return http_status(f"{self.http_url}/v2/health/ready", timeout=1.0) == 200

    def model_ready(self, name: str, version: str = "") -> bool:
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "") + "/ready"
        return http_status(self.http_url + path, timeout=2.0) == 200

    def metrics_text(self) -> str:
        """The current Prometheus exposition from the metrics port."""
        status, body = http_text(self.metrics_url)
        if status != 200:
            raise RuntimeError(f"metrics endpoint answered {status}")
        return body

    def load_model(
        self, name: str, config_json: dict[str, object] | None = None, timeout: float = 60.0
    ) -> None:
        """Loads (or reloads) a model through the repository API (explicit mode).

        Triton answers a failed load with a generic error, so the precise reason is taken from
        the log lines written during the call; raises TritonModelError with them.
        """
        before = len(self.log_text())
        body = None
        if config_json is not None:
            body = json.dumps({"parameters": {"config": json.dumps(config_json)}}).encode()
        status, text = http_text(
            f"{self.http_url}/v2/repository/models/{name}/load",
            method="POST",
            data=body,
            timeout=timeout,
        )
        if status != 200:
            time.sleep(0.1)  # let the log line reach the file
            errors = error_lines(self.log_text()[before:])
            raise TritonModelError(
                f"loading {name!r} failed (HTTP {status}: {text.strip()}): " + "; ".join(errors),
                errors,
            )

    def unload_model(self, name: str, timeout: float = 30.0) -> None:
        status, text = http_text(
            f"{self.http_url}/v2/repository/models/{name}/unload", method="POST", timeout=timeout
        )
        if status != 200:
            raise TritonModelError(f"unloading {name!r} failed (HTTP {status}: {text})", [])
