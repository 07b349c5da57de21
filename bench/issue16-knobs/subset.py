import json,sys
ids={json.loads(l)['id'] for l in open(sys.argv[1])}
data=json.load(open('/work/shared/data/locomo/locomo10.json'))
order=[c['sample_id'] for c in data]
qs=[json.loads(l) for l in open(sys.argv[2])]
qs=[q for q in qs if q['id'] in ids and q['gold']]
def r(qs,k,f=all): return 100*sum(f(g in q['ranking'][:k] for g in q['gold']) for q in qs)/max(1,len(qs))
h=[[q for q in qs if order.index(q['corpus'])//5==x] for x in (0,1)]
print(f"{sys.argv[3] if len(sys.argv)>3 else '':40s} n={len(qs)} all@3/5/10 {r(qs,3):.2f}/{r(qs,5):.2f}/{r(qs,10):.2f} any@3 {r(qs,3,any):.2f} | 0-4 @3 {r(h[0],3):.2f} 5-9 @3 {r(h[1],3):.2f}")
