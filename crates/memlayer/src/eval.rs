//! `memlayer eval`: offline measurements of memlayer's retrieval quality on public
//! conversation benchmarks, run through the real store, recall pipeline and embedder rather
//! than a model of them, so a change to any of them shows in the numbers.
//!
//! `memlayer eval recall --locomo FILE` scores evidence recall@k on a file in LoCoMo's
//! format: every sample goes into one temporary store as its own user, and each question is
//! put to the keyword index alone, the vector index alone and hybrid recall (`retrieval`). The scores
//! are printed as tables or JSON next to the paper's published reference (`report`).
//!
//! `memlayer eval planted` plants facts in generated conversations and checks, for each
//! context strategy, whether the assembled context holds the fact a later question needs
//! (`planted`). Both run on a throwaway store with the pipeline running (`stack`).

mod locomo;
mod planted;
mod report;
mod retrieval;
mod stack;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use memlayer_embed::{Embedder, EmbedderOptions};
use memlayer_index::MAX_RECALL_HITS;
use serde::Serialize;

use crate::config::EmbedArgs;
use report::Report;

/// What `memlayer eval` measures.
#[derive(Debug, Subcommand)]
pub(crate) enum EvalCommand {
    /// Evidence recall@k of keyword, vector and hybrid retrieval on a LoCoMo file.
    ///
    /// Every sample's turns are stored in one fresh temporary store, each sample as its own
    /// user's sessions, and embedded with the real model; each question is then asked of the
    /// keyword index alone, the vector index alone and hybrid recall in its sample's user
    /// scope, once, for the deepest k. R@k is the share of the question's evidence turns
    /// among the first k turns of that ranking, averaged per category and overall, printed
    /// beside the LoCoMo paper's reference (DRAGON retriever, dialog level).
    // Given as after_long_help because clap reflows doc-comment paragraphs, which would run
    // the example lines together.
    #[command(after_long_help = "Examples:\n  \
        memlayer eval recall --locomo locomo10.json\n  \
        memlayer eval recall --locomo locomo10.json --k 5,10 --turn-text dated --json")]
    Recall(RecallArgs),
    /// Whether each context strategy puts planted facts into the context, without a model.
    ///
    /// Plays a 60-turn conversation with four planted facts (one of them corrected later) and
    /// three questions about them, a suite of 20 cases (identifiers, preferences, dates and
    /// corrections planted 5 to 60 turns before the question) and a fact stated in one
    /// session and asked about in the next. Everything is appended to a temporary store and
    /// embedded with the real model; at each question every strategy assembles the context
    /// and a fact counts as retrieved when its value appears in it. Prints hits per strategy
    /// and depth, token costs, the combined strategy's targets and the cause of each of its
    /// misses.
    #[command(after_long_help = "Examples:\n  \
        memlayer eval planted\n  \
        memlayer eval planted --json --context-window 8192")]
    Planted(PlantedArgs),
}

/// Flags of `memlayer eval planted`.
#[derive(Debug, Args)]
pub(crate) struct PlantedArgs {
    /// Print one JSON document (every context's verdict, tokens per layer, the suite's hits
    /// per fact type, the misses with their causes) instead of tables.
    #[arg(long)]
    json: bool,
    /// The model's context window in tokens, for every strategy. The default is large
    /// enough for the whole conversations, so full history is the complete baseline;
    /// smaller windows show what each strategy drops under its budget.
    #[arg(long, value_name = "TOKENS", default_value_t = 128_000)]
    context_window: u32,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Flags of `memlayer eval recall`.
#[derive(Debug, Args)]
pub(crate) struct RecallArgs {
    /// A benchmark file in LoCoMo's format (like locomo10.json): a list of samples, each with
    /// a `conversation` of numbered sessions and a `qa` list whose evidence names turns.
    #[arg(long, value_name = "FILE")]
    locomo: PathBuf,
    /// The cut-offs k, comma-separated.
    #[arg(
        long = "k",
        value_name = "K,...",
        value_delimiter = ',',
        default_value = "1,5,10,25"
    )]
    ks: Vec<usize>,
    /// Print one JSON document (means per category and overall, and every question's
    /// scores) instead of tables.
    #[arg(long)]
    json: bool,
    /// How a turn becomes the message text that is stored, indexed and embedded. An image's
    /// caption is appended in every format, as "[shares an image: ...]".
    #[arg(long, value_enum, default_value_t = TurnText::Speaker)]
    turn_text: TurnText,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// The message text made from a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TurnText {
    /// The turn's text alone, as an application storing raw messages would.
    Plain,
    /// "Speaker: text", so the names the questions ask about are in the text.
    Speaker,
    /// "[session date] Speaker: text", so questions about when can match the date.
    Dated,
}

