"""Reference embeddings for `cargo xtask bench embed` (memlayer-bench's `embed`).

Runs the same model.onnx as memlayer-embed with the `onnxruntime` and `tokenizers` PyPI
packages, the way sentence-transformers defines the model's embedding: tokenize (truncate at
--max-length, pad to the longest text of the batch), run the encoder, mean-pool the last
hidden state over the attention mask, L2-normalise. Batches are formed exactly as memlayer's
Embedder forms them (each group of --batch-size texts sorted by length in characters,
stable), so both sides run the same forward passes and the timing compares implementations,
not batching strategies.

Prints one JSON object: elapsed seconds for the timed pass and the package versions. Writes
the vectors, in input order, as little-endian float32 to --vectors-out. Reads nothing from
the network.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tokenizers


def load(model_dir: Path, threads: int, max_length: int):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # fastembed builds its sessions at GraphOptimizationLevel::Level3, which is this one.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(
        str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    config = json.loads((model_dir / "config.json").read_text())
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    # tokenizer.json pads and truncates at 128; like fastembed, pad to the longest text of
    # the batch and truncate at the requested length (capped by the model's maximum).
    tokenizer.enable_truncation(
        max_length=min(max_length, int(tokenizer_config["model_max_length"]))
    )
    tokenizer.enable_padding(
        pad_id=int(config["pad_token_id"]), pad_token=tokenizer_config["pad_token"]
    )
    input_names = {i.name for i in session.get_inputs()}
    return session, tokenizer, input_names


def embed_batch(session, tokenizer, input_names, texts):
    encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in input_names:
        inputs["token_type_ids"] = np.array([e.type_ids for e in encodings], dtype=np.int64)
    (hidden,) = session.run(None, inputs)
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / (norms + 1e-12)


def embed_all(session, tokenizer, input_names, texts, batch_size):
    vectors = [None] * len(texts)
    for start in range(0, len(texts), batch_size):
        group = list(range(start, min(start + batch_size, len(texts))))
        group.sort(key=lambda i: len(texts[i]))
        batch = embed_batch(session, tokenizer, input_names, [texts[i] for i in group])
        for row, i in enumerate(group):
            vectors[i] = batch[row]
    return np.stack(vectors).astype("<f4")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--texts", type=Path, required=True, help="a JSON list of strings")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--vectors-out", type=Path, required=True)
    args = parser.parse_args()

    texts = json.loads(args.texts.read_text())
    session, tokenizer, input_names = load(args.model_dir, args.threads, args.max_length)
    # One untimed batch, as the Rust side's embedder runs one when it opens.
    embed_all(session, tokenizer, input_names, texts[: args.batch_size], args.batch_size)
    start = time.perf_counter()
    vectors = embed_all(session, tokenizer, input_names, texts, args.batch_size)
    elapsed = time.perf_counter() - start
    args.vectors_out.write_bytes(vectors.tobytes())
    json.dump(
        {
            "seconds": elapsed,
            "texts": len(texts),
            "onnxruntime": ort.__version__,
            "tokenizers": tokenizers.__version__,
        },
        sys.stdout,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
