#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A file's folder tells what it may include: a layer includes headers of its own folder and of
# the layers below it, never above. The build already refuses a call upwards (each layer is
# linked with -Wl,--no-undefined against the layers below it only, build/layercheck/); this
# catches what the linker cannot see: a type, macro or inline function taken from above.
#
# Usage: bash tests/cli/layers.sh PATH-TO-SLUICE SOURCE-DIR   (CTest runs it so)
set -u
srcdir=${2:?usage: layers.sh PATH-TO-SLUICE SOURCE-DIR}
cd "$srcdir/src" || exit 1

# Bottom to top, as CMakeLists.txt builds them.
layers=(base core policy engine config store server cli)
rank() {
  local i
  for i in "${!layers[@]}"; do
    [ "${layers[$i]}" == "$1" ] && echo "$i" && return
  done
  echo -1
}

fails=0
files=0
while IFS= read -r f; do
  files=$((files + 1))
  own=$(rank "${f%%/*}")
  if [ "$own" -lt 0 ]; then
    echo "FAIL: $f is in no layer (add its folder to CMakeLists.txt and to this list)"
    fails=$((fails + 1))
    continue
  fi
  while IFS=: read -r line inc; do
    dir=${inc%%/*}
    [ "$dir" == "$inc" ] && continue # same folder
    [ "$dir" == "sluice" ] && continue # the public API
    r=$(rank "$dir")
    if [ "$r" -lt 0 ] || [ "$r" -gt "$own" ]; then
      echo "FAIL: $f:$line includes \"$inc\", above its layer (${f%%/*})"
      fails=$((fails + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/')
done < <(find . -name '*.[ch]' | sed 's#^\./##' | sort)
echo "$files files, $fails upward includes"
[ "$fails" -eq 0 ]
