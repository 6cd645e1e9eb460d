#!/usr/bin/env bash
# Build compose-lint (a Compose file checker on compose-go, the loader `docker compose` uses)
# and print the path of the binary. Cached under ~/.cache/dlc-airflow/compose-lint/<hash of
# the sources>/, so only the first call builds (about a minute); the Go module proxy
# supplies compose-go as pinned in go.mod/go.sum.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${DLC_AIRFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dlc-airflow}/compose-lint"

go_bin="$(command -v go || true)"
if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
  go_bin=/usr/local/go/bin/go
fi
if [[ -z "$go_bin" ]]; then
  echo "compose-lint: no Go toolchain (go) on PATH or in /usr/local/go/bin; install Go >= 1.24" >&2
  exit 1
fi

hash="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" | sha256sum | cut -c1-16)"
out="$cache/$hash/compose-lint"
if [[ ! -x "$out" ]]; then
  mkdir -p "$cache/$hash"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
     "$go_bin" build -trimpath -o "$out.tmp.$$" .) >&2
  mv -f "$out.tmp.$$" "$out"  # atomic: a concurrent caller never runs half a binary
fi
echo "$out"
