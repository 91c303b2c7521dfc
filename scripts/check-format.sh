#!/usr/bin/env bash
# Fails when a tracked or new C file is not formatted as .clang-format says.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)" >&2
    bad=1
  fi
done < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h')
[ $bad -eq 0 ] && echo "format: ok"
exit $bad
