"""`gpuserve simulate` as a newcomer first meets it: the classes flag, what a missing class
or a misspelt kind says, ServiceTimes for a class not named, and the plot's pod axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from simulate_helpers import CLASSES, simulate, steady_trace

import cli.simulate
from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = ROOT / "examples" / "sleeper-interactive.yaml"


def _split_classes(tmp_path: Path) -> tuple[Path, Path]:
    """The example classes in two files: h100 alone, and the others."""
    docs = list(yaml.safe_load_all(CLASSES.read_text()))
    h100, rest = tmp_path / "h100.yaml", tmp_path / "rest.yaml"
    h100.write_text(yaml.safe_dump_all([d for d in docs if d["metadata"]["name"] == "h100"]))
    rest.write_text(yaml.safe_dump_all([d for d in docs if d["metadata"]["name"] != "h100"]))
    return h100, rest


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["simulate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_classes_repeated_or_listed_are_all_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second --classes added to the first; it used to replace it, and every class of the
    first file was then "not given"."""
    h100, rest = _split_classes(tmp_path)
    trace = str(steady_trace(tmp_path))
    for classes in (
        ["--classes", str(h100), "--classes", str(rest)],
        ["--classes", str(h100), str(rest)],
    ):
        code, out, err = _run(capsys, "-f", str(SLEEPER), *classes, "--trace", trace)
        assert code == 0, err
        assert "class h100:" in out and "class l4:" in out, out


def test_a_class_not_given_says_where_to_give_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "-f", str(SLEEPER), "--trace", str(steady_trace(tmp_path)))
    assert code == 1
    assert "'h100', 'a100-3g40gb', 'l4' not given" in err and "--classes FILE" in err, err


def test_a_misspelt_kind_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = yaml.safe_load(SLEEPER.read_text())
    body["kind"] = "InferenceSerivce"
    manifest = tmp_path / "svc.yaml"
    manifest.write_text(yaml.safe_dump(body))
    code, _, err = simulate(capsys, manifest, steady_trace(tmp_path))
    assert code == 1
    assert "no InferenceService found (kinds read: AcceleratorClass, InferenceSerivce)" in err, err


def test_the_pod_axis_of_a_constant_count_ticks_whole_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 req/s on one pod throughout: the axis once ran 0.945-1.05 in fractional ticks."""
    saved: list[Any] = []
    monkeypatch.setattr(cli.simulate, "_save", lambda fig, out: saved.append(fig))
    code, _, err = simulate(
        capsys, SLEEPER, steady_trace(tmp_path), "--plot", str(tmp_path / "p.png")
    )
    assert code == 0, err
    (fig,) = saved
    pods = fig.axes[1]
    counts = {float(y) for y in pods.lines[0].get_ydata()}
    assert counts == {1.0}, counts  # one pod all along: the case of the fractional axis
    bottom, top = pods.get_ylim()
    ticks = [t for t in pods.get_yticks() if bottom <= t <= top]
    assert bottom == 0 and top >= 2, (bottom, top)
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_service_times_for_a_class_the_service_does_not_name_are_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = tmp_path / "times.yaml"
    times.write_text(
        yaml.safe_dump(
            {
                "kind": "ServiceTimes",
                "timePerBatch": "5ms",
                "timePerItem": "0.2ms",
                "classes": {"l44": {"jitter": 0.1}, "l4": {"jitter": 0.1}},
            }
        )
    )
    code, out, err = simulate(capsys, SLEEPER, steady_trace(tmp_path), "--times", str(times))
    assert code == 0, err
    assert "note: ServiceTimes classes.l44: sleeper-chat names no such class" in out, out
    assert "classes.l4:" not in out
