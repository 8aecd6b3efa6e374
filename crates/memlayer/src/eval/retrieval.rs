//! A LoCoMo file through memlayer as a deployment holds it: every sample's turns appended to
//! one fresh store (a real redb file in a temporary directory), each sample as its own user's
//! sessions, indexed by the real recall pipeline and embedder; then each question put to
//! three retrievers, keywords alone, vectors alone and hybrid `Recall::recall` in the asking
//! sample's user scope, scored by evidence recall@k.
//!
//! Hybrid recall is asked once per question, for the deepest cut-off, and each R@k scores
//! the first k hits of that one ranking: what a `/v1/recall` caller reads.
//!
//! `Recall` only answers with fused rankings, so the single-retriever rankings come from a
//! `KeywordIndex` and a `VectorIndex` per sample, built here from the store once the pipeline
//! is done: the same message texts and the very vectors the pipeline stored (no second
//! embedding pass). Recall scores a user's keywords with that user's statistics alone and
//! filters vectors to the user's sessions, so the three columns differ by retriever and
//! nothing else.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context;
use memlayer_embed::Embedder;
use memlayer_index::{KeywordIndex, Recall, RecallQuery, Scope, VectorConfig, VectorIndex};
use memlayer_memory::TokenEncoding;
use memlayer_store::{
    Access, Append, MAX_MESSAGES_PER_APPEND, Message, MessageKey, Metadata, NewMessage, NewSession,
    Role, Store,
};
use serde_json::Value;

use super::TurnText;
use super::locomo::{Dataset, Sample, Turn};
use super::report::{ByRetriever, QuestionScore, evidence_recall};
use super::stack::Stack;

const TENANT: &str = "default";
const AGENT: &str = "locomo-agent";
/// Keys read per page when the indexes are built from the store.
const PAGE: usize = 4_096;

/// Loads every sample of `dataset` into one fresh store, each as its own user (named by the
/// sample's id), waits until every turn is embedded, and scores every question at each
/// cut-off in `ks` (ascending, none above
/// [`memlayer_index::MAX_RECALL_HITS`]).
pub(crate) async fn evaluate(
    dataset: &Dataset,
    embedder: &Embedder,
    ks: &[usize],
    turn_text: TurnText,
) -> anyhow::Result<Vec<QuestionScore>> {
    let stack = Stack::open(embedder)?;
    let scored = async {
        let (store, recall) = (&stack.store, &stack.recall);
        let started = Instant::now();
        for sample in &dataset.samples {
            append_turns(store, sample, turn_text)
                .await
                .with_context(|| format!("sample {}", sample.id))?;
        }
        stack.wait_until_embedded(dataset.turns()).await?;
        tracing::info!(
            samples = dataset.samples.len(),
            turns = dataset.turns(),
            elapsed = ?started.elapsed(),
            "every turn stored and embedded"
        );
        let retrievers = SingleRetrievers::build(store, embedder, dataset)?;
        let mut scores = Vec::with_capacity(dataset.questions());
        for sample in &dataset.samples {
            let started = Instant::now();
            let single = retrievers
                .get(&sample.id)
                .context("a sample has no stored turns")?;
            for question in &sample.questions {
                let ranked = ByRetriever {
                    keyword: single.by_keyword(&question.question, ks)?,
                    vector: single.by_vector(embedder, &question.question, ks).await?,
                    hybrid: hybrid(recall, &sample.id, &question.question, ks).await?,
                };
                scores.push(QuestionScore {
                    sample_id: sample.id.clone(),
                    question: question.question.clone(),
                    category: question.category,
                    evidence: question.evidence.clone(),
                    recall: ranked.map(|ranked| at_each_k(&question.evidence, ranked, ks)),
                });
            }
            tracing::info!(
                sample = %sample.id,
                questions = sample.questions.len(),
                elapsed = ?started.elapsed(),
                "sample scored"
            );
        }
        anyhow::Ok(scores)
    }
    .await;
    stack.close().await?;
    scored
}

