//! The LoCoMo benchmark's file format (Maharana et al., ACL 2024, "Evaluating Very Long-Term
//! Conversational Memory of LLM Agents"), read into samples: two speakers' numbered sessions
//! of turns, and questions whose evidence names the turns (`dia_id`s) that answer them.
//!
//! The reader ignores whatever it does not use (`img_url`, `observation`, summaries, answers),
//! so files with extra fields load. It is lenient where the published file is irregular and
//! strict where a silent fix would change the score. Evidence entries sometimes join
//! several ids in one string (`"D8:6; D9:17"`, `"D9:1 D4:4"`, `"D2:4,D2:5"`); those are split.
//! An evidence id that names no turn of its sample (`"D"`, a typo) is dropped and counted,
//! and a question left with no evidence is skipped and counted: it cannot be scored. Two
//! samples with one id are refused: the evaluation stores each sample as the user its id
//! names.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A LoCoMo file, ready to score.
#[derive(Debug)]
pub(crate) struct Dataset {
    pub(crate) samples: Vec<Sample>,
    /// Questions left out because none of their evidence ids names a turn.
    pub(crate) skipped_questions: usize,
    /// Evidence ids that name no turn of their sample, left out of the questions citing them.
    pub(crate) unknown_evidence: usize,
}

impl Dataset {
    pub(crate) fn turns(&self) -> usize {
        self.samples.iter().map(Sample::turns).sum()
    }

    pub(crate) fn questions(&self) -> usize {
        self.samples
            .iter()
            .map(|sample| sample.questions.len())
            .sum()
    }
}

/// One conversation between two speakers and the questions about it.
#[derive(Debug)]
pub(crate) struct Sample {
    /// `sample_id` from the file (`conv-26`), or `sample-<position>` when it has none.
    pub(crate) id: String,
    pub(crate) speaker_a: String,
    /// In session-number order.
    pub(crate) sessions: Vec<Session>,
    /// Only questions with at least one evidence id that names a turn of this sample.
    pub(crate) questions: Vec<Question>,
}

impl Sample {
    pub(crate) fn turns(&self) -> usize {
        self.sessions
            .iter()
            .map(|session| session.turns.len())
            .sum()
    }
}

/// `session_<number>` and its `session_<number>_date_time`.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) number: u32,
    /// As written in the file (`1:56 pm on 8 May, 2023`).
    pub(crate) date_time: Option<String>,
    pub(crate) turns: Vec<Turn>,
}

/// One dialog turn.
#[derive(Debug, Deserialize)]
pub(crate) struct Turn {
    pub(crate) speaker: String,
    pub(crate) dia_id: String,
    pub(crate) text: String,
    /// What the image shared with the turn shows (a BLIP caption in the published file).
    #[serde(default)]
    pub(crate) blip_caption: Option<String>,
}

/// A question with the turns that answer it.
#[derive(Debug)]
pub(crate) struct Question {
    pub(crate) question: String,
    pub(crate) category: u32,
    /// Known `dia_id`s, each once, in the file's order; never empty.
    pub(crate) evidence: Vec<String>,
}

#[derive(Deserialize)]
struct RawSample {
    sample_id: Option<String>,
    /// `speaker_a`, `speaker_b`, `session_<n>` and `session_<n>_date_time`: keys numbered by
    /// session, so read as a map.
    conversation: Map<String, Value>,
    #[serde(default)]
    qa: Vec<RawQuestion>,
}

#[derive(Deserialize)]
struct RawQuestion {
    question: String,
    category: u32,
    #[serde(default)]
    evidence: Vec<String>,
}

/// Reads and checks the LoCoMo file at `path`; every error names the file.
pub(crate) fn load(path: &Path) -> anyhow::Result<Dataset> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the LoCoMo file {}", path.display()))?;
    parse(&text).with_context(|| format!("invalid LoCoMo file {}", path.display()))
}

fn parse(text: &str) -> anyhow::Result<Dataset> {
    let raw: Vec<RawSample> = serde_json::from_str(text)?;
    let mut dataset = Dataset {
        samples: Vec::with_capacity(raw.len()),
        skipped_questions: 0,
        unknown_evidence: 0,
    };
    for (position, raw) in raw.into_iter().enumerate() {
        let id = raw
            .sample_id
            .clone()
            .unwrap_or_else(|| format!("sample-{}", position + 1));
        anyhow::ensure!(
            dataset.samples.iter().all(|sample| sample.id != id),
            "sample {} repeats the sample_id {id}",
            position + 1
        );
        let sample = read_sample(id.clone(), raw, &mut dataset)
            .with_context(|| format!("sample {} ({id})", position + 1))?;
        dataset.samples.push(sample);
    }
    Ok(dataset)
}

fn read_sample(id: String, raw: RawSample, counts: &mut Dataset) -> anyhow::Result<Sample> {
    let mut speaker_a = None;
    let mut sessions: Vec<Session> = Vec::new();
    let mut dates = Vec::new();
    for (key, value) in raw.conversation {
        if key == "speaker_a" {
            speaker_a = Some(string(value).context("speaker_a")?);
        } else if let Some(rest) = key.strip_prefix("session_") {
            if let Some(number) = rest.strip_suffix("_date_time") {
                if let Ok(number) = number.parse::<u32>() {
                    dates.push((number, string(value).with_context(|| key.clone())?));
                }
            } else if let Ok(number) = rest.parse::<u32>() {
                let turns = serde_json::from_value(value).with_context(|| key.clone())?;
                sessions.push(Session {
                    number,
                    date_time: None,
                    turns,
                });
            }
        }
    }
    sessions.sort_by_key(|session| session.number);
    for (number, date) in dates {
        if let Some(session) = sessions.iter_mut().find(|s| s.number == number) {
            session.date_time = Some(date);
        }
    }
    let known: HashSet<&str> = sessions
        .iter()
        .flat_map(|session| &session.turns)
        .map(|turn| turn.dia_id.as_str())
        .collect();
    let mut questions = Vec::with_capacity(raw.qa.len());
    for qa in raw.qa {
        let mut evidence: Vec<String> = Vec::new();
        let ids = qa
            .evidence
            .iter()
            .flat_map(|entry| entry.split(|c: char| c == ';' || c == ',' || c.is_whitespace()))
            .filter(|id| !id.is_empty());
        for id in ids {
            if !known.contains(id) {
                counts.unknown_evidence += 1;
            } else if !evidence.iter().any(|seen| seen == id) {
                evidence.push(id.to_owned());
            }
        }
        if evidence.is_empty() {
            counts.skipped_questions += 1;
        } else {
            questions.push(Question {
                question: qa.question,
                category: qa.category,
                evidence,
            });
        }
    }
    Ok(Sample {
        id,
        speaker_a: speaker_a.context("the conversation has no speaker_a")?,
        sessions,
        questions,
    })
}

fn string(value: Value) -> anyhow::Result<String> {
    match value {
        Value::String(text) => Ok(text),
        other => anyhow::bail!("expected a string, found {other}"),
    }
}

#[cfg(test)]
mod tests;
