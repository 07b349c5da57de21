import sys; sys.argv=sys.argv
exec(open('./ltr.py').read().split("if __name__")[0])
FEATS=sys.argv[1].split(',') if len(sys.argv)>1 else NAMES+['nb','dl','logn']
LAM=float(sys.argv[2]) if len(sys.argv)>2 else 0.5
print("LAM",LAM,"FEATS",FEATS)
def obj(w,sub):
    a,c=evaluate(w,sub,3)
    return a+LAM*c['1']
def fit(train):
    w=dict(BASE)
    for f in FEATS: w.setdefault(f,0.0)
    best=obj(w,train)
    steps=[-0.4,-0.2,-0.1,-0.05,-0.02,0.02,0.05,0.1,0.2,0.4]
    for rnd in range(3):
        improved=False
        for f in FEATS:
            if f=='u1': continue
            for st in steps:
                w2=dict(w); w2[f]=round(w[f]+st,3)
                o=obj(w2,train)
                if o>best+1e-9: best,w,improved=o,w2,True
        if not improved: break
    return w,best
for h in (0,1):
    train=[d for d in data if d['half']==h]; test=[d for d in data if d['half']!=h]
    w,b=fit(train)
    print('train half',h,{k:v for k,v in w.items() if v})
    print('  train', evaluate(w,train,3), ' base', evaluate(BASE,train,3))
    print('  test ', evaluate(w,test,3), ' base', evaluate(BASE,test,3))
    print('  all  ', evaluate(w,data,3), evaluate(w,data,5)[0])
