"""`gpuserve status`: services, pools, conditions and last decisions, as a table."""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any, cast

from cli.errors import CLIError
from gpuserve.api.models import GROUP, VERSION
from gpuserve.api.status import InferenceServiceStatus
from gpuserve.resources.naming import SERVICES_PLURAL


def _fetch(namespace: str | None) -> list[dict[str, Any]]:
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        config.load_kube_config()
    except (config.ConfigException, OSError) as exc:
        raise CLIError(f"no usable kubeconfig ({exc}); set KUBECONFIG") from exc
    api = client.CustomObjectsApi()
    try:
        if namespace:
            out = api.list_namespaced_custom_object(GROUP, VERSION, namespace, SERVICES_PLURAL)
        else:
            out = api.list_cluster_custom_object(GROUP, VERSION, SERVICES_PLURAL)
    except ApiException as exc:
        hint = ""
        if exc.status == 404:
            hint = " (is gpuserve installed? its CRDs are in crds/ and in the Helm chart)"
        raise CLIError(
            f"listing InferenceServices failed: {exc.status} {exc.reason}{hint}"
        ) from exc
    except (OSError, HTTPError) as exc:
        # urllib3 gives up on a refused connection with MaxRetryError, not an OSError.
        host = client.Configuration.get_default_copy().host
        reason = getattr(exc, "reason", None) or exc
        raise CLIError(f"cannot reach the API server at {host}: {reason}") from exc
    items: list[dict[str, Any]] = cast(dict[str, Any], out).get("items", [])
    return items


def _summary(obj: dict[str, Any], st: InferenceServiceStatus) -> list[str]:
    ready = next((c for c in st.conditions if c.type == "Ready"), None)
    stalled = next((c for c in st.conditions if c.type == "Stalled" and c.status == "True"), None)
    ready_text: str = ready.status if ready else "Unknown"
    if stalled:
        ready_text += f" ({stalled.reason})"
    pools = " ".join(f"{p.accelerator_class}:{p.serving}+{p.warm}w" for p in st.pools) or "-"
    p95 = f"{st.p95_ms:.0f}ms" if st.p95_ms is not None else "-"
    return [
        obj["metadata"]["namespace"],
        obj["metadata"]["name"],
        ready_text,
        f"{st.replicas}/{st.desired_replicas if st.desired_replicas is not None else '-'}",
        str(st.warm_replicas),
        pools,
        f"{p95}/{obj['spec']['slo']['latency']}",
    ]


def _wrapped(text: str, width: int) -> list[str]:
    # Whole words only: a word longer than the line stays whole and overflows it.
    return textwrap.wrap(
        text,
        width=max(width, 40),
        initial_indent="  ",
        subsequent_indent="      ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def details(st: InferenceServiceStatus, width: int) -> list[str]:
    """Every condition (type=status reason: message), the last decision, in full, the
    pods routed around, and what a KEDA service's threshold was measured from."""
    lines: list[str] = []
    for c in st.conditions:
        text = f"{c.type}={c.status} {c.reason}" + (f": {c.message}" if c.message else "")
        lines += _wrapped(text, width)
    if st.last_decision is not None:
        d = st.last_decision
        verb = "" if d.applied else " (advisory, not applied)"
        text = f"last decision{verb} at {d.time}: {d.reason} (desired {d.desired_replicas})"
        lines += _wrapped(text, width)
    for r in st.routed_around:
        text = (
            f"routed around: pod {r.pod} until it clears its queue "
            f"({r.queued:g} waiting, {r.clears:g} clear within the queue budget)"
        )
        lines += _wrapped(text, width)
    if (k := st.keda_calibration) is not None:
        lines += _wrapped(f"KEDA threshold, measured at {k.time}: {k.message}", width)
    if (m := st.keda_token_mix) is not None:
        lines += _wrapped(f"KEDA thresholds, token mix measured at {m.time}: {m.message}", width)
    return lines or ["  (no status yet)"]


def render(items: list[dict[str, Any]], width: int) -> str:
    """The summary table, then each service's conditions and last decision, fitted to
    ``width`` columns."""
    table = [["NAMESPACE", "NAME", "READY", "SERVING", "WARM", "POOLS", "P95/SLO"]]
    blocks: list[str] = []
    for obj in sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"])):
        st = InferenceServiceStatus.model_validate(obj.get("status") or {})
        table.append(_summary(obj, st))
        header = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        blocks.append("\n".join([header, *details(st, width)]))
    return "\n\n".join([format_table(table), *blocks])


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
    print(render(items, shutil.get_terminal_size(fallback=(100, 24)).columns))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status", help="show InferenceServices, their pools and decisions", description=__doc__
    )
    p.add_argument("-n", "--namespace", help="only this namespace (default: all)")
    p.set_defaults(func=run)