/// One memlayer session per LoCoMo session, in order. The first speaker is the user and the
/// second the assistant: memlayer stores a two-party conversation that way, and the role
/// keeps who spoke queryable (recall can filter by role) without changing any ranking.
async fn append_turns(store: &Store, sample: &Sample, turn_text: TurnText) -> anyhow::Result<()> {
    let encoding = TokenEncoding::default();
    for session in &sample.sessions {
        let messages: Vec<NewMessage> = session
            .turns
            .iter()
            .map(|turn| {
                let content = text_of(turn, session.date_time.as_deref(), turn_text);
                let mut metadata = Metadata::new();
                metadata.insert("dia_id".into(), Value::from(turn.dia_id.as_str()));
                metadata.insert("speaker".into(), Value::from(turn.speaker.as_str()));
                NewMessage {
                    role: if turn.speaker == sample.speaker_a {
                        Role::User
                    } else {
                        Role::Assistant
                    },
                    token_count: encoding.count(&content),
                    content,
                    timestamp: None,
                    metadata,
                }
            })
            .collect();
        let mut metadata = Metadata::new();
        if let Some(date_time) = &session.date_time {
            metadata.insert("date_time".into(), Value::from(date_time.as_str()));
        }
        let session_id = session_id(sample, session.number);
        for chunk in messages.chunks(MAX_MESSAGES_PER_APPEND) {
            let append = Append {
                messages: chunk.to_vec(),
                create: Some(NewSession {
                    user_id: sample.id.clone(),
                    agent_id: AGENT.into(),
                    flow_id: None,
                    metadata: metadata.clone(),
                }),
                idempotency_key: None,
            };
            store
                .sessions()
                .append(&Access::tenant_wide(TENANT), &session_id, append)
                .await
                .with_context(|| format!("cannot append session_{}", session.number))?;
        }
    }
    Ok(())
}

/// Sessions are named per tenant, so each sample's carry its id.
fn session_id(sample: &Sample, number: u32) -> String {
    format!("{}-session-{number}", sample.id)
}

/// The text stored, keyword-indexed and embedded for a turn. An image's caption is appended
/// because LoCoMo's speakers talk about the images they share, some questions are answered
/// by the image alone, and a text retriever can only see an image through its caption.
fn text_of(turn: &Turn, date_time: Option<&str>, format: TurnText) -> String {
    let mut text = match (format, date_time) {
        (TurnText::Plain, _) => turn.text.clone(),
        (TurnText::Speaker, _) | (TurnText::Dated, None) => {
            format!("{}: {}", turn.speaker, turn.text)
        }
        (TurnText::Dated, Some(date)) => format!("[{date}] {}: {}", turn.speaker, turn.text),
    };
    if let Some(caption) = &turn.blip_caption {
        let _ = write!(text, " [shares an image: {caption}]");
    }
    text
}

/// The keyword and vector indexes on their own, over one sample's messages and vectors.
struct SingleRetrievers {
    keywords: KeywordIndex,
    vectors: VectorIndex,
    dia_ids: HashMap<u64, String>,
}

