"""Errors the CLI reports as one clear line and a non-zero exit."""


class CLIError(Exception):
    """A user-facing failure; the message says what and where."""


class SimulateError(CLIError):
    """Bad input to `gpuserve simulate`."""
