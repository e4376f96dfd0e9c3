"""Importing this module registers every kopf handler of the operator."""

from controllers import acceleratorclass, indexes, inferenceservice, startup

__all__ = ["acceleratorclass", "indexes", "inferenceservice", "startup"]
