"""bench/autoscaling.py's command line: a bad value is refused naming the flag (argparse's
exit 2, no traceback), with the bounds of the setup objects the flags build, and --help
shows every option's default."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpuserve.sim.comparing import Setup

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location(
        "autoscaling_bench", REPO / "bench/autoscaling.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["autoscaling_bench"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["autoscaling_bench"]


def _refused(capsys: pytest.CaptureFixture[str], run: object, argv: list[str]) -> str:
    assert callable(run)
    with pytest.raises(SystemExit) as exited:
        run(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert "Traceback" not in err
    return err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # A quantile where a percentile is asked for: PolicyConfig's [0.5, 1) in percent.
        (
            ["--percentile", "0.95"],
            "--percentile: a percentile in [50, 100), such as 95 or 99, not 0.95",
        ),
        (["--percentile", "100"], "--percentile: a percentile in [50, 100)"),
        (["--percentile", "nan"], "--percentile: must be finite"),
        (["--planning-percentile", "0", "0.99"], "--planning-percentile: 0 (the default) or"),
        (["--slo", "0"], "--slo: must be above 0, got 0"),
        (["--slo", "-2"], "--slo: must be above 0, got -2"),
        (["--compress", "0"], "--compress: must be above 0"),
        (["--compress", "nan"], "--compress: must be finite"),
        (["--compress", "inf"], "--compress: must be finite"),
        (["--seeds", "0"], "--seeds: must be at least 1, got 0"),
        (["--max-replicas", "0"], "--max-replicas: must be at least 1, got 0"),
        (["--max-batch", "0"], "--max-batch: must be at least 1, got 0"),
        (["--per-batch", "-0.1"], "--per-batch: must be at least 0, got -0.1"),
        (["--per-item", "-1"], "--per-item: must be at least 0, got -1"),
        (["--delay", "-0.02"], "--delay: must be at least 0, got -0.02"),
        (["--cost-per-hour", "-2"], "--cost-per-hour: must be at least 0, got -2"),
        (["--cold-start", "-1"], "--cold-start: must be at least 0, got -1"),
        (["--warm-start", "inf"], "--warm-start: must be finite"),
        (["--warm-pool", "0", "-1"], "--warm-pool: must be at least 0, got -1"),
        (["--oracle-window", "0"], "--oracle-window: must be above 0, got 0"),
        (["--scrape", "0"], "--scrape: must be above 0, got 0"),
        (["--target", "99"], "--target: a share in (0, 1], such as 0.99, not 99"),
        (["--slo", "2s"], "--slo: not a number: '2s'"),
        (
            ["--per-batch", "0", "--per-item", "0"],
            "--per-batch/--per-item: an execution must take some time",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_flag(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    line = _refused(capsys, bench.parse_args, argv)
    assert f": error: argument {said}" in line, line


def test_the_bounds_themselves_are_taken(bench: ModuleType) -> None:
    args = bench.parse_args(
        [
            *["--percentile", "50", "--planning-percentile", "0", "99.9", "--slo", "0.001"],
            *["--per-batch", "0", "--per-item", "0.1", "--delay", "0", "--max-batch", "1"],
            *["--max-replicas", "1", "--cost-per-hour", "0", "--cold-start", "0"],
            *["--warm-start", "0", "--warm-pool", "0", "--target", "1"],
        ]
    )
    assert (args.percentile, args.planning_percentile, args.max_batch) == (50.0, [0.0, 99.9], 1)
    assert args.target == 1.0 and args.per_batch == 0.0


def test_the_defaults_build_the_setup_the_suite_runs(bench: ModuleType) -> None:
    assert bench.setup_of(bench.parse_args([])) == Setup()


def _trace(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_a_missing_trace_is_refused_naming_the_flag_and_the_file(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.csv"
    line = _refused(capsys, bench.main, ["--trace", str(missing)])
    assert line.endswith(f"argument --trace: {missing}: No such file or directory"), line


def test_a_trace_that_is_a_folder_is_refused(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    line = _refused(capsys, bench.main, ["--trace", str(tmp_path)])
    assert f"argument --trace: {tmp_path}: " in line, line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("time,in,out\n0,1,1\n", "line 1: header: no column TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,ten,5\n", "line 3: ContextTokens"),
        ("", "no requests"),
    ],
)
def test_a_trace_in_the_wrong_format_is_refused_naming_the_file_and_line(
    bench: ModuleType,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    text: str,
    said: str,
) -> None:
    path = _trace(tmp_path, text)
    line = _refused(capsys, bench.main, ["--trace", str(path)])
    assert f"argument --trace: {path}: {said}" in line, line


def _help(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        bench.parse_args(["--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_shows_every_options_help_and_default(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = _help(bench, capsys)
    options = [a for a in bench.build_parser()._actions if a.default is not argparse.SUPPRESS]
    assert len(options) > 20
    for action in options:
        assert action.help, action.option_strings
        said = " ".join(action.help.split())
        if isinstance(action.default, float) and f"default {action.default:g}" in said:
            assert said in shown, said  # the replay flags state theirs already, once
            assert f"{said} (default:" not in shown
        else:
            assert f"{said} (default: {action.default})" in shown, action.option_strings


def test_help_names_the_defaults_and_the_trace_formats(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = _help(bench, capsys)
    assert "SLO latency, s (default: 2.0)" in shown
    assert "95 for p95 (default: 95.0)" in shown
    assert "time compression (default 5)" in shown
    assert "any trace in the Azure CSV format" in shown
