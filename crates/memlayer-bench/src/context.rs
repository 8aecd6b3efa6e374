//! `context`: the latency of one turn's context for a long session, through
//! `memlayer_memory::ContextBuilder` — the call the `/context` endpoint makes — over a real
//! stack: a redb store in a temporary directory, `Recall` with the real embedder and its
//! indexing pipeline running, wired as `memlayer serve` wires them with nothing listening.
//!
//! One customer's main session holds `--turns` turns (a user message and an answer each) of
//! generated support chat with facts in it (`conversation`); four earlier sessions of the
//! same customer with the same agent, which recall searches by default, and one of another
//! customer, which it must not, sit beside it. Everything is embedded before anything is
//! timed. The strategies issue's target is for the combined strategy with every layer
//! (facts, recall, window): p95 < 2 ms without the query's embedding, < 15 ms with it.
//!
//! The two modes are measured side by side on the same questions: each iteration asks a
//! question never asked before (its embedding is part of the time), then asks it again (the
//! embedder's content-hash cache answers, so the time excludes the embedding). The same is
//! done with `overflow: summarize` in its steady state (the first call summarises and
//! persists the older turns; later calls start after the summary and write nothing). Each
//! iteration then times the parts of a build on their own, so the report says where the
//! time goes.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use memlayer_embed::{Assets, Embedder, EmbedderOptions};
use memlayer_index::{Excluded, Recall, RecallOptions, RecallQuery, Scope};
use memlayer_memory::{
    Built, ContextBuilder, ContextRequest, ContextSettings, FactSheet, History, LayerInputs,
    RecalledMessage, TokenEncoding, assemble, sliding_window,
};
use memlayer_store::{
    Access, Append, Message, Metadata, NewMessage, NewSession, Role, Store, Timestamp,
};
use tokio::sync::oneshot;

use crate::corpus::support as conversation;
use crate::report::{self, load_average, percentile, runtime};

const TENANT: &str = "default";
const AGENT: &str = "support-agent";
const USER: &str = "customer-1";
const OTHER_USER: &str = "customer-2";
const MAIN_SESSION: &str = "support-main";
/// The server's default token encoding.
const ENCODING: TokenEncoding = TokenEncoding::Cl100kBase;
/// Earlier sessions of the same customer and agent, and their length in turns.
const EARLIER_SESSIONS: usize = 4;
const EARLIER_TURNS: usize = 60;
/// Messages per append: one durable commit each.
const APPEND_BATCH: usize = 100;
/// Untimed builds before the measurement, so caches, pools and lazy statics are warm.
const WARM_UP: usize = 20;
/// How long the pipeline may embed nothing before the benchmark gives up.
const STALL_LIMIT: Duration = Duration::from_secs(120);
/// The targets for the p95 of a combined context of a 1,000-turn session.
const TARGET_WITHOUT_EMBEDDING: Duration = Duration::from_millis(2);
const TARGET_WITH_EMBEDDING: Duration = Duration::from_millis(15);

/// The settings every timed build uses: the combined strategy with every layer, as the
/// defaults give it (facts, `recall_k` 4 over the user's sessions with this agent, a window
/// of the last 10 exchanges, 8,192-token context window).
fn combined(summarize: bool) -> serde_json::Map<String, serde_json::Value> {
    let mut overrides = serde_json::Map::new();
    overrides.insert("strategy".into(), "combined".into());
    overrides.insert("recall_k".into(), 4.into());
    overrides.insert("max_turns".into(), 10.into());
    overrides.insert(
        "overflow".into(),
        if summarize { "summarize" } else { "drop" }.into(),
    );
    overrides
}

/// One timed quantity: every sample, sorted when reported.
struct Series {
    name: &'static str,
    what: &'static str,
    /// The p95 target this row is judged against, if any.
    target: Option<Duration>,
    samples: Vec<Duration>,
}

impl Series {
    fn new(name: &'static str, what: &'static str, target: Option<Duration>) -> Self {
        Self {
            name,
            what,
            target,
            samples: Vec::new(),
        }
    }

