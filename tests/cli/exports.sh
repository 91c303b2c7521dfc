#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# libsluice.so exports the public API and nothing else: every dynamic symbol it defines is a
# function or variable declared in include/sluice/*.h (so it starts with sluice_), and every one
# declared there is exported. libsluice is compiled with -fvisibility=hidden and the public
# headers open SLUICE_API_BEGIN (include/sluice/export.h); an internal function that leaks, or a
# public one defined without its header in scope, fails here.
#
# Usage: bash tests/cli/exports.sh PATH-TO-SLUICE SOURCE-DIR   (the build dir is the binary's)
set -u
sluice=${1:?usage: exports.sh PATH-TO-SLUICE SOURCE-DIR}
srcdir=${2:?usage: exports.sh PATH-TO-SLUICE SOURCE-DIR}
lib=$(dirname "$sluice")/libsluice.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -e "$lib" ] || { echo "FAIL: no $lib"; exit 1; }

# What the headers declare, comments removed (the preprocessor without expanding includes):
# the name before "(" of a declaration, and the name of an extern variable.
for h in "$srcdir"/include/sluice/*.h; do
  gcc -fpreprocessed -dD -E -P -x c "$h" 2>/dev/null
done | grep -v '^#' | tr '\n' ' ' | tr ';' '\n' >"$tmp/decls"
{
  grep -oE '\bsluice_[a-z0-9_]+[[:space:]]*\(' "$tmp/decls" | sed 's/[[:space:]]*($//'
  grep -E '^[[:space:]]*extern[[:space:]]' "$tmp/decls" |
    awk '{ for (i = NF; i > 0; i--) if (match($i, /^sluice_[a-z0-9_]+/)) {
             print substr($i, RSTART, RLENGTH); break } }'
} | sort -u >"$tmp/declared"
# An ASan build adds an ODR indicator (__odr_asan.NAME) beside each exported variable: the
# sanitizer's, not the library's, so it is left out.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TtDdBbRrVvWw]$/ {print $3}' | sed 's/@.*//' |
  grep -v '^__odr_asan\.' | sort -u >"$tmp/exported"

fails=0
while read -r s; do
  echo "FAIL: libsluice.so exports $s, which include/sluice/ does not declare"
  fails=$((fails + 1))
done < <(comm -23 "$tmp/exported" "$tmp/declared")
while read -r s; do
  echo "FAIL: include/sluice/ declares $s, which libsluice.so does not export"
  fails=$((fails + 1))
done < <(comm -13 "$tmp/exported" "$tmp/declared")
while read -r s; do
  echo "FAIL: exported symbol $s lacks the sluice_ prefix"
  fails=$((fails + 1))
done < <(grep -v '^sluice_' "$tmp/exported")
echo "$(wc -l <"$tmp/exported") exported, $(wc -l <"$tmp/declared") declared, $fails failed"
[ "$fails" -eq 0 ]
