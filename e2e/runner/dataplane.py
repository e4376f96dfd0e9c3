"""LocalDataPlane: a real Prometheus plus the LocalRunner, started and stopped together.

    with LocalDataPlane(kubeconfig) as plane:
        operator_env = {**plane.operator_env, ...}
        Target(model="sleeper", endpoints=plane.runner.endpoints_for(ns, "sleeper-chat"))

``stop_prometheus()`` / ``start_prometheus()`` take Prometheus away and bring it back on the
same port (a monitoring outage), the runner re-writing its targets into the new one.
"""

from __future__ import annotations

from pathlib import Path

from e2e.prometheus import PrometheusServer
from e2e.runner.runner import LocalRunner, RunnerSettings
from e2e.startstop import StartStop


class LocalDataPlane(StartStop):
    def __init__(
        self,
        kubeconfig: Path,
        *,
        settings: RunnerSettings | None = None,
        scrape_interval_s: float = 1.0,
        prometheus_port: int | None = None,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.scrape_interval_s = scrape_interval_s
        self._port = prometheus_port
        self.prometheus: PrometheusServer | None = None
        self.runner = LocalRunner(self.kubeconfig, settings=settings or RunnerSettings())

    @property
    def prometheus_url(self) -> str:
        """Prometheus's base URL; stable across stop_prometheus()/start_prometheus()."""
        if self._port is None:
            raise RuntimeError("Prometheus was never started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def operator_env(self) -> dict[str, str]:
        """What the operator is told of this Prometheus: where it is and how often it
        scrapes (its query windows follow the interval, gpuserve.autoscaling.query_windows)."""
        return {
            "GPUSERVE_PROMETHEUS_URL": self.prometheus_url,
            "GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL": f"{self.scrape_interval_s:g}s",
        }

    def start_prometheus(self, timeout: float = 30.0) -> PrometheusServer:
        if self.prometheus is not None:
            return self.prometheus
        prom = PrometheusServer(scrape_interval_s=self.scrape_interval_s, port=self._port)
        prom.start(timeout=timeout)
        self._port = prom.port
        self.prometheus = prom
        self.runner.set_prometheus(prom)
        return prom

    def stop_prometheus(self) -> None:
        prom, self.prometheus = self.prometheus, None
        self.runner.set_prometheus(None)
        if prom is not None:
            prom.stop()

    def start(self) -> LocalDataPlane:
        self.start_prometheus()
        try:
            self.runner.start()
        except BaseException:
            self.stop_prometheus()
            raise
        return self

    def stop(self) -> None:
        try:
            self.runner.stop()
        finally:
            self.stop_prometheus()

