"""kopf's watch of a kind the API server does not serve, against the real API server:
with gpuserve's patch (controllers/kopf_vanished_kinds.py) the watch waits and lists the
kind once its CRD exists; kopf as installed fails at the first 404.

This is the state a watcher is in between a CRD's deletion and kopf's observer seeing it
(e2e/test_lifecycle_edges.py meets it by chance); here it is made on purpose, with a kind
of the test's own."""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import kopf
import kubernetes.config
import pytest
import yaml
from kopf._cogs.clients import auth, errors, watching
from kopf._cogs.structs import credentials, references

from controllers import kopf_vanished_kinds
from e2e.cluster.testkit import ClusterHandle

pytestmark = pytest.mark.cluster

GROUP = "vanishing.e2e.gpuserve.io"


@pytest.fixture
def kind(cluster: ClusterHandle) -> Iterator[references.Resource]:
    """A cluster-scoped kind of this test's own, whose CRD does not exist yet."""
    plural = f"widgets{secrets.token_hex(3)}"
    yield references.Resource(group=GROUP, version="v1", plural=plural, namespaced=False)
    cluster.kubectl("delete", "crd", f"{plural}.{GROUP}", "--ignore-not-found", "--wait=false")


def crd(resource: references.Resource) -> dict[str, Any]:
    singular = resource.plural[:-1]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{resource.plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": resource.plural, "singular": singular,
                      "kind": singular.capitalize()},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}],
        },
    }


async def watch_into(seen: list[Any], resource: references.Resource) -> None:
    """kopf's own infinite watch of ``resource``, with kopf's login from the kubeconfig."""
    settings = kopf.OperatorSettings()
    info = kopf.login_via_client(logger=logging.getLogger("e2e"), settings=settings)
    assert info is not None
    vault = credentials.Vault()
    await vault.populate({"e2e": info})
    auth.vault_var.set(vault)
    async for event in watching.infinite_watch(
        settings=settings, resource=resource, namespace=None
    ):
        seen.append(event)


@pytest.fixture
def kubeconfig(cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's login reads the default kubeconfig, whose path the client fixed at import:
    point it at the test cluster's."""
    monkeypatch.setattr(kubernetes.config, "load_kube_config", functools.partial(
        kubernetes.config.load_kube_config, config_file=str(cluster.kubeconfig)))


def test_a_kind_not_yet_served_is_watched_once_its_crd_exists(
    cluster: ClusterHandle, kind: references.Resource, kubeconfig: None,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(watching, "continuous_watch", watching.continuous_watch)
    monkeypatch.setattr(kopf_vanished_kinds, "NOT_SERVED_PAUSE_S", 0.5)
    monkeypatch.setattr(kopf_vanished_kinds, "WARN_EVERY_S", 0.0)  # a warning per pause
    monkeypatch.setattr(kopf_vanished_kinds, "_warned_at", {})
    assert kopf_vanished_kinds.install()  # undone by monkeypatch at the end
    seen: list[Any] = []

    async def scenario() -> None:
        task = asyncio.create_task(watch_into(seen, kind))
        try:
            await asyncio.sleep(3)  # several 404s: each must pause the stream, not end it
            assert not task.done(), task
            assert seen == []
            await asyncio.to_thread(cluster.kubectl, "apply", "-f", "-",
                                    stdin=yaml.safe_dump(crd(kind)))
            for _ in range(300):  # until the kind is served and listed, at most 30 s
                if watching.Bookmark.LISTED in seen:
                    break
                assert not task.done(), task
                await asyncio.sleep(0.1)
            assert watching.Bookmark.LISTED in seen
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING, logger=kopf_vanished_kinds.__name__):
        asyncio.run(scenario())
    pauses = [r for r in caplog.records if "is not served" in r.getMessage()]
    assert len(pauses) >= 2, [r.getMessage() for r in caplog.records]
    assert kind.plural in pauses[0].getMessage()


def test_kopf_as_installed_fails_its_watch_at_the_first_404(
    cluster: ClusterHandle, kind: references.Resource, kubeconfig: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the patch changes, on the same API server."""
    monkeypatch.setattr(watching, "continuous_watch", kopf_vanished_kinds.KOPF_CONTINUOUS_WATCH)
    seen: list[Any] = []
    with pytest.raises(errors.APINotFoundError):
        asyncio.run(asyncio.wait_for(watch_into(seen, kind), timeout=30))
    assert seen == []
