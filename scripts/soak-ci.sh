#!/usr/bin/env bash
# CI soak: SOAK_SECONDS (default 120) of tools/soak.py's mixed load against the ASan + UBSan build of
# `pith serve` (build-asan/pith, brought up to date with `make asan`). Fails unless no request is lost,
# the server is idle afterwards by /metrics, RSS stays flat after the warm-up, it exits 0 after SIGTERM
# and LeakSanitizer reports nothing. The report goes to build-asan/soak.json; extra arguments are passed
# to tools/soak.py (see tools/soak.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
make asan >/dev/null
exec python3 tools/soak.py --pith build-asan/pith --duration "${SOAK_SECONDS:-120}" --json build-asan/soak.json "$@"
