"""Builds the pinned binaries once into a version-keyed cache outside the repository.

Layout: ``<cache>/bin/<component>-<version>/`` holding the executables and ``stamp.json``
(version, source fingerprint, build duration). A directory counts as built only when its
stamp matches, and builds go to a temporary directory renamed into place at the end, so an
interrupted build is never mistaken for a finished one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import settings
from e2e.cluster.progress import Progress

STAMP = "stamp.json"
BUILD_TIMEOUT_S = 3600.0  # a cold control-plane build on 2 cores takes ~15-25 min
HEARTBEAT_S = 60.0
CONTROLPLANE_LINKS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    executables: tuple[str, ...]
    ldflags: str = ""
    # Extra inputs that invalidate the cache when they change (our own Go module).
    source_files: tuple[Path, ...] = ()

    @property
    def directory(self) -> Path:
        return settings.bin_root() / f"{self.name}-{self.version}"

    def path(self, executable: str) -> Path:
        return self.directory / executable

    def fingerprint(self) -> str:
        digest = hashlib.sha256(f"{self.version}\0{self.ldflags}".encode())
        for source in self.source_files:
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
        return digest.hexdigest()[:16]

    def stamp(self) -> dict[str, object] | None:
        try:
            data = json.loads((self.directory / STAMP).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def is_built(self) -> bool:
        stamp = self.stamp()
        if stamp is None or stamp.get("fingerprint") != self.fingerprint():
            return False
        return all(os.access(self.path(exe), os.X_OK) for exe in self.executables)


# Strip symbols like the first manual build did; compile results stay in Go's build cache
# whatever -X values the link step gets.
LDFLAGS = "-s -w"


def _kubernetes_version_ldflags(version: str) -> str:
    """What Kubernetes' own build sets; unset, /version reports v0.0.0-master and tools
    that check the server version (kubectl skew warnings, Helm kubeVersion) misbehave."""
    major, minor = version.lstrip("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
              "gitTreeState": "clean", "gitCommit": ""}
    flags = [LDFLAGS]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{name}={value}" for name, value in values.items()]
    return " ".join(flags)


CONTROLPLANE = Component(
    name="controlplane",
    version=settings.KUBERNETES_VERSION,
    executables=("controlplane", *CONTROLPLANE_LINKS),
    ldflags=_kubernetes_version_ldflags(settings.KUBERNETES_VERSION),
    source_files=tuple(
        settings.CONTROLPLANE_MODULE / name for name in ("go.mod", "go.sum", "main.go")
    ),
)
KWOK = Component(name="kwok", version=settings.KWOK_VERSION, executables=("kwok",),
                 ldflags=LDFLAGS)
# Helm reads its version from a linker variable; without it `helm version` says v3.19.
HELM = Component(name="helm", version=settings.HELM_VERSION, executables=("helm",),
                 ldflags=f"{LDFLAGS} -X helm.sh/helm/v3/internal/version.version="
                         f"{settings.HELM_VERSION}")
ALL = (CONTROLPLANE, KWOK, HELM)
# What `up` needs; Helm is only built for later issues (charts).
RUNTIME = (CONTROLPLANE, KWOK)


def _go() -> str:
    go = shutil.which("go")
    if go is None and Path("/usr/local/go/bin/go").exists():
        go = "/usr/local/go/bin/go"  # the official tarball's place, often not on PATH
    if go is None:
        raise BuildError("the go command is not on PATH; install Go 1.24 or newer")
    return go


def go_command() -> str:
    """The go executable (for fetching modules other than the binaries' too)."""
    return _go()


def _go_version(go: str) -> str:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or "unknown"


BuildCommand = tuple[list[str], dict[str, str]]


def _build_commands(component: Component, go: str, target: Path) -> list[BuildCommand]:
    """The go invocations that put the component's executables into target."""
    env = dict(os.environ, GOBIN=str(target))
    ldflags = f"-ldflags={component.ldflags}"
    if component is CONTROLPLANE:
        argv = [go, "build", "-C", str(settings.CONTROLPLANE_MODULE), "-trimpath", ldflags,
                "-o", str(target / "controlplane"), "."]
        return [(argv, env)]
    if component is KWOK:
        return [([go, "install", "-trimpath", ldflags,
                  f"sigs.k8s.io/kwok/cmd/kwok@{component.version}"], env)]
    if component is HELM:
        return [([go, "install", "-trimpath", ldflags,
                  f"helm.sh/helm/v3/cmd/helm@{component.version}"], env)]
    raise BuildError(f"no build recipe for {component.name}")


def _run_bounded(argv: list[str], env: dict[str, str], log: Path, label: str,
                 progress: Progress, timeout: float) -> None:
    """Runs one build command, logging to a file and printing a heartbeat while it works."""
    start = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        # A temporary working directory keeps `go install pkg@v` away from any go.mod here.
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=log.parent, start_new_session=True)
        next_beat = start + HEARTBEAT_S
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if now - start > timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=30)
                    raise BuildError(f"{label}: gave up after {timeout:.0f} s (log: {log})")
                if now >= next_beat:
                    progress.step(f"  still building {label} ({now - start:.0f} s so far)")
                    next_beat += HEARTBEAT_S
                time.sleep(0.5)
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BuildError(f"{label}: go exited with {proc.returncode} (log: {log})\n{tail}")


