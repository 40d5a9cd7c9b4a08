#!/usr/bin/env bash
# netlab_smoke.sh SOURCE_DIR BUILD_DIR: 2 namespaces shaped to 1 Gbit/s, a
# 2-rank gradcomp-bench dense allreduce of 1 MiB across them (UCX over tcp on
# the veths). Passes when the bench finishes with #wrong 0 and the namespaces
# are gone afterwards. Exit 77 (CTest: skipped) when namespaces cannot be made.
set -uo pipefail
src=${1:?usage: netlab_smoke.sh SOURCE_DIR BUILD_DIR} build=${2:?usage: netlab_smoke.sh SOURCE_DIR BUILD_DIR}
bench=$build/tools/gradcomp-bench/gradcomp-bench
for tool in ip tc; do
  command -v $tool >/dev/null || { echo "SKIP: '$tool' (iproute2) is not installed"; exit 77; }
done
[[ -x $bench && -x $build/tools/gradcomp-run/gradcomp-run ]] ||
  { echo "FAIL: build gradcomp-bench and gradcomp-run first ($bench)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

NETLAB_BUILD=$build timeout -k 5 45 bash "$src/tools/netlab/netlab.sh" -n 2 --rate 1gbit --timeout 30 \
  --ranks -- "$bench" -b 1M -e 1M -n 2 -w 1 -c 1 -J "$work/out.json" >"$work/log" 2>&1
rc=$?
cat "$work/log"
if ((rc == 3)); then
  echo "SKIP: cannot create network namespaces here (needs root / CAP_NET_ADMIN); see the log above"
  exit 77
fi
((rc == 0)) || { echo "FAIL: netlab.sh exited with $rc"; exit 1; }
prefix=$(sed -n 's/^netlab: 2 hosts \(gcl[0-9]*-\)0\.\.1 .*/\1/p' "$work/log")
[[ -n $prefix ]] || { echo "FAIL: netlab.sh did not report its namespaces"; exit 1; }
if ip netns list | grep -q "^$prefix"; then
  echo "FAIL: namespaces $prefix* were left behind"; exit 1
fi
grep -q '"size_bytes": 1048576,.*"ranks": 2,.*"wrong": 0[,}]' "$work/out.json" ||
  { echo "FAIL: expected a 1 MiB row over 2 ranks with wrong 0 in the bench JSON:"; cat "$work/out.json"; exit 1; }
echo "PASS: 2 ranks across namespaces ${prefix}0..1, 1 MiB dense, #wrong 0, torn down"