impl SingleRetrievers {
    /// One per sample of `dataset`, by sample id, from everything `store` holds.
    fn build(
        store: &Store,
        embedder: &Embedder,
        dataset: &Dataset,
    ) -> anyhow::Result<HashMap<String, Self>> {
        let access = Access::tenant_wide(TENANT);
        let mut sample_of = HashMap::new();
        let mut by_sample = HashMap::new();
        for sample in &dataset.samples {
            for session in &sample.sessions {
                let id = session_id(sample, session.number);
                let key = store
                    .feed()
                    .session_key(&access, &id)?
                    .with_context(|| format!("session {id} was not stored"))?;
                sample_of.insert(key, sample.id.as_str());
            }
            by_sample.insert(
                sample.id.clone(),
                Self {
                    keywords: KeywordIndex::default(),
                    vectors: VectorIndex::new(VectorConfig::new(embedder.identity().dimension))?,
                    dia_ids: HashMap::new(),
                },
            );
        }
        // The retrievers of the sample whose session holds message `raw`.
        fn of_message<'a>(
            sample_of: &HashMap<u64, &str>,
            by_sample: &'a mut HashMap<String, SingleRetrievers>,
            raw: u64,
        ) -> anyhow::Result<&'a mut SingleRetrievers> {
            let sample = sample_of
                .get(&MessageKey::from_u64(raw).session())
                .context("the store holds a session of no sample")?;
            by_sample
                .get_mut(*sample)
                .context("a sample has no retrievers")
        }
        let mut after = None;
        loop {
            let page = store.feed().all_messages(after, PAGE)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(*last);
            for (key, message) in &page {
                let single = of_message(&sample_of, &mut by_sample, key.as_u64())?;
                single.keywords.add(key.as_u64(), &message.content);
                single
                    .dia_ids
                    .insert(key.as_u64(), dia_id(message)?.to_owned());
            }
        }
        let mut after = None;
        loop {
            let page = store.feed().vectors(after, PAGE)?;
            let Some(last) = page.last() else { break };
            after = Some(last.key);
            for stored in &page {
                of_message(&sample_of, &mut by_sample, stored.key.as_u64())?
                    .vectors
                    .insert_batch([(stored.key.as_u64(), stored.components.as_slice())])?;
            }
        }
        Ok(by_sample)
    }

    fn by_keyword(&self, question: &str, ks: &[usize]) -> anyhow::Result<Vec<String>> {
        let hits = self.keywords.search(question, deepest(ks), None);
        self.dia_ids_of(hits)
    }

    async fn by_vector(
        &self,
        embedder: &Embedder,
        question: &str,
        ks: &[usize],
    ) -> anyhow::Result<Vec<String>> {
        let query = embedder
            .embed(TENANT, vec![question.to_owned()])
            .await?
            .pop()
            .context("the embedder returned no vector")?;
        let hits = self.vectors.search(&query, deepest(ks), None)?;
        self.dia_ids_of(hits)
    }

    fn dia_ids_of(&self, hits: Vec<(u64, f32)>) -> anyhow::Result<Vec<String>> {
        hits.into_iter()
            .map(|(id, _)| {
                self.dia_ids
                    .get(&id)
                    .cloned()
                    .context("an index returned a message the store does not hold")
            })
            .collect()
    }
}

/// Hybrid recall's ranking for `question` in `user`'s scope: one query for the deepest
/// cut-off, whose prefixes are scored at every k, as a caller reads the first k hits.
async fn hybrid(
    recall: &Recall,
    user: &str,
    question: &str,
    ks: &[usize],
) -> anyhow::Result<Vec<String>> {
    let recalled = recall
        .recall(RecallQuery {
            access: Access::tenant_wide(TENANT),
            scope: Scope::User {
                user_id: user.to_owned(),
                agent_id: None,
            },
            query: question.to_owned(),
            k: deepest(ks),
            roles: None,
            after: None,
            before: None,
            exclude: None,
        })
        .await?;
    if let Some(reason) = recalled.degraded {
        anyhow::bail!("recall answered degraded although every turn was embedded: {reason}");
    }
    recalled
        .hits
        .iter()
        .map(|hit| dia_id(&hit.message).map(str::to_owned))
        .collect()
}

fn at_each_k(evidence: &[String], ranked: &[String], ks: &[usize]) -> Vec<f64> {
    ks.iter()
        .map(|&k| evidence_recall(evidence, ranked, k))
        .collect()
}

fn deepest(ks: &[usize]) -> usize {
    ks.iter().copied().max().unwrap_or(0)
}

fn dia_id(message: &Message) -> anyhow::Result<&str> {
    message
        .metadata
        .get("dia_id")
        .and_then(Value::as_str)
        .context("a stored turn has no dia_id in its metadata")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(caption: Option<&str>) -> Turn {
        Turn {
            speaker: "Ana".into(),
            dia_id: "D1:1".into(),
            text: "Look at this.".into(),
            blip_caption: caption.map(str::to_owned),
        }
    }

    #[test]
    fn turn_texts_follow_the_format_and_carry_captions() {
        let date = Some("1:56 pm on 8 May, 2023");
        assert_eq!(text_of(&turn(None), date, TurnText::Plain), "Look at this.");
        assert_eq!(
            text_of(&turn(None), date, TurnText::Speaker),
            "Ana: Look at this."
        );
        assert_eq!(
            text_of(&turn(Some("a red kayak")), date, TurnText::Dated),
            "[1:56 pm on 8 May, 2023] Ana: Look at this. [shares an image: a red kayak]"
        );
        assert_eq!(
            text_of(&turn(None), None, TurnText::Dated),
            "Ana: Look at this."
        );
    }
}
