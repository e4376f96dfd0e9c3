"""``PrometheusServer``: a real Prometheus (Debian's /usr/bin/prometheus) on loopback.

It scrapes Triton metrics endpoints listed in a ``file_sd_configs`` file that
:meth:`PrometheusServer.set_targets` rewrites atomically, so tests can add and remove pods while
it runs. Data lives in a temporary TSDB directory removed by ``stop()``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from e2e.loadgen.endpoints import check_loopback
from e2e.startstop import StartStop
from e2e.triton.process import (
    LOOPBACK,
    free_loopback_port,
    http_status,
    http_text,
    start_process_group,
    stop_process_group,
)

DEFAULT_JOB = "triton"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_START_ATTEMPTS = 3


class PrometheusNotInstalledError(RuntimeError):
    """No prometheus binary was found."""


class PrometheusStartError(RuntimeError):
    """Prometheus exited or did not become ready (message includes the log tail)."""


def find_prometheus(name: str = "prometheus") -> Path:
    """``/usr/bin/<name>`` if present, else ``<name>`` on PATH (also used for ``promtool``)."""
    debian = Path("/usr/bin") / name
    if debian.is_file() and os.access(debian, os.X_OK):
        return debian
    found = shutil.which(name)
    if found is None:
        raise PrometheusNotInstalledError(
            f"{name} not found; install Debian's package: "
            "apt-get install -y --no-install-recommends prometheus"
        )
    return Path(found)


def prometheus_available() -> bool:
    try:
        find_prometheus()
    except PrometheusNotInstalledError:
        return False
    return True


def build_config(
    targets_file: Path,
    *,
    scrape_interval_s: float = 1.0,
    job_name: str = DEFAULT_JOB,
    extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The prometheus.yml content: one file_sd job for Triton metrics plus any extra jobs."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            # A scrape must finish within the interval.
            "scrape_timeout": interval,
        },
        "scrape_configs": [
            {
                "job_name": job_name,
                "metrics_path": "/metrics",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "1s"}],
            },
            *[dict(c) for c in extra_scrape_configs],
        ],
    }


def targets_document(targets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """file_sd JSON for ``[{address, labels}]``; addresses must be loopback host:port."""
    document = []
    for target in targets:
        address = check_loopback(str(target["address"]))
        labels = {str(k): str(v) for k, v in dict(target.get("labels") or {}).items()}
        for key in labels:
            if not _LABEL_NAME.match(key) or key.startswith("__"):
                raise ValueError(f"invalid Prometheus label name {key!r}")
        document.append({"targets": [address], "labels": labels})
    return document


class PrometheusServer(StartStop):
    """A Prometheus process on 127.0.0.1 with a file_sd job for Triton targets.

    Args:
        scrape_interval_s: global scrape and evaluation interval (default 1 s).
        port: listen port; ``None`` picks a free loopback port.
        job_name: the job label of the Triton scrape job.
        extra_scrape_configs: more scrape_configs entries (dicts, as in prometheus.yml).
        binary: the prometheus executable; default /usr/bin/prometheus or PATH.
        retention: ``--storage.tsdb.retention.time``.
    """

    def __init__(
        self,
        *,
        scrape_interval_s: float = 1.0,
        port: int | None = None,
        job_name: str = DEFAULT_JOB,
        extra_scrape_configs: Sequence[Mapping[str, Any]] = (),
        binary: Path | None = None,
        retention: str = "2h",
    ) -> None:
        self.scrape_interval_s = scrape_interval_s
        self._fixed_port = port
        self.port = 0
        self.job_name = job_name
        self.extra_scrape_configs = list(extra_scrape_configs)
        self.binary = binary
        self.retention = retention
        self.workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._final_log: str | None = None

    # ----------------------------------------------------------------- paths
    def _path(self, name: str) -> Path:
        if self.workdir is None:
            raise RuntimeError("Prometheus is not started")
        return self.workdir / name

    @property
    def config_path(self) -> Path:
        return self._path("prometheus.yml")

    @property
    def targets_path(self) -> Path:
        return self._path("targets.json")

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` - for PrometheusConnect and the HTTP API."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("Prometheus is not started")
        return self._proc.pid

    # ----------------------------------------------------------------- lifecycle
    def write_config(self) -> Path:
        """Writes prometheus.yml and an empty targets file into the work directory."""
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="gpuserve-prometheus-"))
        config = build_config(
            self.targets_path,
            scrape_interval_s=self.scrape_interval_s,
            job_name=self.job_name,
            extra_scrape_configs=self.extra_scrape_configs,
        )
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        if not self.targets_path.exists():
            self.set_targets([])
        return self.config_path

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> PrometheusServer:
        """Starts Prometheus; with ``wait_ready`` waits (bounded) for ``/-/ready``."""
        if self._proc is not None:
            raise RuntimeError("Prometheus already started")
        binary = self.binary or find_prometheus()
        self.write_config()
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = self._fixed_port or free_loopback_port()
            self._log = open(self._path("prometheus.log"), "wb")  # noqa: SIM115 - closed in stop
            self._proc = start_process_group(
                [
                    str(binary),
                    f"--config.file={self.config_path}",
                    f"--storage.tsdb.path={self._path('tsdb')}",
                    f"--storage.tsdb.retention.time={self.retention}",
                    f"--web.listen-address={LOOPBACK}:{self.port}",
                    "--web.enable-lifecycle",
                ],
                env=None,
                log=self._log,
                cwd=self.workdir,
            )
            if not wait_ready:
                return self
            try:
                self._wait_ready(timeout)
                return self
            except PrometheusStartError:
                clash = "address already in use" in self.log_text().lower()
                self._stop_process()
                if self._fixed_port or not clash or attempt == _START_ATTEMPTS:
                    self.stop()
                    raise
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise PrometheusStartError(
                    f"prometheus exited with {self._proc.returncode}: {self.log_text()[-1500:]}"
                )
            if http_status(f"{self.url}/-/ready", timeout=1.0) == 200:
                return
            time.sleep(0.05)
        raise PrometheusStartError(f"prometheus not ready after {timeout:.0f}s")

    def _stop_process(self) -> None:
        if self._proc is not None:
            stop_process_group(self._proc, term_timeout=10.0)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        """SIGTERM to its own PID (SIGKILL after 10 s), then removes config, targets and TSDB.
        Idempotent; ``log_text()`` stays available."""
        self._stop_process()
        if self.workdir is not None:
            self._final_log = self.log_text()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def _running(self) -> bool:
        return self._proc is not None

    def log_text(self) -> str:
        if self._final_log is not None and self.workdir is None:
            return self._final_log
        path = self._path("prometheus.log")
        return path.read_text(errors="replace") if path.exists() else ""

    # ----------------------------------------------------------------- targets
    def set_targets(self, targets: Sequence[Mapping[str, Any]]) -> None:
        """Replaces the scrape targets: ``[{"address": "127.0.0.1:PORT", "labels": {"namespace":
        ..., "pod": ..., "service": ...}}]``. Written to a temp file then renamed, so
        Prometheus never reads a partial file; picked up within about a second."""
        document = targets_document(targets)
        tmp = self.targets_path.with_name(f".targets.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(document, indent=1))
        os.replace(tmp, self.targets_path)

    def reload(self) -> None:
        """Asks Prometheus to re-read its config (``/-/reload``, lifecycle API)."""
        self.write_config()
        status, body = http_text(f"{self.url}/-/reload", method="POST")
        if status != 200:
            raise RuntimeError(f"reload failed ({status}): {body}")

    # ----------------------------------------------------------------- queries
    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query through the HTTP API; returns ``data.result``."""
        status, body = http_text(
            f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        )
        data = json.loads(body)
        if status != 200 or data.get("status") != "success":
            raise RuntimeError(f"query {promql!r} failed ({status}): {data.get('error', body)}")
        return list(data["data"]["result"])

    def active_targets(self) -> list[dict[str, Any]]:
        """``/api/v1/targets`` active targets (labels, health, lastError)."""
        _, body = http_text(f"{self.url}/api/v1/targets?state=active")
        return list(json.loads(body)["data"]["activeTargets"])

    def wait_for(
        self,
        promql: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout: float = 30.0,
        interval: float = 0.25,
    ) -> list[dict[str, Any]]:
        """Polls ``promql`` until ``predicate(result)`` holds (default: non-empty) or raises
        TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(promql)
            if predicate(result):
                return result
            time.sleep(interval)
        raise TimeoutError(f"{promql!r} did not satisfy the condition in {timeout}s: {result}")
