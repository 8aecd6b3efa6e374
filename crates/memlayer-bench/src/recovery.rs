//! `recovery-fill`: the in-process half of `cargo xtask bench recovery`, which times how long
//! a data directory of a given size takes to open, to check and to serve again. This grows
//! the directory's store to the next size through the real store — conversations of long
//! messages appended in batches, and for every message a vector stored through
//! `Store::store_embeddings`, as the embedding pipeline stores them: seeded vectors around
//! real embeddings of the memory topics, since embedding a gigabyte of text with the model
//! would take hours here — then times `Store::open` alone. xtask times `memlayer check` and
//! the server's starts on the same directory.
//!
//! A message is `CHAT_PER_MESSAGE` messages of the corpus's chat stream of its session, so a
//! session's texts do not depend on which call wrote it. The vectors' noise is drawn from a
//! generator seeded by the call's first session. Prints one JSON line ([`Filled`]).

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use memlayer_embed::{Assets, Embedder, EmbedderOptions};
use memlayer_store::{
    Access, Append, EmbeddingModel, Metadata, NewMessage, NewSession, Role, Store,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::corpus::chat;
use crate::corpus::memories::TOPICS;
use crate::memory::near;
use crate::report::runtime;

const TENANT: &str = "default";
/// Sessions appended at once (the group commit batches them) and messages per append.
const SESSIONS_PER_ROUND: usize = 64;
const MESSAGES_PER_SESSION: usize = 50;
/// Chat messages of the corpus per stored message: some 5 KB, a long answer.
const CHAT_PER_MESSAGE: usize = 40;
/// Messages embedded per `store_embeddings` call.
const EMBED_BATCH: usize = 2_000;
const SEED: u64 = 8;

/// What a call wrote, and the store's state after it, for xtask's report.
#[derive(Serialize)]
struct Filled {
    /// Sessions in the store; the next call starts from here.
    sessions: usize,
    /// Messages in the store, each with a vector.
    messages: usize,
    /// The mean length of the messages this call wrote, in bytes (0 if it wrote none).
    mean_message_bytes: u64,
    file_bytes: u64,
    /// `Store::open` of the grown file, alone.
    store_open_secs: f64,
    messages_per_session: usize,
}

/// What has been written so far; the next round continues from it.
struct Filler {
    rng: StdRng,
    sessions: usize,
    messages: usize,
    /// Bytes of message text this call wrote.
    content_bytes: u64,
}

pub(crate) fn run(
    assets: &Assets,
    data_dir: &Path,
    mib: u64,
    first_session: usize,
) -> anyhow::Result<()> {
    let embedder = Embedder::open(assets, EmbedderOptions::default())?;
    let identity = embedder.identity().clone();
    let centres = embedder.embed_blocking(TENANT, &TOPICS);
    embedder.shutdown();
    let centres = centres?;
    let model = EmbeddingModel {
        name: identity.name,
        sha256: identity.sha256,
        dimension: u32::try_from(identity.dimension)?,
    };
    let runtime = runtime()?;
    let store_path = data_dir.join("memlayer.redb");
    let mut filler = Filler {
        rng: StdRng::seed_from_u64(SEED ^ first_session as u64),
        sessions: first_session,
        messages: first_session * MESSAGES_PER_SESSION,
        content_bytes: 0,
    };
    eprintln!("memlayer-bench: growing the store to {mib} MiB");
    runtime.block_on(fill(
        &store_path,
        &model,
        &centres,
        mib * 1024 * 1024,
        &mut filler,
    ))?;
    let file_bytes = std::fs::metadata(&store_path)?.len();
    let start = Instant::now();
    Store::open(&store_path)?.shutdown();
    let store_open_secs = start.elapsed().as_secs_f64();
    let filled = Filled {
        sessions: filler.sessions,
        messages: filler.messages,
        mean_message_bytes: filler
            .content_bytes
            .checked_div((filler.messages - first_session * MESSAGES_PER_SESSION) as u64)
            .unwrap_or(0),
        file_bytes,
        store_open_secs,
        messages_per_session: MESSAGES_PER_SESSION,
    };
    println!("{}", serde_json::to_string(&filled)?);
    Ok(())
}

/// Appends and embeds conversations until the store file holds `target` bytes.
async fn fill(
    path: &Path,
    model: &EmbeddingModel,
    centres: &[Vec<f32>],
    target: u64,
    filler: &mut Filler,
) -> anyhow::Result<()> {
    let store = Store::open(path)?;
    let result = async {
        while std::fs::metadata(path)?.len() < target {
            let mut appends = JoinSet::new();
            for _ in 0..SESSIONS_PER_ROUND {
                let session = filler.sessions;
                filler.sessions += 1;
                let mut texts = chat::Stream::numbered(session as u64);
                let messages: Vec<NewMessage> = (0..MESSAGES_PER_SESSION)
                    .map(|i| {
                        let content = texts
                            .by_ref()
                            .take(CHAT_PER_MESSAGE)
                            .collect::<Vec<_>>()
                            .join(" ");
                        NewMessage {
                            role: if i % 2 == 0 {
                                Role::User
                            } else {
                                Role::Assistant
                            },
                            // About four characters a token, as cl100k_base gives English.
                            token_count: u32::try_from(content.len() / 4).unwrap_or(u32::MAX),
                            content,
                            timestamp: None,
                            metadata: Metadata::new(),
                        }
                    })
                    .collect();
                filler.messages += messages.len();
                filler.content_bytes += messages
                    .iter()
                    .map(|message| message.content.len() as u64)
                    .sum::<u64>();
                let append = Append {
                    messages,
                    create: Some(NewSession {
                        user_id: format!("user-{}", session % 100),
                        agent_id: "agent".into(),
                        flow_id: None,
                        metadata: Metadata::new(),
                    }),
                    idempotency_key: None,
                };
                let store = store.clone();
                appends.spawn(async move {
                    store
                        .sessions()
                        .append(
                            &Access::tenant_wide(TENANT),
                            &format!("recovery-{session}"),
                            append,
                        )
                        .await
                });
            }
            while let Some(appended) = appends.join_next().await {
                appended.context("an append task panicked")??;
            }
            loop {
                let pending = store.feed().pending_embeddings(EMBED_BATCH)?;
                if pending.is_empty() {
                    break;
                }
                let done = pending.iter().map(|entry| entry.seq).collect();
                let vectors = pending
                    .iter()
                    .flat_map(|entry| &entry.messages)
                    .map(|(key, _)| {
                        let topic = (key.index() as usize) % centres.len();
                        (*key, near(&mut filler.rng, &centres[topic]))
                    })
                    .collect();
                store
                    .feed()
                    .store_embeddings(model.clone(), done, vectors)
                    .await?;
            }
        }
        anyhow::Ok(())
    }
    .await;
    store.shutdown();
    result
}
