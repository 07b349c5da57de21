import json, math, random, sys
F=[json.loads(l) for l in open('./feats.jsonl')]
Q=[json.loads(l) for l in open('./f.jsonl')]
assert all(a['q']==b['question'] for a,b in zip(F,Q))
convs=[]
for q in Q:
    if q['corpus'] not in convs: convs.append(q['corpus'])
NAMES=['u1','u2','u3','d1','d2','l1','l1q','f1','dmean','n','slex','date']
def sid(s): return int(s.split('_')[1])
data=[]
for f,q in zip(F,Q):
    rows=f['s']
    by={sid(r[0]):r[1:] for r in rows}
    feats=[]; ids=[]
    for r in rows:
        x=dict(zip(NAMES,r[1:]))
        s=sid(r[0])
        nb=[by[t][0] for t in (s-1,s+1) if t in by]
        x['nb']=max(nb) if nb else 0.0
        x['dl']=x['d1']*x['l1']
        x['logn']=math.log(x['n'])
        feats.append(x); ids.append(r[0])
    half=0 if convs.index(q['corpus'])<5 else 1
    data.append(dict(ids=ids,feats=feats,gold=set(q['gold']),cat=q['category'],half=half,q=q['question']))
def evaluate(w, subset, k=3):
    tot=0; mh=0; nmh=0; cats={}
    for d in subset:
        sc=[sum(w.get(n,0)*x[n] for n in w) for x in d['feats']]
        order=sorted(range(len(sc)),key=lambda i:(-sc[i],i))
        top={d['ids'][i] for i in order[:k]}
        ok=1 if d['gold']<=top else 0
        tot+=ok
        c=cats.setdefault(d['cat'],[0,0]); c[0]+=ok; c[1]+=1
    return 100*tot/len(subset), {c:round(100*v[0]/v[1],2) for c,v in sorted(cats.items())}
BASE={'u1':1,'u2':0.2,'u3':0.04,'slex':0.3,'date':0.6}
if __name__=='__main__':
    for k in (3,5,10):
        print(k, evaluate(BASE,data,k))
