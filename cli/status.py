"""`gpuserve status`: services, pools, conditions and last decisions, as a table."""

from __future__ import annotations

import argparse
from typing import Any

from cli.errors import CLIError
from gpuserve.api.models import GROUP, VERSION
from gpuserve.api.status import InferenceServiceStatus


def _fetch(namespace: str | None) -> list[dict[str, Any]]:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    try:
        config.load_kube_config()
    except (config.ConfigException, OSError) as exc:
        raise CLIError(f"no usable kubeconfig ({exc}); set KUBECONFIG") from exc
    api = client.CustomObjectsApi()
    try:
        if namespace:
            out = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferenceservices")
        else:
            out = api.list_cluster_custom_object(GROUP, VERSION, "inferenceservices")
    except ApiException as exc:
        raise CLIError(f"listing InferenceServices failed: {exc.status} {exc.reason}") from exc
    except OSError as exc:
        raise CLIError(f"cannot reach the API server: {exc}") from exc
    items: list[dict[str, Any]] = out.get("items", [])
    return items


def rows(items: list[dict[str, Any]]) -> list[list[str]]:
    table = [["NAMESPACE", "NAME", "READY", "SERVING", "WARM", "POOLS", "P95/SLO", "LAST DECISION"]]
    for obj in sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        st = InferenceServiceStatus.model_validate(obj.get("status") or {})
        ready = next((c for c in st.conditions if c.type == "Ready"), None)
        stalled = next(
            (c for c in st.conditions if c.type == "Stalled" and c.status == "True"), None
        )
        ready_text = ready.status if ready else "Unknown"
        if stalled:
            ready_text += f" ({stalled.reason})"
        pools = " ".join(f"{p.accelerator_class}:{p.serving}+{p.warm}w" for p in st.pools) or "-"
        p95 = f"{st.p95_ms:.0f}ms" if st.p95_ms is not None else "-"
        decision = st.last_decision.reason if st.last_decision else "-"
        table.append(
            [
                obj["metadata"]["namespace"],
                obj["metadata"]["name"],
                ready_text,
                f"{st.replicas}/{st.desired_replicas if st.desired_replicas is not None else '-'}",
                str(st.warm_replicas),
                pools,
                f"{p95}/{obj['spec']['slo']['latency']}",
                decision[:60],
            ]
        )
    return table


def format_table(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    )


def run(args: argparse.Namespace) -> int:
    items = _fetch(args.namespace)
    if not items:
        print("no InferenceServices found")
        return 0
    print(format_table(rows(items)))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status", help="show InferenceServices, their pools and decisions", description=__doc__
    )
    p.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    p.set_defaults(func=run)
