#!/bin/bash
# run.sh HINTS "ENV.." ...
H=$1; shift
for cfg in "$@"; do
 env LOCI_HINTS=$H $cfg ./target/release/loci-eval locomo --data ../shared/data/locomo/locomo10.json --method default --variant paper --threads 2 --json /tmp/hy.json --per-question /tmp/hy.jsonl >/dev/null 2>&1
 python3 bench/issue16-knobs/subset.py $H /tmp/hy.jsonl "$cfg"
done
