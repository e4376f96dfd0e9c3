"""Importing this module registers every kopf handler of the operator."""

from controllers import acceleratorclass, autoscaler, indexes, inferenceservice, startup

__all__ = ["acceleratorclass", "autoscaler", "indexes", "inferenceservice", "startup"]
