#!/usr/bin/env bash
# Fails when a source file includes a header from a layer it may not depend on.
# Allowed: plugin -> algorithms -> {transport, device} -> common. transport and
# device never include each other. include/ (public C header) is usable by all.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
declare -A allowed=(
  [common]="common"
  [transport]="common transport"
  [device]="common device"
  [algorithms]="common transport device algorithms"
  [plugin]="common transport device algorithms plugin"
)
bad=0
for layer in "${!allowed[@]}"; do
  [ -d "$root/$layer" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include[[:space:]]+"([^"]+)".*/\1/' <<<"${line#*:}")
    top=${inc%%/*}
    [ "$top" = "$inc" ] && continue            # same-directory include
    case " common transport device algorithms plugin " in *" $top "*) ;; *) continue ;; esac
    if [[ " ${allowed[$layer]} " != *" $top "* ]]; then
      echo "layering violation: $file includes \"$inc\" ($layer may use: ${allowed[$layer]})"
      bad=1
    fi
  done < <(grep -rnE '^[[:space:]]*#include[[:space:]]+"' "$root/$layer" \
             --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' | cut -d: -f1,3-)
done
[ $bad -eq 0 ] && echo "layering: ok"
exit $bad
