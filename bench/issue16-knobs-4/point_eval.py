import json, sys, collections
Q={json.loads(l)['id']:json.loads(l) for l in open('u2.jsonl')}
P=collections.defaultdict(dict)
for l in open('point-cache.jsonl'):
    r=json.loads(l); P[r['id']][r['session']]=r['p']
N=int(sys.argv[1]) if len(sys.argv)>1 else 10
ids=[i for i in P if len(P[i])>=min(N,len(Q[i]['ranking']))]
def recall_all(rank,gold,k): return 1 if set(gold)<=set(rank[:k]) else 0
def variants(q,p):
    base=q['ranking']
    top=base[:N]; rest=base[N:]
    out={'default':base}
    out['llm only']=sorted(top,key=lambda s:(-p.get(s,0),top.index(s)))+rest
    out['yes first']=[s for s in top if p.get(s,0)>=0.5]+[s for s in top if p.get(s,0)<0.5]+rest
    out['keep 1st, llm']=[top[0]]+sorted(top[1:],key=lambda s:(-p.get(s,0),top.index(s)))+rest
    for a in (0.5,1,2):
        out[f'p + {a}/(rank+1)']=sorted(top,key=lambda s:-(p.get(s,0)+a/(top.index(s)+1)))+rest
    for a in (0.05,0.1):
        out[f'p - {a}*rank']=sorted(top,key=lambda s:-(p.get(s,0)-a*top.index(s)))+rest
    return out
agg=collections.defaultdict(lambda: collections.defaultdict(list))
for i in ids:
    q=Q[i]; half=0 if int(q['corpus'].split('-')[1])<0 else 0
    for name,rank in variants(q,P[i]).items():
        for k in (3,5,10):
            agg[name][k].append(recall_all(rank,q['gold'],k))
print(len(ids),'questions')
for name,d in agg.items():
    print(f"{name:22s}", ' / '.join(f"{100*sum(v)/len(v):.2f}" for k,v in sorted(d.items())))