def _finish_controlplane(target: Path) -> None:
    # One binary, four names: it dispatches on argv[0], and ps shows the right name.
    for link in CONTROLPLANE_LINKS:
        (target / link).symlink_to("controlplane")


def build_component(component: Component, progress: Progress,
                    timeout: float = BUILD_TIMEOUT_S, force: bool = False) -> bool:
    """Builds one component unless cached. Returns True when it actually built."""
    label = f"{component.name} {component.version}"
    if component.is_built() and not force:
        stamp = component.stamp() or {}
        progress.step(f"{label}: cached in {component.directory} "
                      f"(built in {stamp.get('build_seconds', '?')} s, reused)")
        return False
    go = _go()
    settings.build_log_dir().mkdir(parents=True, exist_ok=True)
    log = settings.build_log_dir() / f"{component.name}-{component.version}.log"
    log.write_text("")
    staging = component.directory.with_name(component.directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    progress.step(f"{label}: building (log: {log})")
    start = time.monotonic()
    try:
        for argv, env in _build_commands(component, go, staging):
            _run_bounded(argv, env, log, label, progress, timeout)
        if component is CONTROLPLANE:
            _finish_controlplane(staging)
        missing = [exe for exe in component.executables if not (staging / exe).exists()]
        if missing:
            raise BuildError(f"{label}: build finished but {missing} are missing (log: {log})")
        seconds = round(time.monotonic() - start, 1)
        stamp = {
            "component": component.name,
            "version": component.version,
            "fingerprint": component.fingerprint(),
            "go": _go_version(go),
            "build_seconds": seconds,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (staging / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        shutil.rmtree(component.directory, ignore_errors=True)
        staging.rename(component.directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress.step(f"{label}: built in {seconds} s -> {component.directory}")
    return True


def build_all(progress: Progress, components: tuple[Component, ...] = ALL,
              force: bool = False) -> None:
    for component in components:
        build_component(component, progress, force=force)


def missing_runtime() -> list[Component]:
    return [c for c in RUNTIME if not c.is_built()]


def require_runtime() -> None:
    """Fails fast with the command to run when `up` lacks binaries."""
    missing = missing_runtime()
    if missing:
        names = ", ".join(f"{c.name} {c.version}" for c in missing)
        raise BuildError(
            f"missing binaries: {names} (cache {settings.bin_root()}); "
            "run `python -m e2e.cluster build` (or `make cluster-build`) first"
        )


def build_timings() -> dict[str, float]:
    """Recorded build durations per component, for the benchmark."""
    timings: dict[str, float] = {}
    for component in ALL:
        stamp = component.stamp()
        if stamp and isinstance(stamp.get("build_seconds"), int | float):
            timings[f"{component.name} {component.version}"] = float(stamp["build_seconds"])  # type: ignore[arg-type]
    return timings

