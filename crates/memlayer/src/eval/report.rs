//! Scores and their presentation: evidence recall@k of each question, its means per category
//! and overall, and the two outputs, a text table and a JSON document, each with the
//! published LoCoMo reference to compare with.
//!
//! Evidence recall@k is LoCoMo's dialog-level retrieval metric: the share of a question's
//! evidence turns found among the first k turns retrieved, averaged over questions.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use serde::Serialize;

use super::TurnText;

/// Where the reference numbers come from.
const REFERENCE_SOURCE: &str = "LoCoMo paper (Maharana et al., ACL 2024): dialog-level \
     retrieval with the DRAGON retriever, all categories";
/// The paper's evidence recall at k = 5, 10 and 25, as fractions.
const REFERENCE_RECALL: [(usize, f64); 3] = [(5, 0.567), (10, 0.662), (25, 0.767)];

/// One value per retriever.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct ByRetriever<T> {
    /// BM25 over the turn texts alone.
    pub(crate) keyword: T,
    /// Embedding similarity alone.
    pub(crate) vector: T,
    /// `Recall::recall`: both, fused by reciprocal rank.
    pub(crate) hybrid: T,
}

impl<T> ByRetriever<T> {
    pub(crate) fn map<U>(&self, f: impl Fn(&T) -> U) -> ByRetriever<U> {
        ByRetriever {
            keyword: f(&self.keyword),
            vector: f(&self.vector),
            hybrid: f(&self.hybrid),
        }
    }

    fn rows(&self) -> [(&'static str, &T); 3] {
        [
            ("keyword", &self.keyword),
            ("vector", &self.vector),
            ("hybrid", &self.hybrid),
        ]
    }
}

/// One question's scores.
#[derive(Debug)]
pub(crate) struct QuestionScore {
    pub(crate) sample_id: String,
    pub(crate) question: String,
    pub(crate) category: u32,
    pub(crate) evidence: Vec<String>,
    /// Evidence recall at each cut-off, in the order of [`Report::ks`].
    pub(crate) recall: ByRetriever<Vec<f64>>,
}

/// The share of `evidence` among the first `k` of `ranked` (dia_ids, best first).
/// `evidence` is never empty: the reader skips questions without it.
pub(crate) fn evidence_recall(evidence: &[String], ranked: &[String], k: usize) -> f64 {
    let top: HashSet<&str> = ranked.iter().take(k).map(String::as_str).collect();
    let found = evidence
        .iter()
        .filter(|id| top.contains(id.as_str()))
        .count();
    found as f64 / evidence.len() as f64
}

/// A whole run: what was scored, how, and every question's scores.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) dataset: String,
    pub(crate) turn_text: TurnText,
    /// The cut-offs, ascending and distinct.
    pub(crate) ks: Vec<usize>,
    pub(crate) samples: usize,
    pub(crate) turns: usize,
    pub(crate) skipped_questions: usize,
    pub(crate) unknown_evidence: usize,
    pub(crate) questions: Vec<QuestionScore>,
}

/// Mean recall over a group of questions.
#[derive(Debug, PartialEq)]
struct Mean {
    questions: usize,
    recall: ByRetriever<Vec<f64>>,
}

impl Mean {
    fn of<'a>(ks: usize, scores: impl IntoIterator<Item = &'a QuestionScore>) -> Self {
        let mut sums = ByRetriever {
            keyword: vec![0.0; ks],
            vector: vec![0.0; ks],
            hybrid: vec![0.0; ks],
        };
        let mut questions = 0;
        for score in scores {
            questions += 1;
            for (sum, value) in [
                (&mut sums.keyword, &score.recall.keyword),
                (&mut sums.vector, &score.recall.vector),
                (&mut sums.hybrid, &score.recall.hybrid),
            ] {
                sum.iter_mut()
                    .zip(value)
                    .for_each(|(sum, value)| *sum += value);
            }
        }
        let divisor = questions.max(1) as f64;
        Self {
            questions,
            recall: sums.map(|sums| sums.iter().map(|sum| sum / divisor).collect()),
        }
    }
}