impl TurnText {
    fn describe(self) -> &'static str {
        match self {
            Self::Plain => "the turn's text; image captions appended",
            Self::Speaker => "\"speaker: text\"; image captions appended",
            Self::Dated => "\"[session date] speaker: text\"; image captions appended",
        }
    }
}

pub(crate) fn run(command: EvalCommand) -> anyhow::Result<()> {
    match command {
        EvalCommand::Recall(args) => recall(args),
        EvalCommand::Planted(args) => planted(args),
    }
}

/// The embedding model from the configured assets, checked first so a missing file is
/// reported by name.
fn open_embedder(embed: EmbedArgs) -> anyhow::Result<Embedder> {
    let assets = embed.assets()?;
    assets.check()?;
    Embedder::open(&assets, EmbedderOptions::default()).context("cannot load the embedding model")
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn planted(args: PlantedArgs) -> anyhow::Result<()> {
    let embedder = open_embedder(args.embed)?;
    let report = runtime()?.block_on(planted::evaluate(&embedder, args.context_window));
    embedder.shutdown();
    let report = report?;
    if args.json {
        println!("{}", report.json()?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

fn recall(args: RecallArgs) -> anyhow::Result<()> {
    let ks = cut_offs(args.ks)?;
    let dataset = locomo::load(&args.locomo)?;
    anyhow::ensure!(
        dataset.questions() > 0,
        "{} has no question whose evidence names a turn: nothing to score",
        args.locomo.display()
    );
    let embedder = open_embedder(args.embed)?;
    let runtime = runtime()?;
    let questions = runtime.block_on(retrieval::evaluate(
        &dataset,
        &embedder,
        &ks,
        args.turn_text,
    ));
    embedder.shutdown();
    let questions = questions?;
    let report = Report {
        dataset: args.locomo.display().to_string(),
        turn_text: args.turn_text,
        ks,
        samples: dataset.samples.len(),
        turns: dataset.turns(),
        skipped_questions: dataset.skipped_questions,
        unknown_evidence: dataset.unknown_evidence,
        questions,
    };
    if args.json {
        println!("{}", report.json()?);
    } else {
        print!("{}", report.table());
    }
    Ok(())
}

/// The cut-offs ascending, each once; zero is refused (it would score nothing), and so is
/// more than one recall answers with.
fn cut_offs(mut ks: Vec<usize>) -> anyhow::Result<Vec<usize>> {
    ks.sort_unstable();
    ks.dedup();
    anyhow::ensure!(!ks.is_empty(), "--k needs at least one cut-off");
    anyhow::ensure!(ks[0] > 0, "--k cut-offs must be at least 1");
    let deepest = ks[ks.len() - 1];
    anyhow::ensure!(
        deepest <= MAX_RECALL_HITS,
        "--k cut-offs must be at most {MAX_RECALL_HITS}, the most hits recall answers with"
    );
    Ok(ks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_offs_are_sorted_distinct_and_positive() {
        assert_eq!(cut_offs(vec![25, 1, 5, 5]).unwrap(), [1, 5, 25]);
        assert!(cut_offs(vec![]).is_err());
        assert!(cut_offs(vec![0, 5]).is_err());
        assert!(cut_offs(vec![10, MAX_RECALL_HITS + 1]).is_err());
    }
}
