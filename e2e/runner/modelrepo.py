"""A pod's model repository on local disk: its rendered config.pbtxt, run on CPU.

The one change to the operator's config is the instance kind: ``KIND_GPU`` -> ``KIND_CPU``
(and a ``gpus`` list, if any, dropped), because this Triton has no GPU. Batching, queue
policy, priorities, instance counts, I/O and parameters are served exactly as rendered.
A non-Python model (``format: onnx`` or ``vllm`` with a ``demo://`` URI) is additionally
switched to the Python backend so the catalogue model can stand in; those changes are returned
too. The catalogue entry is passed along because a rendered vLLM config leaves its inputs and
outputs to the backend: the stand-in's (e.g. the LLM emulator's) are declared in their place.
"""

from __future__ import annotations

from pathlib import Path

from e2e.models import CatalogModel, resolve_demo_uri
from e2e.triton import emulate_on_python_backend, write_model
from e2e.triton.validate import instance_groups_on_cpu


def cpu_config(config_pbtxt: str, stand_in: CatalogModel | None = None) -> tuple[str, list[str]]:
    """(config text for this CPU-only Triton, list of changes made). ``stand_in`` is the
    catalogue model that serves a non-Python config."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig()
    text_format.Parse(config_pbtxt, config)  # a bad config fails here, naming line:column
    if config.backend != "python" or config.platform:
        return emulate_on_python_backend(config_pbtxt, stand_in)
    changes = instance_groups_on_cpu(config)
    return text_format.MessageToString(config), changes


def write_pod_repository(
    root: Path, *, model_name: str, version: str, config_pbtxt: str, storage_uri: str
) -> tuple[Path, list[str]]:
    """Lays out ``root/<model>/config.pbtxt`` + ``root/<model>/<version>/model.py`` from the
    ``demo://`` catalogue; returns (repository root, changes made to the config)."""
    if not storage_uri.startswith("demo://"):
        raise ValueError(f"the local runner serves demo:// models only, not {storage_uri!r}")
    stand_in = resolve_demo_uri(storage_uri)  # unknown names fail here, catalogue listed
    text, changes = cpu_config(config_pbtxt, stand_in)
    if not version.isdigit():
        raise ValueError(f"version directory {version!r} is not a number")
    write_model(root, model_name, text, source=storage_uri, version=int(version))
    return root, changes
