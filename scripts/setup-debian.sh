#!/usr/bin/env bash
# Installs everything Pith needs to build and test on Debian 12 (run as root, or with sudo available).
# Build: gcc/clang, cmake, cJSON, PCRE2, libmicrohttpd; the Vulkan backend's headers, loader and shader
# compiler (libvulkan-dev, glslc) and Mesa's lavapipe, which runs its shaders on the CPU (mesa-vulkan-drivers).
# Tests: torch + numpy + jinja2 (Debian's python3)
# as independent references, promtool, Chromium (the web page test, headless), and the npm packages
# named in package.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config clang libclang-rt-14-dev \
    libcjson-dev libpcre2-dev libmicrohttpd-dev \
    libvulkan-dev glslc mesa-vulkan-drivers \
    python3 python3-numpy python3-torch python3-jinja2 python3-sentencepiece \
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
