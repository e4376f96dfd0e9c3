"""bench/suite.py warms a generated workload up on a steady rate unless --history is given
(from 2026-11-28 until 2026-12-02 it ran the first two minutes of the history draw)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from gpuserve.sim.comparing import Setup, prepare
from gpuserve.sim.suite import SUITE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite_bench() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("suite_bench", REPO / "bench/suite.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["suite_bench"] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["suite_bench"]


def test_a_generated_workload_warms_up_on_the_steady_rate_without_history(
    suite_bench: ModuleType,
) -> None:
    bursty = next(w for w in SUITE if w.name == "bursty")
    setup = Setup()
    args = suite_bench.parse_args(["--workloads", "bursty"])
    prepared = suite_bench._prepared(setup, args, bursty, {}, 1.0, 1, "bursty-1x-seed1")
    steady = prepare(setup, bursty.build({}, 1.0, 1), 1, warmup_span=bursty.warmup_span(1.0))
    assert prepared.workload == steady.workload
    yesterday = bursty.yesterday({}, 1.0, 1)
    assert yesterday is not None
    after = bursty.build({}, 1.0, 1).after(yesterday, seconds=setup.warmup)
    assert prepared.workload != after
