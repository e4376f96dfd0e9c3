#!/usr/bin/env bash
# Installs what a clean machine lacks: the Python virtualenv with the project and its
# dev tools, and Debian's Prometheus for the local data plane. Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating virtualenv $VENV"
  python3 -m venv "$VENV"
fi
step "installing gpuserve and its dev dependencies (pip)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[dev]'
# The development harness (e2e/) is not part of the installed product; this virtualenv
# sees it through the checkout, so `python -m e2e.demo` and the tests work from anywhere.
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$PWD" > "$site/gpuserve-checkout.pth"

need_apt=()
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || need_apt+=(prometheus)
# Lua runs the Argo CD health check's tests.
command -v lua5.4 >/dev/null 2>&1 || need_apt+=(lua5.4)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    step "installing Debian packages: ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "warning: please install ${need_apt[*]} (Debian packages); tests that need them will fail" >&2
  fi
fi
step "bootstrap done"
