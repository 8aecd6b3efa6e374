//! What `memlayer eval planted` found, and its two outputs: text tables (per question of the
//! 60-turn conversation, hits by depth and per case for the suite, the cross-session rows,
//! the targets and every miss of the combined strategy with its cause) and one JSON document
//! holding the same and each context's tokens per layer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use memlayer_memory::{Layer, LayerTokens};
use serde::Serialize;

use super::script::{DEPTHS, FACT_KINDS, FactKind, Probe, SUITE_QUERY_TURN, Source};
use super::{CONTENDERS, Contender, layer_name};

/// The share of full history's tokens the combined strategy may use at the last turn.
const TOKEN_SHARE_TARGET: f64 = 0.15;

/// What a context did with a planted fact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// The value is in the context (and no superseded value stands uncorrected).
    Found,
    /// The value is not in the context.
    Missing,
    /// The corrected value is in the context, but so is the old one, uncorrected.
    Stale,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Self::Found => "found",
            Self::Missing => "missing",
            Self::Stale => "stale",
        }
    }
}

/// One strategy's context for one question.
#[derive(Debug, Serialize)]
pub(crate) struct Judgement {
    pub(crate) verdict: Verdict,
    /// The layers whose pieces contain the expected value.
    pub(crate) found_in: Vec<Layer>,
    /// Tokens of the whole context (`report.total_tokens`).
    pub(crate) tokens: u32,
    pub(crate) layers: Vec<LayerTokens>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Setup {
    pub(crate) context_window: u32,
    pub(crate) budget: u32,
    pub(crate) encoding: &'static str,
    pub(crate) recall_k: usize,
    pub(crate) embedding_model: String,
    pub(crate) strategies: Vec<StrategySetup>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StrategySetup {
    pub(crate) name: Contender,
    pub(crate) description: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct PlantStored {
    pub(crate) turn: usize,
    pub(crate) fact: &'static str,
    pub(crate) stored: bool,
}

/// A question of the 60-turn conversation and every strategy's context for it.
#[derive(Debug, Serialize)]
pub(crate) struct ProbeResult {
    pub(crate) turn: usize,
    pub(crate) stored: bool,
    #[serde(flatten)]
    pub(crate) probe: Probe,
    pub(crate) results: BTreeMap<Contender, Judgement>,
}

/// Token costs of the context for the conversation's last turn.
#[derive(Debug, Serialize)]
pub(crate) struct FinalTurn {
    pub(crate) turn: usize,
    pub(crate) tokens: BTreeMap<Contender, u32>,
    pub(crate) combined_share_of_full_history: f64,
}

impl FinalTurn {
    pub(crate) fn new(turn: usize, tokens: BTreeMap<Contender, u32>) -> Self {
        let of = |contender| tokens.get(&contender).copied().unwrap_or_default();
        let combined_share_of_full_history =
            share(of(Contender::Combined), of(Contender::FullHistory));
        Self {
            turn,
            tokens,
            combined_share_of_full_history,
        }
    }
}

/// `tokens` as a share of `full_history`'s.
pub(crate) fn share(tokens: u32, full_history: u32) -> f64 {
    f64::from(tokens) / f64::from(full_history.max(1))
}

/// What the combined strategy did with its window set to a number of exchanges.
#[derive(Debug, Default)]
pub(crate) struct WindowTally {
    /// Suite cases whose fact the context holds.
    pub(crate) suite_found: usize,
    /// Each suite context's tokens as a share of the same case's full history.
    pub(crate) suite_shares: Vec<f64>,
    /// Tokens at the conversation's last turn.
    pub(crate) conversation_tokens: u32,
}

/// One row of the window trade-off: the combined strategy with `max_turns` set, or with
/// its default (`None`), which adapts.
#[derive(Debug, Serialize)]
pub(crate) struct WindowRow {
    pub(crate) max_turns: Option<usize>,
    /// Suite facts found, of the suite's cases.
    pub(crate) suite_found: usize,
    /// The suite contexts' mean share of full history's tokens.
    pub(crate) suite_share: f64,
    /// The share of full history's tokens at the conversation's last turn.
    pub(crate) conversation_share: f64,
}

/// What a narrower or wider window costs and finds, beside the default.
#[derive(Debug, Serialize)]
pub(crate) struct TradeOff {
    pub(crate) cases: usize,
    pub(crate) rows: Vec<WindowRow>,
}

impl TradeOff {
    pub(crate) fn new(
        conversation: &ConversationResult,
        suite: &SuiteResult,
        windows: &BTreeMap<usize, WindowTally>,
    ) -> Self {
        let full_history = conversation
            .final_turn
            .tokens
            .get(&Contender::FullHistory)
            .copied()
            .unwrap_or_default();
        let mean = |shares: &[f64]| shares.iter().sum::<f64>() / shares.len().max(1) as f64;
        let default_shares: Vec<f64> = suite
            .cases
            .iter()
            .map(|case| {
                let tokens = |contender| case.results.get(&contender).map_or(0, |j| j.tokens);
                share(tokens(Contender::Combined), tokens(Contender::FullHistory))
            })
            .collect();
        let default = WindowRow {
            max_turns: None,
            suite_found: suite.hits(Contender::Combined),
            suite_share: mean(&default_shares),
            conversation_share: conversation.final_turn.combined_share_of_full_history,
        };
        let rows = std::iter::once(default)
            .chain(windows.iter().map(|(&max_turns, tally)| WindowRow {
                max_turns: Some(max_turns),
                suite_found: tally.suite_found,
                suite_share: mean(&tally.suite_shares),
                conversation_share: share(tally.conversation_tokens, full_history),
            }))
            .collect();
        Self {
            cases: suite.cases.len(),
            rows,
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct ConversationResult {
    pub(crate) turns: usize,
    pub(crate) plants: Vec<PlantStored>,
    pub(crate) probes: Vec<ProbeResult>,
    pub(crate) final_turn: FinalTurn,
}

/// One suite case and every strategy's context for its question.
#[derive(Debug, Serialize)]
pub(crate) struct CaseResult {
    pub(crate) kind: FactKind,
    pub(crate) depth: usize,
    pub(crate) source: Source,
    pub(crate) plant_turn: usize,
    pub(crate) stored: bool,
    #[serde(flatten)]
    pub(crate) probe: Probe,
    pub(crate) results: BTreeMap<Contender, Judgement>,
}

impl CaseResult {
    fn hit(&self, contender: Contender) -> bool {
        self.results
            .get(&contender)
            .is_some_and(|j| j.verdict == Verdict::Found)
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct SuiteResult {
    pub(crate) query_turn: usize,
    pub(crate) depths: [usize; 5],
    /// Per strategy and depth: how many of the four fact types were found.
    pub(crate) hits_by_depth: BTreeMap<Contender, BTreeMap<usize, usize>>,
    /// Per strategy, fact type and depth: found or not.
    pub(crate) hits_by_kind: BTreeMap<Contender, BTreeMap<FactKind, BTreeMap<usize, bool>>>,
    pub(crate) cases: Vec<CaseResult>,
}

impl SuiteResult {
    pub(crate) fn new(cases: Vec<CaseResult>) -> Self {
        let mut hits_by_depth: BTreeMap<Contender, BTreeMap<usize, usize>> = BTreeMap::new();
        let mut hits_by_kind: BTreeMap<Contender, BTreeMap<FactKind, BTreeMap<usize, bool>>> =
            BTreeMap::new();
        for contender in CONTENDERS {
            for case in &cases {
                let hit = case.hit(contender);
                *hits_by_depth
                    .entry(contender)
                    .or_default()
                    .entry(case.depth)
                    .or_default() += usize::from(hit);
                hits_by_kind
                    .entry(contender)
                    .or_default()
                    .entry(case.kind)
                    .or_default()
                    .insert(case.depth, hit);
            }
        }
        Self {
            query_turn: SUITE_QUERY_TURN,
            depths: DEPTHS,
            hits_by_depth,
            hits_by_kind,
            cases,
        }
    }

    fn hits(&self, contender: Contender) -> usize {
        self.cases.iter().filter(|c| c.hit(contender)).count()
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct CrossRow {
    pub(crate) strategy: Contender,
    /// For the combined strategy: which sessions recall searched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) recall_scope: Option<&'static str>,
    #[serde(flatten)]
    pub(crate) judgement: Judgement,
}

#[derive(Debug, Serialize)]
pub(crate) struct CrossSessionResult {
    pub(crate) first_session_turns: usize,
    pub(crate) plant_turn: usize,
    /// The question is the last of these turns.
    pub(crate) second_session_turns: usize,
    pub(crate) stored: bool,
    #[serde(flatten)]
    pub(crate) probe: Probe,
    pub(crate) rows: Vec<CrossRow>,
}

/// A context of the combined strategy without the fact, and why.
#[derive(Debug, Serialize)]
pub(crate) struct Miss {
    pub(crate) at: String,
    pub(crate) fact: &'static str,
    pub(crate) expected: &'static str,
    pub(crate) verdict: Verdict,
    pub(crate) cause: String,
}

/// A goal the combined strategy is held to, and how it did.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
    pub(crate) goal: &'static str,
    pub(crate) measured: String,
    pub(crate) met: bool,
}

/// The whole evaluation.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) setup: Setup,
    pub(crate) conversation: ConversationResult,
    pub(crate) suite: SuiteResult,
    pub(crate) cross_session: CrossSessionResult,
    pub(crate) window_trade_off: TradeOff,
    pub(crate) targets: Vec<Target>,
    pub(crate) combined_misses: Vec<Miss>,
    pub(crate) seconds: f64,
}

impl Report {
    pub(crate) fn new(
        setup: Setup,
        conversation: ConversationResult,
        suite: SuiteResult,
        cross_session: CrossSessionResult,
        window_trade_off: TradeOff,
        combined_misses: Vec<Miss>,
        seconds: f64,
    ) -> Self {
        let targets = targets(&conversation, &suite, &cross_session);
        Self {
            setup,
            conversation,
            suite,
            cross_session,
            window_trade_off,
            targets,
            combined_misses,
            seconds,
        }
    }

    pub(crate) fn json(&self) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(self)?)
    }

    /// The human-readable report.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        self.write_setup(&mut out);
        self.write_conversation(&mut out);
        self.write_suite(&mut out);
        self.write_cross_session(&mut out);
        self.write_trade_off(&mut out);
        self.write_outcome(&mut out);
        out
    }

    // Writing to a String cannot fail, hence the ignored results below.

    fn write_setup(&self, out: &mut String) {
        let setup = &self.setup;
        let _ = writeln!(
            out,
            "memlayer eval planted: does each context strategy put the fact a question needs \
             into the context?\n\
             storage: the store holds the message stating the fact. retrieval: the expected \
             value appears in the\n\
             assembled context (plain text, ignoring case); a corrected value counts only if \
             the old one does not\n\
             stand uncorrected beside it. utilisation (a model using the fact) is not \
             measured: no model runs.\n"
        );
        let _ = writeln!(
            out,
            "context window {} tokens (budget {}), {}; recall: {} over the same store, k = {}",
            setup.context_window,
            setup.budget,
            setup.encoding,
            setup.embedding_model,
            setup.recall_k
        );
        for strategy in &setup.strategies {
            let _ = writeln!(
                out,
                "  {:<16}{}",
                strategy.name.name(),
                strategy.description
            );
        }
    }

    fn write_conversation(&self, out: &mut String) {
        let conversation = &self.conversation;
        let plants: Vec<String> = conversation
            .plants
            .iter()
            .map(|p| format!("{} ({})", p.turn, p.fact))
            .collect();
        let stored = conversation.plants.iter().filter(|p| p.stored).count();
        let _ = writeln!(
            out,
            "\n1. {}-turn conversation. Facts planted at turns {}; stored: {stored} of {}.",
            conversation.turns,
            plants.join(", "),
            conversation.plants.len()
        );
        let _ = write!(out, "{:<6}{:<30}{:<18}", "turn", "fact", "expected");
        for contender in CONTENDERS {
            let _ = write!(out, "{:>17}", contender.name());
        }
        out.push('\n');
        for probe in &conversation.probes {
            let _ = write!(
                out,
                "{:<6}{:<30}{:<18}",
                probe.turn, probe.probe.fact, probe.probe.expected
            );
            for contender in CONTENDERS {
                if let Some(j) = probe.results.get(&contender) {
                    let _ = write!(
                        out,
                        "{:>17}",
                        format!("{} {:>6}", j.verdict.word(), j.tokens)
                    );
                }
            }
            out.push('\n');
        }
        let last = &conversation.final_turn;
        let _ = write!(
            out,
            "{:<6}{:<48}",
            last.turn, "(tokens of the last turn's context)"
        );
        for contender in CONTENDERS {
            let tokens = last.tokens.get(&contender).copied().unwrap_or_default();
            let _ = write!(out, "{tokens:>17}");
        }
        let _ = writeln!(
            out,
            "\ncells: verdict and context tokens. At turn {}, combined uses {:.1}% of full \
             history's tokens.",
            last.turn,
            last.combined_share_of_full_history * 100.0
        );
    }

    fn write_suite(&self, out: &mut String) {
        let suite = &self.suite;
        let stored = suite.cases.iter().filter(|c| c.stored).count();
        let _ = writeln!(
            out,
            "\n2. Depth suite: {} fact types x {} depths, each case its own conversation, the \
             question at turn {};\n   depth = turns between the fact and the question; cells: \
             hits of {}; stored: {stored} of {}.",
            FACT_KINDS.len(),
            DEPTHS.len(),
            suite.query_turn,
            FACT_KINDS.len(),
            suite.cases.len()
        );
        let _ = write!(out, "{:<16}", "strategy");
        for depth in DEPTHS {
            let _ = write!(out, "{:>7}", format!("d={depth}"));
        }
        let _ = writeln!(out, "{:>8}", "total");
        for contender in CONTENDERS {
            let _ = write!(out, "{:<16}", contender.name());
            for depth in DEPTHS {
                let hits = suite.hits_by_depth[&contender][&depth];
                let _ = write!(out, "{:>7}", format!("{hits}/{}", FACT_KINDS.len()));
            }
            let _ = writeln!(
                out,
                "{:>8}",
                format!("{}/{}", suite.hits(contender), suite.cases.len())
            );
        }
        let _ = write!(
            out,
            "\nper case:\n{:<12}{:>6}  {:<10}{:<18}",
            "kind", "depth", "stated by", "expected"
        );
        for contender in CONTENDERS {
            let _ = write!(out, "{:<16}", contender.name());
        }
        let _ = writeln!(out, "combined found it in");
        for case in &suite.cases {
            let _ = write!(
                out,
                "{:<12}{:>6}  {:<10}{:<18}",
                format!("{:?}", case.kind).to_lowercase(),
                case.depth,
                format!("{:?}", case.source).to_lowercase(),
                case.probe.expected
            );
            for contender in CONTENDERS {
                let word = case
                    .results
                    .get(&contender)
                    .map_or("", |j| j.verdict.word());
                let _ = write!(out, "{word:<16}");
            }
            let layers = case
                .results
                .get(&Contender::Combined)
                .map(|j| layer_list(&j.found_in))
                .unwrap_or_default();
            let _ = writeln!(out, "{layers}");
        }
    }

    fn write_cross_session(&self, out: &mut String) {
        let cross = &self.cross_session;
        let _ = writeln!(
            out,
            "\n3. Cross-session: {:?} stated at turn {} of the user's previous session ({} turns, \
             stored: {}),\n   asked at turn {} of the next session: {:?}",
            cross.probe.expected,
            cross.plant_turn,
            cross.first_session_turns,
            if cross.stored { "yes" } else { "no" },
            cross.second_session_turns,
            cross.probe.query
        );
        let _ = writeln!(
            out,
            "{:<16}{:<14}{:<9}{:>7}  found in",
            "strategy", "recall scope", "verdict", "tokens"
        );
        for row in &cross.rows {
            let _ = writeln!(
                out,
                "{:<16}{:<14}{:<9}{:>7}  {}",
                row.strategy.name(),
                row.recall_scope.unwrap_or("-"),
                row.judgement.verdict.word(),
                row.judgement.tokens,
                layer_list(&row.judgement.found_in)
            );
        }
        let _ = writeln!(
            out,
            "/context recalls in the user scope by default (the user's sessions with the same \
             agent); `recall_scope: session` limits it to the current session."
        );
    }

    fn write_trade_off(&self, out: &mut String) {
        let trade_off = &self.window_trade_off;
        let _ = writeln!(
            out,
            "\nthe combined strategy's window (max_turns): suite facts found, and tokens as a \
             share of full history's\n{:<18}{:>8}{:>14}{:>20}",
            "window", "suite", "suite tokens", "conversation tokens"
        );
        for row in &trade_off.rows {
            let window = row
                .max_turns
                .map_or_else(|| "default (adapts)".to_owned(), |turns| turns.to_string());
            let _ = writeln!(
                out,
                "{window:<18}{:>8}{:>13.1}%{:>19.1}%",
                format!("{}/{}", row.suite_found, trade_off.cases),
                row.suite_share * 100.0,
                row.conversation_share * 100.0
            );
        }
    }

    fn write_outcome(&self, out: &mut String) {
        let _ = writeln!(out, "\ntargets for the combined strategy:");
        for target in &self.targets {
            let _ = writeln!(
                out,
                "  {:<9}{}: {}",
                if target.met { "[met]" } else { "[missed]" },
                target.goal,
                target.measured
            );
        }
        let _ = writeln!(
            out,
            "\nmisses of the combined strategy ({}):",
            self.combined_misses.len()
        );
        for miss in &self.combined_misses {
            let _ = writeln!(
                out,
                "- {}: {} {:?} {}\n    {}",
                miss.at,
                miss.fact,
                miss.expected,
                miss.verdict.word(),
                miss.cause
            );
        }
        let _ = writeln!(out, "\nran in {:.1} s", self.seconds);
    }
}

fn layer_list(layers: &[Layer]) -> String {
    if layers.is_empty() {
        return "-".into();
    }
    layers
        .iter()
        .map(|&layer| layer_name(layer))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The combined strategy's targets: every planted fact at every depth, corrections
/// resolved, the fact of an earlier session found with the default (user) recall scope, at
/// most 15% of full history's tokens at the last turn.
fn targets(
    conversation: &ConversationResult,
    suite: &SuiteResult,
    cross_session: &CrossSessionResult,
) -> Vec<Target> {
    let combined = |results: &BTreeMap<Contender, Judgement>| {
        results
            .get(&Contender::Combined)
            .is_some_and(|j| j.verdict == Verdict::Found)
    };
    let asked = conversation.probes.len();
    let found = conversation
        .probes
        .iter()
        .filter(|p| combined(&p.results))
        .count();
    let by_depth: Vec<String> = DEPTHS
        .iter()
        .map(|depth| {
            let hits = suite.hits_by_depth[&Contender::Combined][depth];
            format!("d={depth} {hits}/{}", FACT_KINDS.len())
        })
        .collect();
    let suite_hits = suite.hits(Contender::Combined);
    let corrections: Vec<bool> = conversation
        .probes
        .iter()
        .filter(|p| p.probe.stale.is_some())
        .map(|p| combined(&p.results))
        .chain(
            suite
                .cases
                .iter()
                .filter(|c| c.probe.stale.is_some())
                .map(|c| combined(&c.results)),
        )
        .collect();
    let resolved = corrections.iter().filter(|r| **r).count();
    let share = conversation.final_turn.combined_share_of_full_history;
    let cross_found = cross_session
        .rows
        .iter()
        .find(|row| row.strategy == Contender::Combined && row.recall_scope == Some("user"))
        .map_or(Verdict::Missing, |row| row.judgement.verdict);
    vec![
        Target {
            goal: "100% of planted facts at every depth",
            measured: format!(
                "suite {suite_hits}/{} ({}), conversation {found}/{asked}",
                suite.cases.len(),
                by_depth.join(", ")
            ),
            met: suite_hits == suite.cases.len() && found == asked,
        },
        Target {
            goal: "corrections resolved",
            measured: format!("{resolved}/{}", corrections.len()),
            met: resolved == corrections.len(),
        },
        Target {
            goal: "a fact from the user's previous session, default recall scope",
            measured: cross_found.word().to_owned(),
            met: cross_found == Verdict::Found,
        },
        Target {
            goal: "at most 15% of full history's tokens at 60 turns",
            measured: format!("{:.1}%", share * 100.0),
            met: share <= TOKEN_SHARE_TARGET,
        },
    ]
}
