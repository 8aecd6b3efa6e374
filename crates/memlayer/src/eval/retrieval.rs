//! One LoCoMo sample through memlayer: its turns appended to a fresh store (a real redb file
//! in a temporary directory) as one user's sessions, indexed by the real recall pipeline and
//! embedder, then each question put to three retrievers, keywords alone, vectors alone and
//! hybrid `Recall::recall`, scored by evidence recall@k.
//!
//! `Recall` only answers with fused rankings, so the single-retriever rankings come from a
//! `KeywordIndex` and a `VectorIndex` built here from the same store once the pipeline is
//! done: the same message texts and the very vectors the pipeline stored (no second
//! embedding pass). With one user per store and no filters, they search exactly the
//! documents `Recall` searches, so the three columns differ by retriever and nothing else.

use std::collections::HashMap;
use std::fmt::Write as _;

use anyhow::Context;
use memlayer_embed::Embedder;
use memlayer_index::{KeywordIndex, Recall, RecallQuery, Scope, VectorConfig, VectorIndex};
use memlayer_memory::TokenEncoding;
use memlayer_store::{
    Access, Append, MAX_MESSAGES_PER_APPEND, Message, Metadata, NewMessage, NewSession, Role, Store,
};
use serde_json::Value;

use super::TurnText;
use super::locomo::{Sample, Turn};
use super::report::{ByRetriever, QuestionScore, evidence_recall};
use super::stack::Stack;

const TENANT: &str = "default";
/// Every session of a sample belongs to this user, so a user scope searches the whole
/// conversation, as an agent recalling a user's past would.
const USER: &str = "locomo-user";
const AGENT: &str = "locomo-agent";
/// Keys read per page when the indexes are built from the store.
const PAGE: usize = 4_096;

/// Loads `sample` into a fresh store, waits until every turn is embedded, and scores every
/// question at each cut-off in `ks` (ascending).
pub(crate) async fn evaluate(
    sample: &Sample,
    embedder: &Embedder,
    ks: &[usize],
    turn_text: TurnText,
) -> anyhow::Result<Vec<QuestionScore>> {
    let stack = Stack::open(embedder)?;
    let scored = async {
        let (store, recall) = (&stack.store, &stack.recall);
        append_turns(store, sample, turn_text).await?;
        stack.wait_until_embedded(sample.turns()).await?;
        let retrievers = SingleRetrievers::build(store, embedder)?;
        let mut scores = Vec::with_capacity(sample.questions.len());
        for question in &sample.questions {
            let recall = ByRetriever {
                keyword: at_each_k(
                    &question.evidence,
                    &retrievers.by_keyword(&question.question, ks)?,
                    ks,
                ),
                vector: at_each_k(
                    &question.evidence,
                    &retrievers
                        .by_vector(embedder, &question.question, ks)
                        .await?,
                    ks,
                ),
                hybrid: hybrid(recall, &question.question, &question.evidence, ks).await?,
            };
            scores.push(QuestionScore {
                sample_id: sample.id.clone(),
                question: question.question.clone(),
                category: question.category,
                evidence: question.evidence.clone(),
                recall,
            });
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
        let session_id = format!("session-{}", session.number);
        for chunk in messages.chunks(MAX_MESSAGES_PER_APPEND) {
            let append = Append {
                messages: chunk.to_vec(),
                create: Some(NewSession {
                    user_id: USER.into(),
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

/// The keyword and vector indexes on their own, over the store's messages and vectors.
struct SingleRetrievers {
    keywords: KeywordIndex,
    vectors: VectorIndex,
    dia_ids: HashMap<u64, String>,
}

impl SingleRetrievers {
    fn build(store: &Store, embedder: &Embedder) -> anyhow::Result<Self> {
        let mut keywords = KeywordIndex::default();
        let mut dia_ids = HashMap::new();
        let mut after = None;
        loop {
            let page = store.feed().all_messages(after, PAGE)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(*last);
            for (key, message) in &page {
                keywords.add(key.as_u64(), &message.content);
                dia_ids.insert(key.as_u64(), dia_id(message)?.to_owned());
            }
        }
        let mut vectors = VectorIndex::new(VectorConfig::new(embedder.identity().dimension))?;
        let mut after = None;
        loop {
            let page = store.feed().vectors(after, PAGE)?;
            let Some(last) = page.last() else { break };
            after = Some(last.key);
            vectors.insert_batch(
                page.iter()
                    .map(|stored| (stored.key.as_u64(), stored.components.as_slice())),
            )?;
        }
        Ok(Self {
            keywords,
            vectors,
            dia_ids,
        })
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

/// Hybrid recall at each k, each from its own query for k hits: fusion draws 3k candidates
/// from each retriever, so the first five of a k = 25 answer need not be the answer to
/// k = 5, and what a caller gets is the answer to the k it asked for.
async fn hybrid(
    recall: &Recall,
    question: &str,
    evidence: &[String],
    ks: &[usize],
) -> anyhow::Result<Vec<f64>> {
    let mut at_k = Vec::with_capacity(ks.len());
    for &k in ks {
        let recalled = recall
            .recall(RecallQuery {
                access: Access::tenant_wide(TENANT),
                scope: Scope::User {
                    user_id: USER.into(),
                    agent_id: None,
                },
                query: question.to_owned(),
                k,
                roles: None,
                after: None,
                before: None,
                exclude: None,
            })
            .await?;
        if let Some(reason) = recalled.degraded {
            anyhow::bail!("recall answered degraded although every turn was embedded: {reason}");
        }
        let ranked = recalled
            .hits
            .iter()
            .map(|hit| dia_id(&hit.message).map(str::to_owned))
            .collect::<anyhow::Result<Vec<_>>>()?;
        at_k.push(evidence_recall(evidence, &ranked, k));
    }
    Ok(at_k)
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
