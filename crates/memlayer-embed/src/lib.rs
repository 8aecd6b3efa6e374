//! Local text embeddings: turns message text into vectors with an ONNX model loaded from a
//! local directory, with no network at build or run time.
//!
//! Empty until the embeddings issue fills it; the crate exists now so the workspace shows the
//! architecture from the start. It may depend on `memlayer-store` (for the model identity it
//! stores beside vectors) and must not depend on indexes, strategies, erasure or HTTP.

#![deny(missing_docs)]
