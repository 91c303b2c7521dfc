#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `make install` works: installs the build (binary, static and shared libsluice, headers,
# pkg-config file) into a temporary prefix, then compiles examples/embed.c against it through
# pkg-config, statically and dynamically, and runs both.
#
# Usage: bash tests/cli/install.sh PATH-TO-SLUICE SOURCE-DIR   (the build dir is the binary's)
set -u
sluice=${1:?usage: install.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:?usage: install.sh PATH-TO-SLUICE SOURCE-DIR}
build=$(dirname "$sluice")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() {
  failed=$((failed + 1))
  echo "FAIL: $*"
}

if cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1; then ok; else bad "cmake --install: $(cat "$tmp/install.log")"; fi
pc=$(find "$tmp/prefix" -name sluice.pc | head -1)
[ -n "$pc" ] && ok || bad "no sluice.pc installed"
for f in bin/sluice include/sluice/limit.h include/sluice/engine.h; do
  [ -e "$tmp/prefix/$f" ] && ok || bad "not installed: $f"
done
export PKG_CONFIG_PATH=$(dirname "$pc")
libdir=$(pkg-config --variable=libdir sluice)
want="granted 100 of 101; the next may run in 10000000 ns"
# A sanitizer build's library needs the same sanitizers at link time.
san=$(grep '^SLUICE_SANITIZE:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2)
extra=()
[ -n "$san" ] && extra=("-fsanitize=$san")

# Static: the archive itself, then what it needs (Libs.private, Requires.private).
if cc "$srcdir/examples/embed.c" $(pkg-config --cflags sluice) "$libdir/libsluice.a" \
  $(pkg-config --libs --static sluice | sed 's/-lsluice//') "${extra[@]}" -o "$tmp/embed-static" 2>"$tmp/cc.log"; then ok; else bad "static build: $(cat "$tmp/cc.log")"; fi
out=$("$tmp/embed-static" 2>&1)
[ "$out" == "$want" ] && ok || bad "static run: [$out]"

if cc "$srcdir/examples/embed.c" $(pkg-config --cflags --libs sluice) "${extra[@]}" -o "$tmp/embed-shared" 2>"$tmp/cc.log"; then ok; else bad "shared build: $(cat "$tmp/cc.log")"; fi
out=$(LD_LIBRARY_PATH=$libdir "$tmp/embed-shared" 2>&1)
[ "$out" == "$want" ] && ok || bad "shared run: [$out]"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
