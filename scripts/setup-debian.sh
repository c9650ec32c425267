#!/usr/bin/env bash
# Installs everything Pith needs to build and test on Debian 12 (run as root, or with sudo available).
# Build: gcc/clang, cmake, cJSON, PCRE2, libmicrohttpd, the image decoders (libjpeg-turbo, libpng, libwebp:
# docs/multimodal.md); the Vulkan backend's headers, loader and shader
# compiler (libvulkan-dev, glslc) and Mesa's lavapipe, which runs its shaders on the CPU (mesa-vulkan-drivers);
# Open MPI (libopenmpi-dev, openmpi-bin) for tensor parallelism and its tests (docs/distributed.md).
# Tests: torch + numpy + jinja2 + PIL (Debian's python3)
# as independent references, promtool, Chromium (the web page test, headless), and the npm packages
# named in package.json.
#
# --build-only: just what a Release build of `pith` needs (compiler, cmake, the libraries' headers, the
# Vulkan headers and glslc, git for the version string), none of the test tools: deploy/Dockerfile's
# build stage uses it. Without an option (what README.md and .ci/run use) everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=all
case "${1:-}" in
    "") ;;
    --build-only) MODE=build ;;
    -h|--help) echo "usage: scripts/setup-debian.sh [--build-only]"; exit 0 ;;
    *) echo "usage: scripts/setup-debian.sh [--build-only]" >&2; exit 2 ;;
esac
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# What building `pith` needs, in both modes.
BUILD_PKGS="build-essential cmake pkg-config git \
    libcjson-dev libpcre2-dev libmicrohttpd-dev libzmq3-dev libssl-dev libcurl4-openssl-dev \
    libjpeg-dev libpng-dev libwebp-dev \
    libvulkan-dev glslc"
$SUDO apt-get update -qq
if [ "$MODE" = build ]; then
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $BUILD_PKGS >/dev/null
    exit 0
fi
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $BUILD_PKGS \
    clang libclang-rt-14-dev mesa-vulkan-drivers libopenmpi-dev openmpi-bin \
    python3 python3-numpy python3-torch python3-jinja2 python3-sentencepiece python3-pil \
    python3-zmq python3-msgpack python3-yaml \
    prometheus chromium >/dev/null
# Node.js and npm: Debian's packages where the machine has none (some machines carry a Node.js build
# that bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
if [ -f package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error
else
    npm install --no-audit --no-fund --loglevel=error
fi
