#!/bin/sh
# Runs the GIC smoke example on QEMU virt at EL2 with gic-version=2 and 3.
# Exit status 0 only if both runs print PASS and exit 0.
set -eu
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(pwd)/target/gic}"
cargo build -q -p gic --example qemu_smoke --target aarch64-unknown-none
image="$CARGO_TARGET_DIR/aarch64-unknown-none/debug/examples/qemu_smoke"
status=0
for version in 2 3; do
    echo "== gic-version=$version"
    if timeout 60 qemu-system-aarch64 -M "virt,virtualization=on,gic-version=$version" \
        -cpu cortex-a72 -smp 4 -m 128M -nographic -semihosting -no-reboot \
        -append "gic-version=$version cpus=4" -kernel "$image" >"$CARGO_TARGET_DIR/qemu-smoke-v$version.log" 2>&1; then
        :
    else
        status=1
    fi
    cat "$CARGO_TARGET_DIR/qemu-smoke-v$version.log"
    grep -q "gic-smoke: PASS" "$CARGO_TARGET_DIR/qemu-smoke-v$version.log" || status=1
done
exit $status