    fn time<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = work();
        self.samples.push(start.elapsed());
        out
    }

    async fn time_async<T>(&mut self, work: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = work.await;
        self.samples.push(start.elapsed());
        out
    }

    fn row(&mut self) -> String {
        self.samples.sort_unstable();
        let at = |p: f64| percentile(&self.samples, p).map_or(f64::NAN, ms);
        let mean = self.samples.iter().sum::<Duration>() / self.samples.len().max(1) as u32;
        let p95 = percentile(&self.samples, 95.0).unwrap_or(Duration::MAX);
        let verdict = match self.target {
            Some(target) if p95 < target => format!("< {:.0} ms: met", ms(target)),
            Some(target) => format!("< {:.0} ms: **missed**", ms(target)),
            None => String::new(),
        };
        format!(
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {verdict} |",
            self.name,
            self.what,
            self.samples.len(),
            at(50.0),
            at(95.0),
            at(99.0),
            ms(mean),
        )
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// What was stored, for the report.
struct Corpus {
    main_messages: usize,
    main_tokens: u64,
    total_messages: usize,
    embed_time: Duration,
}

/// Everything a run measured.
struct Measured {
    corpus: Corpus,
    builds: Vec<Series>,
    parts: Vec<Series>,
    first_summary: Duration,
    summary_range: Option<(u64, u64)>,
    /// The drop and summarize contexts of the last iteration, for their composition.
    example: [Built; 2],
    facts: usize,
    fact_history: usize,
    cache: (u64, u64),
}

pub(crate) fn run(assets: &Assets, turns: usize, iterations: usize) -> anyhow::Result<()> {
    ensure!(turns >= 20, "give at least 20 turns");
    ensure!(iterations > 0, "give at least one iteration");
    let load_before = load_average()?;
    let runtime = runtime()?;
    let embedder = Embedder::open(assets, EmbedderOptions::default())?;
    let measured = runtime.block_on(measure(&embedder, turns, iterations));
    embedder.shutdown();
    let mut measured = measured?;
    let load_after = load_average()?;
    print_report(&mut measured, turns, iterations, [load_before, load_after])
}

async fn measure(embedder: &Embedder, turns: usize, iterations: usize) -> anyhow::Result<Measured> {
    let dir = tempfile::Builder::new()
        .prefix("memlayer-bench-context-")
        .tempdir()
        .context("could not create a temporary directory for the store")?;
    let store = Store::open(dir.path().join("memlayer.redb")).context("cannot open the store")?;
    let recall = Recall::open(store.clone(), embedder.clone(), RecallOptions::default())
        .context("cannot build the recall indexes")?;
    let (stop, stopped) = oneshot::channel::<()>();
    let pipeline = tokio::spawn(recall.clone().run_pipeline(async move {
        let _ = stopped.await;
    }));
    let contexts = ContextBuilder::new(store.clone(), recall.clone(), ENCODING);
    let result = async {
        let (corpus, texts) = fill_store(&store, &recall, turns).await?;
        measure_builds(
            &store, &recall, &contexts, embedder, corpus, &texts, iterations,
        )
        .await
    }
    .await;
    let _ = stop.send(());
    let joined = pipeline.await;
    store.shutdown();
    joined.context("the indexing pipeline panicked")?;
    result
}

/// Appends every session (the main one last, as the newest) and waits until the pipeline
/// has embedded every message. Returns what was stored and every stored text.
async fn fill_store(
    store: &Store,
    recall: &Recall,
    turns: usize,
) -> anyhow::Result<(Corpus, HashSet<String>)> {
    // Timestamps a minute apart from a fixed start, so every run stores the same records.
    let mut clock: u64 = 1_790_000_000_000_000;
    let mut texts = HashSet::new();
    let mut total = 0;
    let mut sessions: Vec<(String, &str, u64, usize)> = (1..=EARLIER_SESSIONS)
        .map(|i| {
            (
                format!("support-earlier-{i}"),
                USER,
                i as u64,
                EARLIER_TURNS,
            )
        })
        .collect();
    sessions.push((
        "support-other-customer".into(),
        OTHER_USER,
        99,
        EARLIER_TURNS,
    ));
    sessions.push((MAIN_SESSION.into(), USER, 0, turns));
    let mut main_tokens = 0u64;
    let start = Instant::now();
    for (session, user, stream, turns) in &sessions {
        eprintln!("memlayer-bench: appending {turns} turns to {session}");
        let messages: Vec<NewMessage> = conversation::conversation(*stream, *turns)
            .into_iter()
            .flat_map(|turn| [(Role::User, turn.user), (Role::Assistant, turn.assistant)])
            .map(|(role, content)| {
                clock += 30_000_000;
                texts.insert(content.clone());
                NewMessage {
                    role,
                    token_count: ENCODING.count(&content),
                    content,
                    timestamp: Some(Timestamp::from_micros(clock)),
                    metadata: Metadata::new(),
                }
            })
            .collect();
        if session == MAIN_SESSION {
            main_tokens = messages.iter().map(|m| u64::from(m.token_count)).sum();
        }
        total += messages.len();
        for chunk in messages.chunks(APPEND_BATCH) {
            let append = Append {
                messages: chunk.to_vec(),
                create: Some(NewSession {
                    user_id: (*user).to_owned(),
                    agent_id: AGENT.to_owned(),
                    flow_id: None,
                    metadata: Metadata::new(),
                }),
                idempotency_key: None,
            };
            store
                .sessions()
                .append(&Access::tenant_wide(TENANT), session, append)
                .await?;
        }
    }
    wait_until_embedded(recall, total).await?;
    Ok((
        Corpus {
            main_messages: 2 * turns,
            main_tokens,
            total_messages: total,
            embed_time: start.elapsed(),
        },
        texts,
    ))
}

async fn wait_until_embedded(recall: &Recall, messages: usize) -> anyhow::Result<()> {
    let mut last = (0, Instant::now());
    let mut reported = Instant::now();
    loop {
        let embedded = recall.indexed_vectors();
        if embedded >= messages {
            eprintln!("memlayer-bench: all {messages} messages embedded");
            return Ok(());
        }
        if embedded > last.0 {
            last = (embedded, Instant::now());
        } else if last.1.elapsed() > STALL_LIMIT {
            bail!(
                "embedding stalled at {embedded} of {messages} messages for {} s",
                STALL_LIMIT.as_secs()
            );
        }
        if reported.elapsed() > Duration::from_secs(5) {
            eprintln!("memlayer-bench: {embedded} of {messages} messages embedded");
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn measure_builds(
    store: &Store,
    recall: &Recall,
    contexts: &ContextBuilder,
    embedder: &Embedder,
    corpus: Corpus,
    texts: &HashSet<String>,
    iterations: usize,
) -> anyhow::Result<Measured> {
    let avoid: HashSet<&str> = texts.iter().map(String::as_str).collect();
    // Per iteration: one question for the drop builds, one for the summarize builds, one for
    // recall alone, one for the embedder alone; then the warm-up's.
    let questions = conversation::questions(4 * iterations + 2 * WARM_UP, &avoid);
    let (timed, warm_up) = questions.split_at(4 * iterations);
    let build = |query: &str, summarize: bool| {
        contexts.build(ContextRequest {
            access: Access::tenant_wide(TENANT),
            session_id: MAIN_SESSION.into(),
            query: Some(query.to_owned()),
            overrides: combined(summarize),
        })
    };

    eprintln!("memlayer-bench: {WARM_UP} warm-up builds");
    for query in &warm_up[..WARM_UP] {
        checked(build(query, false).await?, false)?;
    }
    // The first summarised build summarises the older turns and persists the summary; every
    // later one starts after it and writes nothing (checked below).
    let start = Instant::now();
    let first = build(&warm_up[WARM_UP], true).await?;
    let first_summary = start.elapsed();
    ensure!(
        first.summary.as_ref().is_some_and(|note| note.written),
        "the first summarised build wrote no summary: the session fits the budget"
    );
    let summary_range = first.assembled.report.summary;
    for query in &warm_up[WARM_UP + 1..] {
        checked(build(query, true).await?, true)?;
    }

    // The breakdown's inputs, read once: the session as `build` reads it, its facts, and
    // the recalled messages of one question.
    let messages =
        store
            .sessions()
            .messages(&Access::tenant_wide(TENANT), MAIN_SESSION, 0, usize::MAX)?;
    ensure!(
        messages.len() == corpus.main_messages,
        "the session is short"
    );
    let facts = FactSheet::from_messages(&messages);
    let settings = ContextSettings::layered([&combined(false)])?;
    let in_window = window_indices(&messages, &settings);
    let recall_query = |query: &str| RecallQuery {
        access: Access::tenant_wide(TENANT),
        scope: Scope::User {
            user_id: USER.into(),
            agent_id: Some(AGENT.into()),
        },
        query: query.to_owned(),
        k: settings.recall_k,
        roles: None,
        after: None,
        before: None,
        exclude: Some(Excluded {
            session_id: MAIN_SESSION.into(),
            indices: in_window.clone(),
        }),
    };
    let recalled: Vec<RecalledMessage> = recall
        .recall(recall_query(&warm_up[0]))
        .await?
        .hits
        .into_iter()
        .map(|hit| RecalledMessage {
            current_session: hit.session.session_id == MAIN_SESSION,
            session_id: hit.session.session_id,
            message: hit.message,
            score: hit.score,
        })
        .collect();
    ensure!(
        recalled.len() == settings.recall_k,
        "recall found too little"
    );

    let n = corpus.main_messages;
    let mut builds = vec![
        Series::new(
            "build, overflow drop",
            "new question: includes its embedding",
            Some(TARGET_WITH_EMBEDDING),
        ),
        Series::new(
            "build, overflow drop",
            "question embedded before",
            Some(TARGET_WITHOUT_EMBEDDING),
        ),
        Series::new(
            "build, overflow summarize (steady state)",
            "new question: includes its embedding",
            Some(TARGET_WITH_EMBEDDING),
        ),
        Series::new(
            "build, overflow summarize (steady state)",
            "question embedded before",
            Some(TARGET_WITHOUT_EMBEDDING),
        ),
    ];
    let mut parts = vec![
        Series::new(
            "store read, every message in full",
            "`Store::session` + `Store::messages` of the session (what a build read before)",
            None,
        ),
        Series::new(
            "store read, outlines and the window",
            "`Store::snapshot`, `SessionSnapshot::outline` of every message, \
             `SessionSnapshot::messages` of the window's (what a build reads when the fact \
             cache has no entry; with one, only the window's messages)",
            None,
        ),
        Series::new(
            "`FactSheet::from_messages`",
            "every message of the session",
            None,
        ),
        Series::new(
            "`assemble`",
            "in-memory messages, precomputed facts, 4 recalled",
            None,
        ),
        Series::new(
            "`Recall::recall`",
            "new question: includes its embedding",
            None,
        ),
        Series::new("`Recall::recall`", "question embedded before", None),
        Series::new("`Embedder::embed`", "one new question, nothing else", None),
    ];

    let cache_before = embedder.cache_stats();
    let mut example = None;
    eprintln!("memlayer-bench: {iterations} iterations over a {n}-message session");
    for (i, chunk) in timed.chunks_exact(4).enumerate() {
        let [drop_q, summary_q, recall_q, embed_q] = chunk else {
            unreachable!("chunks of four")
        };
        let new_drop = builds[0].time_async(build(drop_q, false)).await?;
        let again_drop = builds[1].time_async(build(drop_q, false)).await?;
        let new_summary = builds[2].time_async(build(summary_q, true)).await?;
        let again_summary = builds[3].time_async(build(summary_q, true)).await?;
        checked(new_drop, false)?;
        checked(new_summary, true)?;
        let again = (checked(again_drop, false)?, checked(again_summary, true)?);
        if i + 1 == iterations {
            example = Some([again.0, again.1]);
        }

        let read = parts[0].time(|| -> anyhow::Result<Vec<Message>> {
            store
                .sessions()
                .session(&Access::tenant_wide(TENANT), MAIN_SESSION)?
                .context("the session is gone")?;
            Ok(store.sessions().messages(
                &Access::tenant_wide(TENANT),
                MAIN_SESSION,
                0,
                usize::MAX,
            )?)
        })?;
        ensure!(read.len() == n, "the store read {} messages", read.len());
        let (outlines, window) = parts[1].time(|| -> anyhow::Result<_> {
            let snapshot = store
                .sessions()
                .snapshot(&Access::tenant_wide(TENANT), MAIN_SESSION)?
                .context("the session is gone")?;
            let outlines = snapshot.outline(0)?;
            Ok((outlines, snapshot.messages(in_window[0], usize::MAX)?))
        })?;
        ensure!(
            outlines.len() == n && window.len() == in_window.len(),
            "the snapshot read {} outlines and {} messages",
            outlines.len(),
            window.len()
        );
        let sheet = parts[2].time(|| FactSheet::from_messages(&read));
        ensure!(sheet == facts, "the facts changed");
        let layers = LayerInputs {
            summary: None,
            facts: Some(&facts),
            recalled: recalled.clone(),
            memories: Vec::new(),
            session_memory: None,
            lessons: None,
        };
        parts[3].time(|| assemble(&messages, &layers, &settings, ENCODING))?;
        parts[4]
            .time_async(recall.recall(recall_query(recall_q)))
            .await?;
        parts[5]
            .time_async(recall.recall(recall_query(recall_q)))
            .await?;
        parts[6]
            .time_async(embedder.embed(TENANT, vec![embed_q.clone()]))
            .await?;
    }
    let cache_after = embedder.cache_stats();
    Ok(Measured {
        corpus,
        builds,
        parts,
        first_summary,
        summary_range,
        example: example.context("no iteration ran")?,
        facts: facts.entries().len(),
        fact_history: facts.entries().values().map(|e| e.history.len()).sum(),
        cache: (
            cache_after.hits - cache_before.hits,
            cache_after.misses - cache_before.misses,
        ),
    })
}

/// The indices of the messages the window holds, which recall leaves out, as
/// `ContextBuilder` computes them.
fn window_indices(messages: &[Message], settings: &ContextSettings) -> Vec<u64> {
    sliding_window(&History::new(messages), settings)
        .recent
        .iter()
        .flat_map(|exchange| exchange.messages.iter().map(|m| m.index))
        .collect()
}

/// Fails unless a build recalled from both indexes, used every layer and, in the summarised
/// steady state, wrote nothing.
fn checked(built: Built, summarize: bool) -> anyhow::Result<Built> {
    if let Some(reason) = &built.recall_degraded {
        bail!("recall was degraded although every message was embedded: {reason}");
    }
    let report = &built.assembled.report;
    ensure!(report.facts > 0, "the context holds no facts");
    ensure!(!report.recalled.is_empty(), "the context recalled nothing");
    ensure!(!report.window.is_empty(), "the context has no window");
    if summarize {
        ensure!(
            built.summary.is_none() && report.summary.is_some(),
            "a steady-state summarised build wrote a summary or used none"
        );
    }
    Ok(built)
}

fn print_report(
    measured: &mut Measured,
    turns: usize,
    iterations: usize,
    [load_before, load_after]: [String; 2],
) -> anyhow::Result<()> {
    let corpus = &measured.corpus;
    report::print_run_header(
        "memlayer context assembly benchmark",
        &[load_before, load_after],
    )?;
    println!(
        "- data: a redb store in a temporary directory; the main session has {turns} turns \
         ({} messages, {} tokens of generated support chat); {EARLIER_SESSIONS} earlier \
         sessions of the same user and agent and 1 of another user, {EARLIER_TURNS} turns \
         each; {} messages in all, appended and embedded by the recall pipeline in {:.1} s",
        corpus.main_messages,
        corpus.main_tokens,
        corpus.total_messages,
        corpus.embed_time.as_secs_f64()
    );
    println!(
        "- settings: `ContextSettings` defaults with strategy `combined`, recall_k 4 (scope: \
         the user's sessions with this agent), max_turns 10, context window 8,192 tokens \
         (budget 7,372), encoding cl100k_base; facts: {} keys, {} superseded values",
        measured.facts, measured.fact_history
    );
    println!(
        "- timing: {iterations} iterations after {WARM_UP} warm-up builds; each iteration \
         runs the four builds in table order (a new question, then the same question again, \
         whose embedding the embedder's cache holds), then each part once; wall time on a \
         multi-threaded tokio runtime; the embedder's cache answered {} and missed {} texts \
         during the timed iterations",
        measured.cache.0, measured.cache.1
    );
    println!(
        "- `overflow: summarize`: the first build summarised messages {} and persisted the \
         summary in {:.1} ms (extractive summariser); the timed ones start after it and write \
         nothing",
        measured
            .summary_range
            .map_or("none".to_owned(), |(a, b)| format!("{a}–{b}")),
        ms(measured.first_summary)
    );
    println!();
    println!("| measured | question | samples | p50 ms | p95 ms | p99 ms | mean ms | p95 target |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |");
    for series in &mut measured.builds {
        println!("{}", series.row());
    }
    println!();
    println!("Parts of a build, timed on their own in the same iterations:");
    println!();
    println!("| part | what | samples | p50 ms | p95 ms | p99 ms | mean ms | |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |");
    for series in &mut measured.parts {
        println!("{}", series.row());
    }
    println!();
    for (name, built) in ["drop", "summarize"].iter().zip(&measured.example) {
        let report = &built.assembled.report;
        let mut layers = String::new();
        for layer in &report.layers {
            let _ = write!(
                layers,
                "{:?} {} ({} tokens), ",
                layer.layer, layer.pieces, layer.tokens
            );
        }
        println!(
            "- a context with overflow {name}: {} of {} tokens; {}{} facts, {} recalled, \
             window of {} messages",
            report.total_tokens,
            report.budget,
            layers,
            report.facts,
            report.recalled.len(),
            report.window.len()
        );
    }
    Ok(())
}
