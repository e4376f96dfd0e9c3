"""The demo model catalogue (``catalog.yaml``) and the ``demo://`` storage scheme.

``demo://sleeper`` names the folder ``e2e/models/sleeper``; its ``model.py`` goes into the version
directory ``1/`` of a Triton model repository.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tritonclient.grpc import model_config_pb2 as pb

CATALOG_DIR = Path(__file__).resolve().parent
CATALOG_FILE = CATALOG_DIR / "catalog.yaml"
DEMO_SCHEME = "demo://"


@dataclass(frozen=True)
class CatalogModel:
    """A catalogue entry: where its files live and what its signature is."""

    name: str
    uri: str
    directory: Path
    backend: str
    max_batch_size: int
    # As config.pbtxt declares them: tritonclient's ModelConfig messages, compared by value.
    inputs: tuple[pb.ModelInput, ...]
    outputs: tuple[pb.ModelOutput, ...]
    parameters: dict[str, str] = field(default_factory=dict)
    description: str = ""
    decoupled: bool = False  # streams any number of responses per request

    @property
    def model_file(self) -> Path:
        """The backend file to place under the version directory (model.py for python)."""
        return self.directory / "model.py"

    @property
    def reference_config(self) -> Path:
        return self.directory / "config.pbtxt"


def _inputs(raw: list[dict[str, Any]]) -> tuple[pb.ModelInput, ...]:
    return tuple(
        pb.ModelInput(optional=bool(t.get("optional", False)), **_tensor(t)) for t in raw
    )


def _outputs(raw: list[dict[str, Any]]) -> tuple[pb.ModelOutput, ...]:
    return tuple(pb.ModelOutput(**_tensor(t)) for t in raw)


def _tensor(raw: dict[str, Any]) -> dict[str, Any]:
    """The fields inputs and outputs share: name, data type (by its config name), dims."""
    return {
        "name": str(raw["name"]),
        "data_type": pb.DataType.Value(str(raw["data_type"])),
        "dims": [int(d) for d in raw["dims"]],
    }


def load_catalog(path: Path = CATALOG_FILE) -> dict[str, CatalogModel]:
    """Parses catalog.yaml into ``{name: CatalogModel}``; raises ValueError on a bad entry."""
    data = yaml.safe_load(path.read_text()) or {}
    models: dict[str, CatalogModel] = {}
    for entry in data.get("models", []):
        directory = (path.parent / str(entry["path"])).resolve()
        if not directory.is_dir():
            raise ValueError(f"catalogue model {entry['name']!r}: missing folder {directory}")
        models[str(entry["name"])] = CatalogModel(
            name=str(entry["name"]),
            uri=str(entry["uri"]),
            directory=directory,
            backend=str(entry["backend"]),
            max_batch_size=int(entry.get("max_batch_size", 0)),
            inputs=_inputs(entry.get("inputs", [])),
            outputs=_outputs(entry.get("outputs", [])),
            parameters={str(k): str(v) for k, v in (entry.get("parameters") or {}).items()},
            description=str(entry.get("description", "")).strip(),
            decoupled=bool(entry.get("decoupled", False)),
        )
    return models


def resolve_demo_uri(uri: str) -> CatalogModel:
    """Maps ``demo://<name>`` to its catalogue entry; raises KeyError for unknown names."""
    if not uri.startswith(DEMO_SCHEME):
        raise ValueError(f"not a demo:// URI: {uri!r}")
    name = uri[len(DEMO_SCHEME) :].strip("/")
    catalog = load_catalog()
    if name not in catalog:
        raise KeyError(f"unknown demo model {name!r}; catalogue has {sorted(catalog)}")
    return catalog[name]
