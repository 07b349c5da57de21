import json, sys, os
from point import judge
Q=[json.loads(l) for l in open('u2.jsonl')]
U={}
for l in open('units.jsonl'):
    r=json.loads(l); U[r['id']]=r['units']
cat=sys.argv[1]; LIMIT=int(sys.argv[2]); N=int(sys.argv[3]) if len(sys.argv)>3 else 10
CACHE='point-cache.jsonl'
done=set()
if os.path.exists(CACHE):
    for l in open(CACHE):
        r=json.loads(l); done.add((r['id'],r['session']))
per={}; sel=[]
for q in Q:
    if cat!='all' and q['category']!=cat: continue
    c=per.setdefault((q['corpus'],q['category']),0)
    if c<LIMIT: sel.append(q); per[(q['corpus'],q['category'])]=c+1
print(len(sel),'questions',flush=True)
for i,q in enumerate(sel):
    for rank,(sid,units) in enumerate(zip(q['ranking'][:N],U[q['id']][:N])):
        if (q['id'],sid) in done: continue
        ex=(units[0] if units else '')[:600]
        r=judge(q['question'],ex)
        r.update(id=q['id'],session=sid,rank=rank)
        with open(CACHE,'a') as f: f.write(json.dumps(r)+"\n")
    print(i,q['id'],flush=True)
