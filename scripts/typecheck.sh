#!/bin/sh
# mypy over the installed names (agora.*): the folders stay at the top level and install under
# `agora` (setup.py), so mypy reads them through a tree of links laid out as the installed package.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
tree="${TYPECHECK_TREE:-$root/build/typecheck}"  # TYPECHECK_TREE: another place (tests)
rm -rf "$tree" && mkdir -p "$tree/agora"
for f in "$root"/agora/*.py; do ln -s "$f" "$tree/agora/"; done
ln -s "$root/protos/agora/v1" "$tree/agora/v1"
for d in common master agent frameworks cli experiments; do ln -s "$root/$d" "$tree/agora/$d"; done
cd "$tree" && exec "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p agora