impl Report {
    /// Means per category (ascending) and over every question.
    fn means(&self) -> (Vec<(u32, Mean)>, Mean) {
        let mut by_category: BTreeMap<u32, Vec<&QuestionScore>> = BTreeMap::new();
        for score in &self.questions {
            by_category.entry(score.category).or_default().push(score);
        }
        let categories = by_category
            .into_iter()
            .map(|(category, scores)| (category, Mean::of(self.ks.len(), scores)))
            .collect();
        (categories, Mean::of(self.ks.len(), &self.questions))
    }

    /// The human-readable report: a header, one block of rows per category and overall,
    /// and a footer with the definition and the reference.
    pub(crate) fn table(&self) -> String {
        let (categories, overall) = self.means();
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(out, "LoCoMo evidence recall@k: {}", self.dataset);
        let _ = writeln!(
            out,
            "{} samples, {} turns, {} questions scored ({} skipped for lack of known evidence, \
             {} unknown evidence ids ignored)",
            self.samples,
            self.turns,
            self.questions.len(),
            self.skipped_questions,
            self.unknown_evidence,
        );
        let _ = writeln!(out, "turn text: {}\n", self.turn_text.describe());
        let _ = write!(
            out,
            "{:<10}{:>9}  {:<9}",
            "category", "questions", "retriever"
        );
        for k in &self.ks {
            let _ = write!(out, "{:>7}", format!("R@{k}"));
        }
        out.push('\n');
        for (category, mean) in &categories {
            write_rows(&mut out, &category.to_string(), mean);
        }
        write_rows(&mut out, "overall", &overall);
        let _ = writeln!(
            out,
            "\nR@k: the share of a question's evidence turns among the first k turns retrieved, \
             averaged over questions, in percent.\nhybrid asks Recall once for the deepest k, in the \
             asking sample's user scope of one store holding every sample, and scores the \
             first k hits; category 5 holds LoCoMo's adversarial questions."
        );
        let reference = REFERENCE_RECALL
            .iter()
            .map(|(k, recall)| format!("R@{k} {:.1}", recall * 100.0))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(out, "reference: {REFERENCE_SOURCE}: {reference}");
        out
    }

    /// The machine-readable report, every recall a fraction keyed by its k.
    pub(crate) fn json(&self) -> anyhow::Result<String> {
        let by_k = |values: &Vec<f64>| -> BTreeMap<usize, f64> {
            self.ks
                .iter()
                .copied()
                .zip(values.iter().copied())
                .collect()
        };
        let summary = |mean: &Mean| JsonMean {
            questions: mean.questions,
            recall: mean.recall.map(by_k),
        };
        let (categories, overall) = self.means();
        let document = JsonReport {
            dataset: &self.dataset,
            turn_text: self.turn_text,
            k: &self.ks,
            samples: self.samples,
            turns: self.turns,
            questions: self.questions.len(),
            skipped_questions: self.skipped_questions,
            unknown_evidence_ids: self.unknown_evidence,
            overall: summary(&overall),
            categories: categories
                .iter()
                .map(|(category, mean)| JsonCategory {
                    category: *category,
                    mean: summary(mean),
                })
                .collect(),
            per_question: self
                .questions
                .iter()
                .map(|score| JsonQuestion {
                    sample_id: &score.sample_id,
                    category: score.category,
                    question: &score.question,
                    evidence: &score.evidence,
                    recall: score.recall.map(by_k),
                })
                .collect(),
            reference: JsonReference {
                source: REFERENCE_SOURCE,
                recall: REFERENCE_RECALL.into_iter().collect(),
            },
        };
        Ok(serde_json::to_string_pretty(&document)?)
    }
}

fn write_rows(out: &mut String, label: &str, mean: &Mean) {
    for (row, (retriever, values)) in mean.recall.rows().into_iter().enumerate() {
        let (label, questions) = if row == 0 {
            (label, mean.questions.to_string())
        } else {
            ("", String::new())
        };
        let _ = write!(out, "{label:<10}{questions:>9}  {retriever:<9}");
        for value in values {
            let _ = write!(out, "{:>7.1}", value * 100.0);
        }
        out.push('\n');
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    dataset: &'a str,
    turn_text: TurnText,
    k: &'a [usize],
    samples: usize,
    turns: usize,
    questions: usize,
    skipped_questions: usize,
    unknown_evidence_ids: usize,
    overall: JsonMean,
    categories: Vec<JsonCategory>,
    per_question: Vec<JsonQuestion<'a>>,
    reference: JsonReference,
}

#[derive(Serialize)]
struct JsonMean {
    questions: usize,
    #[serde(flatten)]
    recall: ByRetriever<BTreeMap<usize, f64>>,
}

#[derive(Serialize)]
struct JsonCategory {
    category: u32,
    #[serde(flatten)]
    mean: JsonMean,
}

#[derive(Serialize)]
struct JsonQuestion<'a> {
    sample_id: &'a str,
    category: u32,
    question: &'a str,
    evidence: &'a [String],
    #[serde(flatten)]
    recall: ByRetriever<BTreeMap<usize, f64>>,
}

