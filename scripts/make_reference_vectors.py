#!/usr/bin/env python3
"""Writes tests/fixtures/reference_vectors.json: sentence vectors of the int8 all-MiniLM-L6-v2 computed with Python
onnxruntime and HuggingFace tokenizers, the reference that the native and browser embedders are checked against.

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install onnxruntime==1.32.0 tokenizers numpy
    /tmp/ref/bin/python scripts/make_reference_vectors.py www/assets/model
"""
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

TEXTS = [
    "Hello world",
    "[Caroline]: I went to a LGBTQ support group yesterday and it was so powerful.",
    "[Melanie]: That's amazing! I painted a lake sunrise last year.\n The image Caption: a painting of a sunset over a lake",
    "When did Jon get mentored?",
    "Crème brûlée, naïve café — 東京で寿司を食べた 🍣 and 서울 too.",
    "I'm planning a trip to Lisbon next month; any tips for vegetarian food?",
    # Longer than one 256-token window: the reference keeps the first 256 tokens, as sentence-transformers does.
    " ".join(f"Sentence number {i} talks about gardening, tomatoes and the weather in spring." for i in range(40)),
]
MAX_TOKENS = 256


def main(model_dir: str) -> None:
    model_dir = Path(model_dir)
    model_bytes = (model_dir / "model.onnx").read_bytes()
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    out = {"model_sha256": hashlib.sha256(model_bytes).hexdigest(), "max_tokens": MAX_TOKENS, "items": []}
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=True).ids
        if len(ids) > MAX_TOKENS:
            ids = ids[: MAX_TOKENS - 1] + [ids[-1]]  # keep [SEP] last, as truncation does
        input_ids = np.array([ids], dtype=np.int64)
        mask = np.ones_like(input_ids)
        hidden = session.run(["last_hidden_state"], {
            "input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)})[0]
        v = hidden[0].mean(axis=0)
        v = v / np.linalg.norm(v)
        out["items"].append({"text": text, "ids": ids, "vector": [round(float(x), 8) for x in v]})
    Path("tests/fixtures/reference_vectors.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(out['items'])} reference vectors")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "www/assets/model")
