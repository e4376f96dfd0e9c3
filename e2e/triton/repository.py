"""Writes Triton model repositories: ``<repo>/<name>/config.pbtxt`` + ``<repo>/<name>/1/...``."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from e2e.models.catalog import resolve_demo_uri


def write_model(
    repository: Path,
    name: str,
    config_pbtxt: str,
    *,
    files: Mapping[str, bytes] | None = None,
    source: str | None = "demo://sleeper",
    version: int = 1,
) -> Path:
    """Creates one model directory and returns it.

    ``files`` maps paths relative to the model directory (e.g. ``"1/model.py"``) to contents.
    Unless ``files`` already provides ``<version>/model.py``, the catalogue model named by
    ``source`` (a ``demo://`` URI) is copied there; ``source=None`` copies nothing.
    """
    model_dir = Path(repository) / name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(config_pbtxt)
    for relative, content in (files or {}).items():
        target = (model_dir / relative).resolve()
        if model_dir.resolve() not in target.parents:
            raise ValueError(f"file {relative!r} would land outside the model directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    if source is not None and not (version_dir / "model.py").exists():
        shutil.copy(resolve_demo_uri(source).model_file, version_dir / "model.py")
    return model_dir