#[derive(Serialize)]
struct JsonReference {
    source: &'static str,
    recall: BTreeMap<usize, f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| (*id).to_owned()).collect()
    }

    #[test]
    fn evidence_recall_is_the_share_found_within_k() {
        let ranked = ids(&["D9:9", "D1:1", "D1:2", "D1:1"]);
        let evidence = ids(&["D1:1", "D1:2", "D3:3"]);
        assert_eq!(evidence_recall(&evidence, &ranked, 1), 0.0);
        assert!((evidence_recall(&evidence, &ranked, 2) - 1.0 / 3.0).abs() < 1e-12);
        assert!((evidence_recall(&evidence, &ranked, 25) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(evidence_recall(&ids(&["D1:1"]), &ranked, 25), 1.0);
        assert_eq!(evidence_recall(&ids(&["D1:1"]), &[], 25), 0.0);
    }

    fn score(category: u32, keyword: f64, hybrid: f64) -> QuestionScore {
        QuestionScore {
            sample_id: "s".into(),
            question: "q".into(),
            category,
            evidence: ids(&["D1:1"]),
            recall: ByRetriever {
                keyword: vec![keyword, 1.0],
                vector: vec![0.0, 0.5],
                hybrid: vec![hybrid, 1.0],
            },
        }
    }

    fn report() -> Report {
        Report {
            dataset: "mini.json".into(),
            turn_text: TurnText::Speaker,
            ks: vec![1, 5],
            samples: 1,
            turns: 4,
            skipped_questions: 2,
            unknown_evidence: 3,
            questions: vec![score(2, 1.0, 0.0), score(1, 0.0, 1.0), score(2, 0.0, 1.0)],
        }
    }

    #[test]
    fn means_are_per_category_and_overall() {
        let (categories, overall) = report().means();
        let found: Vec<(u32, usize, f64)> = categories
            .iter()
            .map(|(category, mean)| (*category, mean.questions, mean.recall.keyword[0]))
            .collect();
        assert_eq!(found, [(1, 1, 0.0), (2, 2, 0.5)]);
        assert_eq!(overall.questions, 3);
        assert!((overall.recall.hybrid[0] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(overall.recall.vector, [0.0, 0.5]);
    }

    #[test]
    fn the_table_has_a_block_per_category_and_the_reference() {
        let table = report().table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].starts_with("1 samples, 4 turns, 3 questions scored (2 skipped"));
        let header = lines
            .iter()
            .position(|l| l.starts_with("category"))
            .unwrap();
        assert_eq!(
            lines[header].split_whitespace().collect::<Vec<_>>(),
            ["category", "questions", "retriever", "R@1", "R@5"]
        );
        let row = |at: usize| lines[header + at].split_whitespace().collect::<Vec<_>>();
        assert_eq!(row(1), ["1", "1", "keyword", "0.0", "100.0"]);
        assert_eq!(row(2), ["vector", "0.0", "50.0"]);
        assert_eq!(row(4), ["2", "2", "keyword", "50.0", "100.0"]);
        assert_eq!(row(9), ["hybrid", "66.7", "100.0"]);
        assert!(
            table.ends_with("R@5 56.7, R@10 66.2, R@25 76.7\n"),
            "{table}"
        );
    }

    #[test]
    fn json_keys_recall_by_k() {
        let json: serde_json::Value = serde_json::from_str(&report().json().unwrap()).unwrap();
        assert_eq!(json["turn_text"], "speaker");
        assert_eq!(json["overall"]["keyword"]["1"], 1.0 / 3.0);
        assert_eq!(json["categories"][1]["category"], 2);
        assert_eq!(json["categories"][1]["hybrid"]["5"], 1.0);
        assert_eq!(json["per_question"][0]["vector"]["5"], 0.5);
        assert_eq!(json["reference"]["recall"]["25"], 0.767);
    }
}
