#!/usr/bin/env bash
# Creates the kind variant of the local cluster (needs Docker and kind on PATH), gives its
# workers the simulated GPU identities, and prints how to run the e2e tests against it.
# Not exercised in this repository's CI: there is no Docker engine there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
kubeconfig="${KIND_KUBECONFIG:-$HOME/.cache/gpuserve/kind.kubeconfig}"
python="${PYTHON:-$repo/.venv/bin/python}"

mkdir -p "$(dirname "$kubeconfig")"
kind create cluster --config "$here/kind-config.yaml" --kubeconfig "$kubeconfig" --wait 180s
"$python" "$here/label_nodes.py" --kubeconfig "$kubeconfig"
echo
echo "export KUBECONFIG=$kubeconfig"
echo "GPUSERVE_E2E_KUBECONFIG=$kubeconfig $python -m pytest -m cluster e2e/test_cluster.py"
echo "delete with: kind delete cluster --name gpuserve"
