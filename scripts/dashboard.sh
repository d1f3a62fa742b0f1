#!/usr/bin/env bash
# make dashboard: charts the /metrics samples of a demo run as a PNG.
#   scripts/dashboard.sh SAMPLES.jsonl OUT.png
# Python packages (matplotlib, prometheus-client) go to a virtualenv in the kubesync cache,
# installed from PyPI on first use.
set -euo pipefail
samples=${1:?samples (JSON lines from KUBESYNC_DEMO_METRICS)}
out=${2:?output PNG}
cache=${KUBESYNC_CACHE_DIR:-$HOME/.cache/kubesync}
venv="$cache/dashboard-venv"
requirements="$(dirname "$0")/dashboard-requirements.txt"
if ! cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null; then
  echo "dashboard: installing $(tr '\n' ' ' < "$requirements")into $venv"
  if ! python3 -m venv --help >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
fi
mkdir -p "$(dirname "$out")"
"$venv/bin/python" "$(dirname "$0")/dashboard.py" "$samples" "$out"
