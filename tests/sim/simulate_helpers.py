"""Running `gpuserve simulate` in-process for the CLI tests, with the example classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CLASSES = ROOT / "examples" / "accelerator-classes.yaml"


def simulate(
    capsys: pytest.CaptureFixture[str], service: Path, trace: Path, *extra: str
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `gpuserve simulate` on ``service`` and ``trace``."""
    code = main(
        ["simulate", "-f", str(service), "--classes", str(CLASSES), "--trace", str(trace), *extra]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err
