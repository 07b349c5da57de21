import json,sys,time,urllib.request
data=json.load(open('/work/shared/data/locomo/locomo10.json'))
limit=int(sys.argv[1]); out=sys.argv[2]; cat=sys.argv[3] if len(sys.argv)>3 else '1'
done=set()
try:
    for l in open(out): done.add(json.loads(l)['id'])
except FileNotFoundError: pass
SYSTEM=("You help search a memory of past chat conversations for the answer to a question. "
 "Write the words that the conversation where the answer was said is likely to contain: the specific kinds, "
 "examples, names, places and activities that could be the answer, not the question's own words. "
 "Reply with only a JSON object: {\"words\": [\"<word or short phrase>\", ...]} with at most 8 entries.")
schema={"type":"object","additionalProperties":False,"required":["words"],"properties":{"words":{"type":"array","maxItems":8,"items":{"type":"string","maxLength":40}}}}
f=open(out,'a')
for c in data:
    qs=[(i,q) for i,q in enumerate(c['qa']) if str(q.get('category'))==cat or cat=='all'][:limit]
    for i,q in qs:
        qid=f"{c['sample_id']}_q{i}"
        if qid in done: continue
        body={"model":"qwen","messages":[{"role":"system","content":SYSTEM},{"role":"user","content":"Question: What pets does Ana have?"},{"role":"assistant","content":"{\"words\": [\"dog\", \"cat\", \"puppy\", \"kitten\", \"vet\", \"walk\"]}"},{"role":"user","content":"Question: "+q['question']}],
              "max_tokens":80,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"hints","schema":schema}}}
        t=time.time()
        req=urllib.request.Request("http://127.0.0.1:8092/v1/chat/completions",data=json.dumps(body).encode(),headers={"content-type":"application/json"})
        r=json.load(urllib.request.urlopen(req,timeout=300))
        txt=r['choices'][0]['message']['content']
        try: words=json.loads(txt)['words']
        except Exception: words=[]
        rec={"id":qid,"question":q['question'],"words":words,"s":round(time.time()-t,2),"usage":r.get('usage')}
        f.write(json.dumps(rec)+"\n"); f.flush()
        print(rec['question'],'->',words,rec['s'],flush=True)
