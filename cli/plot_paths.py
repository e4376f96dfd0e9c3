"""Where `gpuserve simulate --plot` writes: checked before any simulation runs, so a
mistyped folder costs no wait, and the path printed is the file written."""

from __future__ import annotations

from pathlib import Path

from cli.errors import SimulateError

FORMATS = (".png", ".svg", ".pdf")


def plot_target(path: Path) -> Path:
    """``path`` with ``.png`` added when it has no suffix (matplotlib would add it without
    saying so); an error naming the flag for a folder given as the file, a folder that does
    not exist or a format not written."""
    if path.is_dir():
        raise SimulateError(
            f"--plot {path}: a folder; give a file in it (e.g. {path / 'plot.png'})"
        )
    target = path if path.suffix else path.with_suffix(".png")
    if target.suffix.lower() not in FORMATS:
        raise SimulateError(
            f"--plot {path}: {target.suffix} is not a format written (one of {', '.join(FORMATS)})"
        )
    if not target.parent.is_dir():
        raise SimulateError(
            f"--plot {path}: No such file or directory (the folder {target.parent} does not exist)"
        )
    return target
