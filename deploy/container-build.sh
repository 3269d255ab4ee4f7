#!/usr/bin/env bash
# The build steps of the container image, kept in one script that deploy/Dockerfile runs in
# its build stage and that `make test` runs on the host (tests/integration/test_container.py),
# so the two cannot drift apart.
#
#   deploy/container-build.sh --runtime-debs     print the Debian packages the runtime stage
#                                                installs (the binaries' shared libraries + tini)
#   deploy/container-build.sh --build-debs       print the packages the build stage needs
#   deploy/container-build.sh PREFIX             build NATIVE=0 (any x86-64; AVX2/AVX-512
#                                                kernels still chosen at run time) and install
#                                                into PREFIX: bin/gemmad, bin/gemmad-cli,
#                                                etc/gemmad.conf
#
# Environment: BUILD (default build/portable, the directory `make test-native0` also uses,
# so the host test compiles nothing twice), JOBS (default: the number of CPUs),
# GEMMAD_VERSION (gemmad_build_info's version label; default git describe, or "unknown").
# It fails when a binary needs a shared library outside the runtime package list.
set -eu -o pipefail
cd "$(dirname "$0")/.."

RUNTIME_DEBS="libmicrohttpd12 libjansson4 libuv1 libopenblas0-pthread tini"
BUILD_DEBS="gcc make pkg-config libc6-dev libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev"
# The libraries the binaries may name (DT_NEEDED): the runtime packages' and libc's.
ALLOWED_LIBS="libmicrohttpd libjansson libuv libopenblas libm libc libpthread libdl"

case "${1:-}" in
--runtime-debs) echo "$RUNTIME_DEBS"; exit 0 ;;
--build-debs) echo "$BUILD_DEBS"; exit 0 ;;
"" | -*) sed -n '2,18p' "$0" >&2; exit 2 ;;
esac
PREFIX=$1
BUILD=${BUILD:-build/portable}
JOBS=${JOBS:-$(nproc)}
VERSION=${GEMMAD_VERSION:-$(git describe --always --dirty 2>/dev/null || echo unknown)}

make --no-print-directory -j"$JOBS" NATIVE=0 WERROR=1 BUILD="$BUILD" GEMMAD_VERSION="$VERSION" \
    "$BUILD/gemmad" "$BUILD/gemmad-cli"
install -d "$PREFIX/bin" "$PREFIX/etc"
install -m 0755 "$BUILD/gemmad" "$BUILD/gemmad-cli" "$PREFIX/bin/"
install -m 0644 config/gemmad.conf "$PREFIX/etc/gemmad.conf"

# Only shared libraries the runtime stage installs.
for b in "$PREFIX/bin/gemmad" "$PREFIX/bin/gemmad-cli"; do
    while read -r lib; do
        base=${lib%%.so*}
        ok=0
        for a in $ALLOWED_LIBS; do [ "$base" = "$a" ] && ok=1; done
        if [ $ok = 0 ]; then
            echo "container-build: $b needs $lib, which the runtime stage does not install" >&2
            exit 1
        fi
    done < <(readelf -d "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
# The binary runs and knows its settings (no model needed for --help).
"$PREFIX/bin/gemmad" --help >/dev/null
echo "container-build: installed gemmad ($VERSION, NATIVE=0) into $PREFIX"
