import json,sys
data=json.load(open('/work/shared/data/locomo/locomo10.json'))
order=[c['sample_id'] for c in data]
qs=[json.loads(l) for l in open(sys.argv[1])]
qs=[q for q in qs if q['gold']]
def r(qs,k): return 100*sum(set(q['gold'])<=set(q['ranking'][:k]) for q in qs)/max(1,len(qs))
out=[]
for half in (0,1):
    h=[q for q in qs if order.index(q['corpus'])//5==half]
    m=[q for q in h if q['category']=='1']
    out.append(f"h{half}: all {r(h,3):.2f} mh {r(m,3):.2f}/{r(m,5):.2f}")
print('   '.join(out))
