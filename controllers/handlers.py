"""Importing this module registers every kopf handler of the operator."""

from controllers import (
    acceleratorclass,
    autoscaler,
    indexes,
    inferenceservice,
    login,
    periodic,
    startup,
)

__all__ = [
    "acceleratorclass",
    "autoscaler",
    "indexes",
    "inferenceservice",
    "login",
    "periodic",
    "startup",
]
