#!/bin/bash
# usage: sweep.sh "ENV=.. ENV=.." ...
for cfg in "$@"; do
  env $cfg ./target/release/loci-eval locomo --data ../shared/data/locomo/locomo10.json --method default --variant paper --threads 2 --json /tmp/sw.json --per-question /tmp/sw.jsonl >/tmp/sw.out 2>/dev/null
  python3 - "$cfg" <<'PY'
import json,sys
j=json.load(open('/tmp/sw.json'))['paper']['default']
pc=j['per_category']
f=lambda d,k: d[k]*100 if d[k]<=1 else d[k]
print(f"{sys.argv[1]:60s} all {f(j,'recall_all@3'):.2f}/{f(j,'recall_all@5'):.2f}/{f(j,'recall_all@10'):.2f} mh {f(pc['1'],'recall_all@3'):.2f}/{f(pc['1'],'recall_all@5'):.2f}/{f(pc['1'],'recall_all@10'):.2f} tmp {f(pc['2'],'recall_all@3'):.2f} od {f(pc['3'],'recall_all@3'):.2f} sh {f(pc['4'],'recall_all@3'):.2f} adv {f(pc['5'],'recall_all@3'):.2f}")
PY
done
