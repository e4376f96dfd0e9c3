"""Demo model catalogue: ``demo://<name>`` models served by the real Triton in local tests."""

from e2e.models.catalog import (
    CATALOG_DIR,
    CatalogModel,
    load_catalog,
    resolve_demo_uri,
)
from e2e.models.configs import sleeper_config

__all__ = [
    "CATALOG_DIR",
    "CatalogModel",
    "load_catalog",
    "resolve_demo_uri",
    "sleeper_config",
]
