//! A throwaway memlayer for one evaluation: a store in a temporary directory, `Recall` over
//! it with the indexing pipeline running, and the context builder, wired as `memlayer
//! serve` wires them but with
//! nothing listening. Every evaluation goes through it so that all of them measure the real
//! write path, pipeline and embedder.

use std::time::{Duration, Instant};

use anyhow::Context;
use memlayer_embed::Embedder;
use memlayer_index::{Recall, RecallOptions};
use memlayer_memory::{ContextBuilder, TokenEncoding};
use memlayer_store::Store;
use tempfile::TempDir;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long the pipeline may embed nothing before an evaluation gives up: it retries failed
/// steps forever (a server should), which would hang an evaluation.
const STALL_LIMIT: Duration = Duration::from_secs(120);

/// A store, recall over it and its running pipeline. Close it with [`Stack::close`].
pub(crate) struct Stack {
    pub(crate) store: Store,
    pub(crate) recall: Recall,
    /// Contexts as the `/context` endpoint builds them.
    pub(crate) contexts: ContextBuilder,
    stop: oneshot::Sender<()>,
    pipeline: JoinHandle<()>,
    /// Holds the store file; removed when the stack is dropped, after the store shut down.
    _dir: TempDir,
}

impl Stack {
    /// Opens a fresh store and spawns its pipeline on the current tokio runtime.
    pub(crate) fn open(embedder: &Embedder) -> anyhow::Result<Self> {
        let dir =
            tempfile::tempdir().context("cannot create a temporary directory for the store")?;
        let store =
            Store::open(dir.path().join(crate::STORE_FILE)).context("cannot open the store")?;
        let recall = Recall::open(store.clone(), embedder.clone(), RecallOptions::default())
            .context("cannot build the recall indexes")?;
        let (stop, stopped) = oneshot::channel::<()>();
        let pipeline = tokio::spawn(recall.clone().run_pipeline(async move {
            // A dropped sender stops the pipeline too.
            let _ = stopped.await;
        }));
        let contexts =
            ContextBuilder::new(store.clone(), recall.clone(), TokenEncoding::Cl100kBase);
        Ok(Self {
            contexts,
            store,
            recall,
            stop,
            pipeline,
            _dir: dir,
        })
    }

    /// Waits until the pipeline has a vector for `messages` messages; fails if it stops
    /// making progress.
    pub(crate) async fn wait_until_embedded(&self, messages: usize) -> anyhow::Result<()> {
        let mut last = (0, Instant::now());
        loop {
            let embedded = self.recall.indexed_vectors();
            if embedded >= messages {
                return Ok(());
            }
            if embedded > last.0 {
                last = (embedded, Instant::now());
            } else if last.1.elapsed() > STALL_LIMIT {
                anyhow::bail!(
                    "embedding stalled at {embedded} of {messages} messages for {}s (the log \
                     says why)",
                    STALL_LIMIT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the pipeline and shuts the store down, whatever the pipeline's fate.
    pub(crate) async fn close(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        let joined = self.pipeline.await;
        self.store.shutdown();
        joined.context("the indexing pipeline panicked")
    }
}
