"""The benches' cache folder follows the code: a change to any source file a cached value
may depend on moves it, so a rerun never reads results another tree computed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pickle_cache", REPO / "bench/pickle_cache.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path) -> Path:
    for rel, text in {
        "gpuserve/sim/engine.py": "RATE = 1\n",
        "bench/suite.py": "print('table')\n",
        "traces/trace.csv": "t,n\n0,1\n",
        "docs/notes.md": "figures\n",
        "traces/README.md": "where the trace comes from\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_folder_moves_when_the_package_a_bench_or_a_trace_changes(tmp_path: Path) -> None:
    cache = _module()
    repo = _tree(tmp_path / "repo")
    first = cache.code_scoped(tmp_path / "cache", repo)
    assert first == cache.code_scoped(tmp_path / "cache", repo)
    seen = {first}
    for rel, text in [
        ("gpuserve/sim/engine.py", "RATE = 2\n"),
        ("bench/suite.py", "print('other table')\n"),
        ("traces/trace.csv", "t,n\n0,2\n"),
        ("gpuserve/sim/new_rule.py", "\n"),
    ]:
        (repo / rel).write_text(text)
        folder = cache.code_scoped(tmp_path / "cache", repo)
        assert folder not in seen, rel
        seen.add(folder)


def test_docs_and_compiled_files_leave_the_folder_where_it_is(tmp_path: Path) -> None:
    cache = _module()
    repo = _tree(tmp_path / "repo")
    before = cache.code_digest(repo)
    (repo / "docs/notes.md").write_text("other figures\n")
    (repo / "traces/README.md").write_text("its licence, spelled out\n")
    (repo / "gpuserve/sim/__pycache__").mkdir()
    (repo / "gpuserve/sim/__pycache__/engine.cpython-311.pyc").write_bytes(b"\x00")
    assert cache.code_digest(repo) == before
    assert cache.code_scoped(None, repo) is None


def test_a_value_is_computed_once_and_read_back(tmp_path: Path) -> None:
    cache = _module()
    calls: list[int] = []

    def compute() -> dict[str, int]:
        calls.append(1)
        return {"replicas": 3}

    path = tmp_path / "scoped" / "row.pickle"
    assert cache.pickled(path, compute) == {"replicas": 3}
    assert cache.pickled(path, compute) == {"replicas": 3}
    assert len(calls) == 1
    assert cache.pickled(None, compute) == {"replicas": 3}
    assert len(calls) == 2
