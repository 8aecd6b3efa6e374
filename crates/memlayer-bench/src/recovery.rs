//! `recovery-fill`: the in-process half of `cargo xtask bench recovery` and `bench start`,
//! which time how long a data directory of a given size takes to open, to check and to serve
//! again. This grows the directory's store through the real store — conversations appended
//! in batches, and for every message a vector stored through `Store::store_embeddings`, as
//! the embedding pipeline stores them: seeded vectors around real embeddings of the memory
//! topics, since embedding a gigabyte of text with the model would take hours here — to a
//! file size or a number of messages ([`Goal`]), then writes long-term memories as the
//! `memory` benchmark does (seeded vectors, 10,000 per user), then times `Store::open`
//! alone. xtask times `memlayer check` and the server's starts on the same directory.
//!
//! A message is [`Shape::chat_per_message`] messages of the corpus's chat stream of its
//! session, so a session's texts do not depend on which call wrote it. The vectors' noise is
//! drawn from a generator seeded by the call's first session. Prints one JSON line
//! ([`Filled`]).

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
use crate::memory::{self, near};
use crate::report::runtime;

const TENANT: &str = "default";
/// Sessions appended at once (the group commit batches them) and messages per append.
const SESSIONS_PER_ROUND: usize = 64;
const MESSAGES_PER_SESSION: usize = 50;
/// Messages embedded per `store_embeddings` call.
const EMBED_BATCH: usize = 2_000;
const SEED: u64 = 8;

/// Where a call stops appending messages.
pub(crate) enum Goal {
    /// Once the store file holds this many bytes.
    FileBytes(u64),
    /// Once this call has written this many messages.
    Messages(usize),
}

/// What a call writes.
pub(crate) struct Shape {
    pub(crate) goal: Goal,
    /// Chat messages of the corpus joined into one stored message.
    pub(crate) chat_per_message: usize,
    /// Long-term memories written after the messages.
    pub(crate) memories: usize,
}

/// What a call wrote, and the store's state after it, for xtask's report.
#[derive(Serialize)]
struct Filled {
    /// Sessions in the store; the next call starts from here.
    sessions: usize,
    /// Messages in the store, each with a vector.
    messages: usize,
    /// Long-term memories this call wrote.
    memories: usize,
    /// How long this call took to write its messages, vectors and memories.
    written_secs: f64,
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
    shape: &Shape,
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
    eprintln!("memlayer-bench: growing the store");
    let start = Instant::now();
    runtime.block_on(fill(&store_path, &model, &centres, shape, &mut filler))?;
    let written_secs = start.elapsed().as_secs_f64();
    let file_bytes = std::fs::metadata(&store_path)?.len();
    let start = Instant::now();
    Store::open(&store_path)?.shutdown();
    let store_open_secs = start.elapsed().as_secs_f64();
    let filled = Filled {
        sessions: filler.sessions,
        messages: filler.messages,
        memories: shape.memories,
        written_secs,
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

/// Appends and embeds conversations until the goal is reached, then writes the memories.
async fn fill(
    path: &Path,
    model: &EmbeddingModel,
    centres: &[Vec<f32>],
    shape: &Shape,
    filler: &mut Filler,
) -> anyhow::Result<()> {
    let store = Store::open(path)?;
    let first_message = filler.messages;
    let result = async {
        while match shape.goal {
            Goal::FileBytes(target) => std::fs::metadata(path)?.len() < target,
            Goal::Messages(target) => filler.messages - first_message < target,
        } {
            let mut appends = JoinSet::new();
            for _ in 0..SESSIONS_PER_ROUND {
                let session = filler.sessions;
                filler.sessions += 1;
                let mut texts = chat::Stream::numbered(session as u64);
                let messages: Vec<NewMessage> = (0..MESSAGES_PER_SESSION)
                    .map(|i| {
                        let content = texts
                            .by_ref()
                            .take(shape.chat_per_message)
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
        let users = shape.memories.div_ceil(memory::PER_USER);
        memory::load(&store, centres, shape.memories, users).await
    }
    .await;
    store.shutdown();
    result
}
