#!/usr/bin/env bash
# Serialises builds of one build directory between concurrent developers
# sharing a checkout: locked-build.sh BUILD_DIR [cmake --build args...]
set -euo pipefail
dir="$1"; shift
exec flock "/tmp/kiln-build-$(basename "$dir").lock" cmake --build "$dir" -j 2 "$@"
