"""The operator's only Kubernetes client: reads, server-side apply, and guarded writes.

Every write goes through ``apply_if_changed`` or ``patch_if_changed``, which compare the
desired fields with the live object first, so a reconcile of an unchanged service sends
no write at all. Writes are counted per kind for tests and benchmarks.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from gpuserve.api.models import GROUP, VERSION
from gpuserve.resources.naming import FIELD_MANAGER
from gpuserve.resources.sameness import contains

Obj = dict[str, Any]
log = logging.getLogger(__name__)

WRITES: collections.Counter[str] = collections.Counter()
# Threads that may call the API server at once: the reconcile queue's workers, the child
# appliers, the periodic loops; with room (a smaller pool discards connections).
RECONCILE_WORKERS = 16
APPLIER_THREADS = 16
API_THREADS = RECONCILE_WORKERS + APPLIER_THREADS + 16
# Child kinds the operator watches through kopf indexes (so no GET is needed first).
INDEXED_KINDS = frozenset(
    {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "InferencePool"}
)
# How long a kind found missing is taken as missing before discovery is asked again: each
# miss makes the client re-read the whole discovery (and rewrite its cache file).
UNSERVED_RECHECK_S = 60.0


class KindNotServed(RuntimeError):
    """The API server does not serve a kind gpuserve was asked to create (e.g. KEDA's
    ScaledObject without KEDA installed)."""

    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(
            f"the API server does not serve {kind} ({api_version}); is its operator installed?"
        )
        self.api_version = api_version
        self.kind = kind


_lock = threading.Lock()
_dynamic: DynamicClient | None = None
_api: client.ApiClient | None = None


def api_client() -> client.ApiClient:
    """One shared ApiClient (in-cluster config, else the kubeconfig)."""
    global _api
    with _lock:
        if _api is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            settings = client.Configuration.get_default_copy()
            # One connection per thread that may call at once (reconcile workers, child
            # appliers, periodic loops): a smaller pool discards connections under load
            # and every request after that pays a new TLS handshake.
            settings.connection_pool_maxsize = API_THREADS
            _api = client.ApiClient(settings)
        return _api


def dynamic() -> DynamicClient:
    global _dynamic
    api = api_client()
    with _lock:
        if _dynamic is None:
            _dynamic = DynamicClient(api)
        return _dynamic


def _resource(api_version: str, kind: str) -> Any:
    try:
        return dynamic().resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError as exc:
        raise KindNotServed(api_version, kind) from exc


_unserved: dict[tuple[str, str], float] = {}


def serves(api_version: str, kind: str) -> bool:
    """Whether the API server serves the kind (its CRD is installed). A miss is remembered
    for UNSERVED_RECHECK_S, so a missing optional kind costs one discovery per minute,
    not one per reconcile; a CRD installed meanwhile is seen within that time."""
    key = (api_version, kind)
    with _lock:
        missed = _unserved.get(key)
    if missed is not None and time.monotonic() - missed < UNSERVED_RECHECK_S:
        return False
    try:
        _resource(api_version, kind)
    except KindNotServed:
        with _lock:
            _unserved[key] = time.monotonic()
        return False
    with _lock:
        _unserved.pop(key, None)
    return True


def get(api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
    try:
        obj = _resource(api_version, kind).get(name=name, namespace=namespace)
    except NotFoundError:
        return None
    result: Obj = obj.to_dict()
    return result


def namespace_terminating(exc: ApiException) -> bool:
    """A write refused because the namespace is being deleted: nothing left to do there."""
    return exc.status == 403 and "being terminated" in str(exc.body or "")


def _target_gone(exc: ApiException) -> bool:
    """The object (404) or its whole namespace is going: a write to it is moot."""
    return exc.status == 404 or namespace_terminating(exc)


def _kind_gone(exc: ApiException) -> bool:
    """A 404 for the resource type itself, not for an object or namespace: a group the
    server no longer has answers "404 page not found", a resource of a group it still has
    "the server could not find the requested resource"."""
    body = str(exc.body or "")
    return exc.status == 404 and (
        "page not found" in body or "could not find the requested resource" in body
    )


def apply_if_changed(desired: Obj, *, live: Obj | None = None, fetch: bool = True) -> bool:
    """Server-side apply ``desired`` unless the live object already contains it.

    Returns True when a write was sent. Conflicts with other field managers are forced:
    gpuserve owns the fields it renders (drift is corrected), and only those.
    """
    meta = desired["metadata"]
    if live is None and fetch:
        live = get(desired["apiVersion"], desired["kind"], meta["name"], meta.get("namespace"))
    if live is not None and contains(live, desired):
        return False
    resource = _resource(desired["apiVersion"], desired["kind"])
    try:
        dynamic().server_side_apply(
            resource,
            body=desired,
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    except ApiException as exc:
        if namespace_terminating(exc):
            return False
        if _kind_gone(exc):
            # Its CRD was deleted after discovery saw it: forget what discovery cached.
            dynamic().resources.invalidate_cache()
            with _lock:
                _unserved[(desired["apiVersion"], desired["kind"])] = time.monotonic()
            raise KindNotServed(desired["apiVersion"], desired["kind"]) from exc
        raise
    WRITES[desired["kind"]] += 1
    return True


def delete_deployment(namespace: str, name: str) -> bool:
    """Delete a pool Deployment (its pods follow); False if it was already gone."""
    try:
        client.AppsV1Api(api_client()).delete_namespaced_deployment(
            name, namespace, propagation_policy="Background"
        )
    except ApiException as exc:
        if _target_gone(exc):
            return False
        raise
    WRITES["Deployment/delete"] += 1
    return True


def delete(api_version: str, kind: str, name: str, namespace: str) -> bool:
    """Delete a child the service no longer renders; False if it, or its whole kind (a
    CRD that was removed), is already gone."""
    try:
        _resource(api_version, kind).delete(name=name, namespace=namespace)
    except (NotFoundError, ResourceNotFoundError):
        return False
    except ApiException as exc:
        if _target_gone(exc):
            return False
        raise
    WRITES[f"{kind}/delete"] += 1
    return True


def patch_pod_metadata(
    namespace: str, name: str, *, labels: dict[str, str], annotations: dict[str, str]
) -> bool:
    """Patch a pod's labels and annotations; False if the pod is already gone (a shrinking
    ReplicaSet may delete it between the index snapshot and this call)."""
    body = {"metadata": {"labels": labels, "annotations": annotations}}
    try:
        client.CoreV1Api(api_client()).patch_namespaced_pod(
            name, namespace, body, field_manager=FIELD_MANAGER
        )
    except ApiException as exc:
        if _target_gone(exc):
            return False
        raise
    WRITES["Pod"] += 1
    return True


class StaleStatus(RuntimeError):
    """The object changed since it was read (HTTP 409): read it again, then decide again."""

    transient = True  # the reconcile queue retries it without a warning


def patch_status(
    *,
    plural: str,
    name: str,
    namespace: str | None,
    status: Obj,
    live_status: Obj,
    resource_version: str | None = None,
) -> bool:
    """Merge-patch status fields that differ from the live ones; True if written.

    With ``resource_version`` (that of the object ``live_status`` was read from) the
    API server refuses the patch if the object has changed since: two writers of status
    (the reconcile and the autoscaler) replace the conditions list whole, and one working
    from a stale copy would drop the other's conditions. Raises StaleStatus then."""
    changed = {k: v for k, v in status.items() if live_status.get(k) != v}
    if not changed:
        return False
    api = client.CustomObjectsApi(api_client())
    body: Obj = {"status": changed}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        # Without a field manager the client's User-Agent (OpenAPI-Generator/...) would
        # own these fields in managedFields.
        if namespace:
            api.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, body, field_manager=FIELD_MANAGER
            )
        else:
            api.patch_cluster_custom_object_status(
                GROUP, VERSION, plural, name, body, field_manager=FIELD_MANAGER
            )
    except ApiException as exc:
        if _target_gone(exc):  # gone meanwhile
            return False
        if exc.status == 409:
            raise StaleStatus(f"{plural} {namespace or ''}/{name} changed meanwhile") from None
        raise
    WRITES[f"{plural}/status"] += 1
    return True


def get_custom(plural: str, name: str, namespace: str | None) -> Obj | None:
    api = client.CustomObjectsApi(api_client())
    try:
        if namespace:
            found = api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        else:
            found = api.get_cluster_custom_object(GROUP, VERSION, plural, name)
        obj = cast(Obj, found)  # the client returns the decoded JSON object
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj
