#!/usr/bin/env bash
# Builds deploy/Dockerfile and checks the container it makes: Docker's HEALTHCHECK reports healthy,
# /health and /health/live answer 200, a completion comes back, the process runs as a non-root user, and
# `docker stop` drains it to exit status 0.
#
# Needs a Docker daemon, the debian:bookworm-slim image (pulled, or already present), and Debian's
# package mirror for apt in both stages; a build takes a few minutes on 2 cores. Not part of ctest or
# .ci/run, whose machines have no Docker daemon (docs/deploy.md, What was tested). Exits 77 when no
# daemon answers.
#
#     scripts/docker-smoke.sh [IMAGE_TAG]        # default tag pith:smoke
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-pith:smoke}
if ! docker info >/dev/null 2>&1; then
    echo "docker-smoke: skipped: no Docker daemon answers (docker info failed)" >&2
    exit 77
fi
docker build -f deploy/Dockerfile -t "$TAG" .
NAME=pith-smoke-$$
trap 'docker rm -f "$NAME" >/dev/null 2>&1 || true' EXIT
docker run -d --name "$NAME" -p 127.0.0.1::8080 "$TAG" -t 2 >/dev/null
PORT=$(docker port "$NAME" 8080/tcp | head -n1 | sed 's/.*://')
fail() { echo "docker-smoke: FAILED: $*" >&2; docker logs "$NAME" >&2 || true; exit 1; }

# The HEALTHCHECK runs every 10 s: healthy within a minute, or the check (or the image) is wrong.
status=starting
for _ in $(seq 1 60); do
    [ "$(docker inspect -f '{{.State.Running}}' "$NAME")" = true ] || fail "the container exited"
    status=$(docker inspect -f '{{.State.Health.Status}}' "$NAME")
    [ "$status" = healthy ] && break
    sleep 1
done
[ "$status" = healthy ] || fail "health status '$status' after 60 s"
curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null || fail "GET /health"
curl -fsS "http://127.0.0.1:$PORT/health/live" >/dev/null || fail "GET /health/live"
out=$(curl -fsS "http://127.0.0.1:$PORT/v1/completions" -H 'content-type: application/json' \
      -d '{"prompt": "And God said", "max_tokens": 8, "temperature": 0}') || fail "POST /v1/completions"
echo "$out" | grep -q '"text"' || fail "completion without text: $out"
uid=$(docker exec "$NAME" id -u)
[ "$uid" != 0 ] || fail "the server runs as root"
docker stop -t 40 "$NAME" >/dev/null
code=$(docker inspect -f '{{.State.ExitCode}}' "$NAME")
[ "$code" = 0 ] || fail "exit status $code after docker stop (a drain exits 0)"
docker logs "$NAME" 2>&1 | grep -q "SIGTERM: draining" || fail "no drain in the log"
echo "docker-smoke: ok ($TAG: healthy, /health and /health/live 200, completion, uid $uid, drained to exit 0)"
