#!/usr/bin/env python3
"""Writes tests/fixtures/bge_small_reference.json: bge-small-en-v1.5 int8 vectors computed with Python onnxruntime
and HuggingFace tokenizers, independently of loci, for tests/embed_bge_native.rs. Each text has its CLS-pooled vector
(what bge uses) and its mean-pooled one (what the test must not match), both L2-normalised; queries carry bge's
instruction prefix, as loci's `embed_query` adds it.

    node scripts/setup.mjs bge-small
    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install onnxruntime==1.32.0 tokenizers numpy
    /tmp/ref/bin/python scripts/make_bge_reference.py www/assets/model-bge-small
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

PREFIX = "Represent this sentence for searching relevant passages: "
PASSAGES = [
    "Hello world",
    "[Caroline]: She has been doing taekwondo for years.",
    "[Melanie]: I bought apples and bread at the grocery store.",
]
QUERIES = ["What martial art does Caroline practise?"]


def main(model_dir: str) -> None:
    model_dir = Path(model_dir)
    model_bytes = (model_dir / "model.onnx").read_bytes()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])

    def item(text: str, model_text: str) -> dict:
        ids = tok.encode(model_text, add_special_tokens=True).ids
        input_ids = np.array([ids], dtype=np.int64)  # one text per run: int8 activations are scaled per call
        hidden = session.run(["last_hidden_state"], {
            "input_ids": input_ids, "attention_mask": np.ones_like(input_ids),
            "token_type_ids": np.zeros_like(input_ids)})[0][0]
        cls, mean = hidden[0], hidden.mean(axis=0)
        return {"text": text, "ids": ids,
                "cls": [round(float(x), 8) for x in cls / np.linalg.norm(cls)],
                "mean": [round(float(x), 8) for x in mean / np.linalg.norm(mean)]}

    out = {"model_sha256": hashlib.sha256(model_bytes).hexdigest(), "query_prefix": PREFIX,
           "passages": [item(t, t) for t in PASSAGES], "queries": [item(q, PREFIX + q) for q in QUERIES]}
    Path("tests/fixtures/bge_small_reference.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(PASSAGES)} passage and {len(QUERIES)} query reference vectors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "www/assets/model-bge-small")
