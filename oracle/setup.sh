#!/usr/bin/env bash
# Sets up vLLM's own KV-cache planner on this CPU machine: one venv for every release, and each release's Python files.
# Idempotent: what is already there is kept.
#
#   bash oracle/setup.sh                 # every release plan models (0.19.0 ... 0.33.0)
#   bash oracle/setup.sh 0.33.0 0.30.0   # only these
#
# Where: $DSA_KVCALC_ORACLE_HOME (default ~/.cache/dsa-kvcalc-oracle): venv/ and releases/X.Y.Z/vllm. A release's files
# come from a git repository of released sources when one has its tag (each release's wheel, its Python and JSON files
# only, committed and tagged vX.Y.Z; $VLLM_RELEASES_REPO, else ~/.cache/vllm-releases), else from its wheel on the
# package index
# (pip download, about 400 MB while it is unpacked). Each release gets a dist-info naming it X.Y.Z+cpu: 0.19.0-0.27.1
# pick the CPU platform only from the installed distribution's version (vllm/platforms/__init__.py
# cpu_platform_plugin); VLLM_TARGET_DEVICE=cpu counts from 0.28.0.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
home=${DSA_KVCALC_ORACLE_HOME:-$HOME/.cache/dsa-kvcalc-oracle}
py=${PYTHON:-python3}
t0=$(date +%s)
mkdir -p "$home/releases"

venv="$home/venv"
want=$(sha256sum "$here/requirements.txt" | cut -c1-16)
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/pip" install -q -r "$here/requirements.txt" 2>&1 | { grep -v "^WARNING: Location" || true; }
  "$venv/bin/python" -c "import torch, transformers, pydantic, gguf, diskcache"
  echo "$want" > "$venv/.installed"
  echo "venv: installed in $(( $(date +%s) - t0 )) s"
else
  echo "venv: up to date"
fi

releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(0.19.0 0.19.1 0.20.0 0.20.1 0.20.2 0.21.0 0.22.0 0.22.1 0.23.0 0.24.0 0.25.0 0.25.1
                                     0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0 0.31.0 0.32.0 0.33.0)
repo=""
if [ -n "${VLLM_RELEASES_REPO+set}" ]; then candidates=("$VLLM_RELEASES_REPO")  # set, even empty: only it (empty: wheels)
else candidates=("$HOME/.cache/vllm-releases"); fi
for candidate in "${candidates[@]}"; do
  [ -n "$candidate" ] && [ -d "$candidate/.git" ] && { repo=$candidate; break; }
done

unpack() {  # release, folder: the release's vllm/*.py and *.json into folder/vllm
  if [ -n "$repo" ] && git -C "$repo" rev-parse -q --verify "refs/tags/v$1" >/dev/null; then
    git -C "$repo" archive "v$1" vllm | tar -x -C "$2"
    echo "v$1 (git $repo)"
  else
    local wheels; wheels=$(mktemp -d)
    "$venv/bin/pip" download -q --no-deps -d "$wheels" "vllm==$1" 2>&1 | { grep -v "^WARNING: Location" || true; }
    unzip -q "$wheels"/vllm-"$1"-*.whl 'vllm/*.py' 'vllm/*.json' -d "$2"
    rm -rf "$wheels"
    echo "v$1 (wheel)"
  fi
}

for v in "${releases[@]}"; do
  dir="$home/releases/$v"
  [ -f "$dir/.ready" ] && continue
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/vllm-$v+cpu.dist-info"
  unpack "$v" "$dir.tmp"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$v" > "$dir.tmp/vllm-$v+cpu.dist-info/METADATA"
  : > "$dir.tmp/vllm-$v+cpu.dist-info/RECORD"
  # compiled once here: the first import would otherwise write ~2,000 .pyc files
  "$venv/bin/python" -m compileall -q -j 0 "$dir.tmp/vllm" > /dev/null || true
  touch "$dir.tmp/.ready"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
done
echo "releases: ${releases[*]} under $home/releases; setup took $(( $(date +%s) - t0 )) s"
