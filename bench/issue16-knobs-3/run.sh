#!/bin/bash
# usage: run.sh NAME [env...]
name=$1; shift; OUT=${OUT:-/tmp/i16}; mkdir -p $OUT
env "$@" ./target/release/loci-eval locomo --data ../shared/data/locomo/locomo10.json --variant paper --threads 2 --json $OUT/$name.json --per-question $OUT/$name.jsonl 2>&1 | grep -E '^(1 multi|2 temp|3 open|4 single|5 adv|all)' | awk '{printf "%s r@3=%s r@5=%s r@10=%s | ", $2, $(NF-8), $(NF-5), $(NF-2)}'; echo " [$name]"
