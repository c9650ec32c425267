#!/bin/sh
# Runs a test binary again with PITH_DEVICE=vulkan (CMakeLists.txt: the vulkan_* tests), so the engine's
# identity checks (alone == batched == preempted == cache hit), the batch-invariance and reference
# checks run on the Vulkan backend too. Skips (77) with the reason when no Vulkan device can run pith:
# a build without the backend, or no driver (Debian: mesa-vulkan-drivers gives lavapipe).
set -u
dev=$("$PITH_BIN" devices 2>&1 | grep -E '^vulkan:[0-9]+:' | grep -v 'cannot run' | head -n 1 | cut -d: -f1-2)
if [ -z "$dev" ]; then
    echo "skip: no Vulkan device can run pith here: $("$PITH_BIN" devices 2>&1 | tr '\n' ' ')"
    exit 77
fi
echo "running $1 on $dev"
PITH_DEVICE=$dev exec "$@"
