#!/usr/bin/env bash
# Session 8 (issue 22): the 100 Mbit/s netlab cells after session 7's chooser
# changes (session 7 reran the 1 and 10 Gbit/s cells only). Needs root
# (network namespaces) and an idle machine. Dense and qsgd 8 bit at 100 MiB
# are session 5's rows (../session6/session5_100m_100M_dense_qsgd8.json):
# 67 calls of dense there take 940 s a row, and neither has a cost that
# depends on earlier calls.
#   docs/results/auto/session8/run.sh BUILD OUTDIR
set -euo pipefail
build=${1:?usage: run.sh BUILD OUTDIR} out=${2:?usage: run.sh BUILD OUTDIR}
lab=$(dirname "$0")/../../../../tools/gradcomp-lab
mkdir -p "$out"
"$lab" --build "$build" --ranks 4 --rates 100mbit --sizes 1M,16M --algos dense,qsgd,oktopk,auto \
  --labels "dense,qsgd 8 bit,qsgd 4 bit,oktopk d=0.01,auto" --mpi none --iters 3 --timeout 900 \
  --out "$out/labB"                                   # -> lab_100m_1M_16M.json
"$lab" --build "$build" --ranks 4 --rates 100mbit --sizes 100M --algos qsgd,oktopk,auto \
  --labels "qsgd 4 bit,oktopk d=0.01,auto" --mpi none --iters 3 --timeout 900 \
  --out "$out/labC"                                   # -> lab_100m_100M.json
# 1 MiB, oktopk and auto, 20 timed calls, in both orders (the row run second
# was the slower one in both: 1.6 vs 1.9 ms, 1.7 vs 2.3 ms).
for rev in "" --reverse; do
  "$lab" --build "$build" --ranks 4 --rates 100mbit --sizes 1M --algos oktopk,auto \
    --labels "oktopk d=0.01,auto" --mpi none --iters 20 --timeout 600 $rev \
    --out "$out/lab1M${rev:+_rev}"                    # -> lab_100m_1M_oktopk_auto[_reverse].json
done
python3 "$(dirname "$0")/../../../../tools/netlab/auto_compare.py" table "$out"/labB/lab.json \
  "$out"/labC/lab.json "$out"/lab1M/lab.json "$out"/lab1M_rev/lab.json \
  "$(dirname "$0")/../session6/session5_100m_100M_dense_qsgd8.json"
