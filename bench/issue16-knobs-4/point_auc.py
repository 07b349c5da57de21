import json, collections
Q={json.loads(l)['id']:json.loads(l) for l in open('u2.jsonl')}
P=collections.defaultdict(dict)
for l in open('point-cache.jsonl'):
    r=json.loads(l); P[r['id']][r['session']]=r['p']
g=[];n=[]
for i,p in P.items():
    for s,v in p.items():
        (g if s in Q[i]['gold'] else n).append(v)
import itertools
auc=sum((a>b)+0.5*(a==b) for a in g for b in n)/(len(g)*len(n))
print(len(g),len(n),'AUC',round(auc,3),'mean p gold',round(sum(g)/len(g),3),'non',round(sum(n)/len(n),3))
