//! `commit-modes`: the store's commit modes side by side, in process (no HTTP): what two-phase
//! commit and quick repair cost per durable append, for one writer and for 64 concurrent
//! writers sharing group commits. Modes are interleaved over several rounds so a noisy
//! neighbour on the shared machine hurts all of them alike. The appended texts are the first
//! messages of the corpus's chat stream, the same in every mode and round.

use std::time::{Duration, Instant};

use anyhow::Context;
use memlayer_store::{
    Access, Append, CommitMode, NewMessage, NewSession, Role, Store, StoreOptions,
};

use crate::corpus::chat;
use crate::report::{percentile, runtime};

const MODES: [CommitMode; 3] = [
    CommitMode::QuickRepair,
    CommitMode::TwoPhase,
    CommitMode::SinglePhase,
];
const ROUNDS: usize = 3;
const SEQUENTIAL_APPENDS: usize = 400;
const CONCURRENT_WRITERS: usize = 64;
const APPENDS_PER_WRITER: usize = 40;

#[derive(Default)]
struct ModeResult {
    sequential: Vec<Duration>,
    sequential_elapsed: Duration,
    concurrent_appends: usize,
    concurrent_elapsed: Duration,
}

pub(crate) fn run() -> anyhow::Result<String> {
    let runtime = runtime()?;
    let texts = Texts(chat::messages(
        SEQUENTIAL_APPENDS + CONCURRENT_WRITERS * APPENDS_PER_WRITER,
    ));
    let texts = std::sync::Arc::new(texts);
    let mut results: Vec<ModeResult> = MODES.iter().map(|_| ModeResult::default()).collect();
    for _ in 0..ROUNDS {
        for (mode, result) in MODES.iter().zip(&mut results) {
            let dir = tempfile::tempdir().context("no temporary directory for the store")?;
            let store = Store::open_with(
                dir.path().join("memlayer.redb"),
                StoreOptions::default().with_commit(*mode),
            )?;
            runtime.block_on(measure(&store, &texts, result))?;
        }
    }
    Ok(report(&results))
}

/// The texts appended: the sequential writer's first, then each concurrent writer's.
struct Texts(Vec<String>);

impl Texts {
    /// The `sequence`th text of writer `client`; the sequential writer is client 0 with its
    /// own texts.
    fn get(&self, concurrent: bool, client: usize, sequence: usize) -> String {
        let index = if concurrent {
            SEQUENTIAL_APPENDS + client * APPENDS_PER_WRITER + sequence
        } else {
            sequence
        };
        self.0[index].clone()
    }
}

fn append(content: String) -> Append {
    Append {
        messages: vec![NewMessage {
            role: Role::User,
            content,
            token_count: 20,
            timestamp: None,
            metadata: Default::default(),
        }],
        create: Some(NewSession {
            user_id: "bench".into(),
            agent_id: "bench".into(),
            ..NewSession::default()
        }),
        idempotency_key: None,
    }
}

async fn measure(
    store: &Store,
    texts: &std::sync::Arc<Texts>,
    result: &mut ModeResult,
) -> anyhow::Result<()> {
    let started = Instant::now();
    for sequence in 0..SEQUENTIAL_APPENDS {
        let begun = Instant::now();
        store
            .sessions()
            .append(
                &Access::tenant_wide("bench"),
                "sequential",
                append(texts.get(false, 0, sequence)),
            )
            .await?;
        result.sequential.push(begun.elapsed());
    }
    result.sequential_elapsed += started.elapsed();

    let started = Instant::now();
    let writers: Vec<_> = (0..CONCURRENT_WRITERS)
        .map(|client| {
            let store = store.clone();
            let texts = texts.clone();
            tokio::spawn(async move {
                for sequence in 0..APPENDS_PER_WRITER {
                    store
                        .sessions()
                        .append(
                            &Access::tenant_wide("bench"),
                            &format!("writer-{client}"),
                            append(texts.get(true, client, sequence)),
                        )
                        .await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    result.concurrent_elapsed += started.elapsed();
    result.concurrent_appends += CONCURRENT_WRITERS * APPENDS_PER_WRITER;
    Ok(())
}

fn report(results: &[ModeResult]) -> String {
    let baseline = &results[0];
    let rate = |count: usize, elapsed: Duration| count as f64 / elapsed.as_secs_f64();
    let mut out = String::from(
        "| commit mode | 1 writer p50 ms | 1 writer p99 ms | 1 writer appends/s | 64 writers appends/s | 1 writer vs quick repair | 64 writers vs quick repair |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let baseline_sequential = rate(baseline.sequential.len(), baseline.sequential_elapsed);
    let baseline_concurrent = rate(baseline.concurrent_appends, baseline.concurrent_elapsed);
    for (mode, result) in MODES.iter().zip(results) {
        let mut sorted = result.sequential.clone();
        sorted.sort();
        let ms = |p| percentile(&sorted, p).map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        let sequential = rate(result.sequential.len(), result.sequential_elapsed);
        let concurrent = rate(result.concurrent_appends, result.concurrent_elapsed);
        out.push_str(&format!(
            "| {mode:?} | {:.2} | {:.2} | {sequential:.0} | {concurrent:.0} | {:.2}× | {:.2}× |\n",
            ms(50.0),
            ms(99.0),
            sequential / baseline_sequential,
            concurrent / baseline_concurrent,
        ));
    }
    out
}
