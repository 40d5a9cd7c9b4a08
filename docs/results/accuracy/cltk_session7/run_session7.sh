#!/bin/bash
# Issue 24, session 7: cltk's leaders per call (GRADCOMP_CLTK_LEADERS), as run,
# in this order, one run at a time. "before" ran seeds 1-5 at the then default
# (1) and seeds 6-15 with --param CLTK_LEADERS=1 (the same path; checked: CNN
# seed 2 with the pre-change binary gives the same run to the last digit,
# check_oldbin_cnn_cltk_s2.*). "after" is the new default, no --param.
set -eu
cd "$(dirname "$0")"
./run.sh dense "mlp cnn" "1 2 3 4 5" dense
./run.sh cltk_before "mlp cnn" "1 2 3 4 5" cltk
./run.sh cltk_L0 "mlp cnn" "1 2 3 4 5" cltk --param CLTK_LEADERS=0
./run.sh cltk_L2 "mlp cnn" "1 2 3 4 5" cltk --param CLTK_LEADERS=2
./run.sh dense "mlp cnn" "6 7 8 9 10" dense
./run.sh cltk_before "mlp cnn" "6 7 8 9 10" cltk --param CLTK_LEADERS=1
./run.sh cltk_L0 "mlp cnn" "6 7 8 9 10" cltk --param CLTK_LEADERS=0
./run.sh cltk_L2 "mlp cnn" "6 7 8 9 10" cltk --param CLTK_LEADERS=2
./run.sh dense "mlp cnn" "11 12 13 14 15" dense
./run.sh cltk_L0 "mlp cnn" "11 12 13 14 15" cltk --param CLTK_LEADERS=0
./run.sh cltk_L2 "mlp cnn" "11 12 13 14 15" cltk --param CLTK_LEADERS=2
./run.sh cltk_before "mlp cnn" "11 12 13 14 15" cltk --param CLTK_LEADERS=1
./run.sh cltk_after "mlp cnn" "1 2 3 4 5" cltk
python3 table.py 1 5; python3 table.py 6 10; python3 table.py 11 15; python3 summary.py
