"""Locates the tritonserver shipped in the nvidia-pytriton wheel and prepares it to run on CPU.

The wheel carries the binary, the Python backend and one backend stub per Python version. Triton
looks for the stub only inside ``<backend-directory>/python/``, so that directory is assembled
in a cache (``$GPUSERVE_CACHE`` or ``~/.cache/gpuserve``) from the wheel's files.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

WHEEL_HINT = (
    "the nvidia-pytriton wheel is not installed in this interpreter "
    f"({sys.executable}); install it with: {sys.executable} -m pip install nvidia-pytriton==0.7.0"
)


class TritonNotInstalledError(RuntimeError):
    """The pytriton wheel (or a part of it Triton needs) is missing."""


@dataclass(frozen=True)
class TritonInstall:
    """Everything needed to launch the wheel's tritonserver."""

    binary: Path
    backend_dir: Path  # pass as --backend-directory; holds python/
    libs_dir: Path  # nvidia_pytriton.libs
    env: dict[str, str]  # full environment for the server process


def cache_dir() -> Path:
    """The project's cache root: ``$GPUSERVE_CACHE`` or ``~/.cache/gpuserve``."""
    configured = os.environ.get("GPUSERVE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gpuserve"


def _wheel_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonNotInstalledError(WHEEL_HINT)
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise TritonNotInstalledError(f"{WHEEL_HINT} (no tritonserver under {root})")
    return root


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _assemble_backend_dir(wheel_root: Path, target: Path) -> Path:
    """Copies the Python backend and this interpreter's stub into ``target/python``."""
    src = wheel_root / "backends" / "python"
    stub = wheel_root / "python_backend_stubs" / _python_version() / "triton_python_backend_stub"
    wanted = {
        "libtriton_python.so": src / "libtriton_python.so",
        "triton_python_backend_utils.py": src / "triton_python_backend_utils.py",
        "triton_python_backend_stub": stub,
    }
    for name, path in wanted.items():
        if not path.is_file():
            raise TritonNotInstalledError(f"pytriton wheel lacks {name} ({path})")
    python_dir = target / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name, path in wanted.items():
        dest = python_dir / name
        # copy2 keeps mtimes, so equal size+mtime means the same file (the stub differs per
        # Python version). Write via a temp name so a concurrent run never sees half a stub.
        if dest.exists():
            s, d = path.stat(), dest.stat()
            if s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime):
                continue
        tmp = dest.with_name(f".{name}.{os.getpid()}.tmp")
        shutil.copy2(path, tmp)
        os.replace(tmp, dest)
    return target


def triton_environment(libs_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver and its Python stubs.

    - LD_LIBRARY_PATH: the wheel's bundled libraries (the copied stub loses its relative rpath)
      and this interpreter's LIBDIR (else the stub may load the system libpython against our
      standard library).
    - PATH: this interpreter's bin first, because the stub finds site-packages through the first
      ``python3`` on PATH.
    """
    env = dict(os.environ if base is None else base)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    lib_parts = [str(libs_dir)] + ([libdir] if libdir else [])
    if env.get("LD_LIBRARY_PATH"):
        lib_parts.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(lib_parts)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "/usr/bin:/bin")])
    return env


@functools.lru_cache(maxsize=1)
def find_triton() -> TritonInstall:
    """Finds the wheel's tritonserver and assembles the backend directory (cached per process).

    Raises TritonNotInstalledError with an install hint when the wheel is missing.
    """
    root = _wheel_root()
    libs_dir = root.parent.parent / "nvidia_pytriton.libs"
    if not libs_dir.is_dir():
        raise TritonNotInstalledError(f"pytriton wheel lacks its libraries folder {libs_dir}")
    backend_dir = _assemble_backend_dir(root, cache_dir() / "triton-backends")
    return TritonInstall(
        binary=root / "bin" / "tritonserver",
        backend_dir=backend_dir,
        libs_dir=libs_dir,
        env=triton_environment(libs_dir),
    )


def triton_available() -> bool:
    """True when the wheel's tritonserver can be prepared (for pytest skip conditions)."""
    try:
        find_triton()
    except TritonNotInstalledError:
        return False
    return True
