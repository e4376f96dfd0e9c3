"""Third-party CRDs the local cluster serves: the Gateway API Inference Extension's
InferencePool (GA, inference.networking.k8s.io/v1), which gpuserve renders for LLM
services. With it installed, the real API server validates the pools the operator applies.

`build` takes the CRD YAML from the extension's Go module (the Go module proxy, like the
binaries' sources) at the pinned version and keeps it in the cache; `up` installs it.
Layout: ``<cache>/crds/<module>-<version>/`` holding the YAML files and ``stamp.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import binaries, settings
from e2e.cluster.apiclient import ApiClient, ApiError
from e2e.cluster.progress import Progress

MODULE = "sigs.k8s.io/gateway-api-inference-extension"
NAME = "gateway-api-inference-extension"
# Only the GA pool: the x-k8s.io alpha kinds are not rendered by gpuserve.
FILES = ("config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",)
DOWNLOAD_TIMEOUT_S = 300.0
ESTABLISHED_TIMEOUT_S = 30.0
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class CrdError(RuntimeError):
    pass


def directory() -> Path:
    return settings.cache_dir() / "crds" / f"{NAME}-{settings.INFERENCE_EXTENSION_VERSION}"


def paths() -> list[Path]:
    return [directory() / Path(f).name for f in FILES]


def is_fetched() -> bool:
    try:
        stamp = json.loads((directory() / binaries.STAMP).read_text())
    except (OSError, ValueError):
        return False
    return (
        isinstance(stamp, dict)
        and stamp.get("version") == settings.INFERENCE_EXTENSION_VERSION
        and all(p.is_file() for p in paths())
    )


def _module_dir() -> Path:
    """Downloads the module (or finds it in Go's module cache) and returns its directory."""
    go = binaries.go_command()
    # Outside any go.mod, so the download is of the module alone.
    with tempfile.TemporaryDirectory() as empty:
        out = subprocess.run(
            [go, "mod", "download", "-json", f"{MODULE}@{settings.INFERENCE_EXTENSION_VERSION}"],
            cwd=empty,
            capture_output=True,
            text=True,
            timeout=DOWNLOAD_TIMEOUT_S,
            env=dict(os.environ),
            check=False,
        )
    try:
        info = json.loads(out.stdout)
    except ValueError:
        info = {}
    if out.returncode != 0 or not info.get("Dir"):
        raise CrdError(f"go mod download {MODULE}: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def _check(document: Any, source: str) -> None:
    if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
        raise CrdError(f"{source} is not a CustomResourceDefinition")


def fetch(progress: Progress, force: bool = False) -> bool:
    """Caches the CRD YAML unless cached already. Returns True when it fetched."""
    label = f"{NAME} {settings.INFERENCE_EXTENSION_VERSION} CRDs"
    if is_fetched() and not force:
        progress.step(f"{label}: cached in {directory()}")
        return False
    source = _module_dir()
    staging = directory().with_name(directory().name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for relative in FILES:
            text = (source / relative).read_text()
            _check(yaml.safe_load(text), relative)
            (staging / Path(relative).name).write_text(text)
        stamp = {
            "module": MODULE,
            "version": settings.INFERENCE_EXTENSION_VERSION,
            "files": list(FILES),
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / binaries.STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        shutil.rmtree(directory(), ignore_errors=True)
        staging.rename(directory())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress.step(f"{label}: cached in {directory()}")
    return True


def require() -> None:
    if not is_fetched():
        raise CrdError(
            f"{NAME} {settings.INFERENCE_EXTENSION_VERSION} CRDs are not cached "
            f"({directory()}); run `python -m e2e.cluster build` (or `make cluster-build`) first"
        )


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths():
        document = yaml.safe_load(path.read_text())
        _check(document, str(path))
        docs.append(document)
    return docs


def _established(api: ApiClient, name: str) -> bool:
    try:
        crd = api.get(f"{CRD_PATH}/{name}")
    except ApiError:
        return False
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def install(api: ApiClient, progress: Progress) -> None:
    """Creates the CRDs (a fresh cluster has none; one already there is left as it is)
    and waits until the API server serves them."""
    names = []
    for document in documents():
        name = document["metadata"]["name"]
        try:
            api.post(CRD_PATH, document)
        except ApiError as exc:
            if exc.status != 409:
                raise CrdError(f"creating CRD {name} failed: {exc}") from None
        names.append(name)
    deadline = time.monotonic() + ESTABLISHED_TIMEOUT_S
    while not all(_established(api, n) for n in names):
        if time.monotonic() > deadline:
            raise CrdError(f"CRDs {names} not established after {ESTABLISHED_TIMEOUT_S:.0f} s")
        time.sleep(0.2)
    progress.step(
        f"{NAME} {settings.INFERENCE_EXTENSION_VERSION} CRDs established: " + ", ".join(names)
    )
