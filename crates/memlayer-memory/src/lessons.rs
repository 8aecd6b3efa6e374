//! Episodic lessons (Reflexion-style): an agent records how an attempt at a task went and
//! what it learned; later attempts at the same kind of task start from those lessons.
//! [`build_lessons`] renders, for one user (and agent) and task type, every standing lesson
//! and the most recent lessons of that task type, in a deterministic order and under a token
//! cap. The context's lessons layer and `GET /v1/users/{id}/lessons` both call it.

use memlayer_store::{Episode, Outcome, Store};
use serde::Serialize;

use crate::MemoryError;
use crate::long_term::visible_to;
use crate::render::capped_list;
use crate::tokens::TokenEncoding;

/// The title the lessons block starts with in a context.
pub const LESSONS_MARKER: &str = "Lessons from earlier tasks:";

/// Whose lessons, for what.
#[derive(Debug, Clone, Copy)]
pub struct LessonQuery<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The user.
    pub user_id: &'a str,
    /// The agent asking: it learns from the user's episodes without an agent and its own.
    /// `None` sees every episode of the user.
    pub agent_id: Option<&'a str>,
    /// The kind of task; `None` shows the standing lessons only.
    pub task_type: Option<&'a str>,
    /// Most recent lessons of the task type (standing ones come besides).
    pub max_lessons: usize,
    /// Most tokens the rendered block may take.
    pub max_tokens: u32,
}

/// The rendered lessons and the episodes they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lessons {
    /// The block as a context shows it.
    pub text: String,
    /// The episodes whose lessons are in it, in the order shown.
    pub episodes: Vec<u64>,
}

/// The lessons for `query`: standing lessons first (oldest first: they are rules that
/// accumulate), then the task type's most recent ones, newest first (the latest attempt
/// knows most), as many as fit `max_tokens`. `None` when there is nothing to show.
pub fn build_lessons(
    store: &Store,
    query: &LessonQuery<'_>,
    encoding: TokenEncoding,
) -> Result<Option<Lessons>, MemoryError> {
    let visible = |episode: &Episode| visible_to(query.agent_id, episode.agent_id.as_deref());
    let standing: Vec<Episode> = store
        .memories()
        .user_episodes(query.tenant, query.user_id)?
        .into_iter()
        .filter(|episode| episode.standing && visible(episode))
        .collect();
    let recent = match query.task_type {
        Some(task_type) if query.max_lessons > 0 => store.memories().recent_episodes(
            query.tenant,
            query.user_id,
            task_type,
            query.max_lessons,
            |episode| !episode.standing && visible(episode),
        )?,
        _ => Vec::new(),
    };
    let lines = standing.iter().chain(&recent).map(|episode| {
        let label = if episode.standing {
            "standing".to_owned()
        } else {
            format!("{}, {}", episode.task_type, outcome_name(episode.outcome))
        };
        (episode.id, format!("- ({label}) {}", episode.lesson.trim()))
    });
    Ok(
        capped_list(LESSONS_MARKER, lines, query.max_tokens, encoding)
            .map(|(text, episodes)| Lessons { text, episodes }),
    )
}

/// A user's episodes the asking agent may learn from (every one with `agent_id` `None`),
/// of one task type when given, oldest first.
pub fn list_episodes(
    store: &Store,
    tenant: &str,
    user_id: &str,
    agent_id: Option<&str>,
    task_type: Option<&str>,
) -> Result<Vec<Episode>, MemoryError> {
    // Filters are ids like those they are compared with: one that could match nothing
    // (`task_type=`) is a mistake to report, not an empty answer.
    memlayer_store::validate_optional_id("agent_id", agent_id)?;
    memlayer_store::validate_optional_id("task_type", task_type)?;
    Ok(store
        .memories()
        .user_episodes(tenant, user_id)?
        .into_iter()
        .filter(|episode| {
            visible_to(agent_id, episode.agent_id.as_deref())
                && task_type.is_none_or(|task_type| episode.task_type == task_type)
        })
        .collect())
}

/// How an outcome reads in a lesson line.
fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Success => "success",
        Outcome::Failure => "failure",
        Outcome::Partial => "partial",
    }
}

#[cfg(test)]
mod tests {
    use memlayer_store::Timestamp;

    use super::*;

    fn episode(task_type: &str, lesson: &str, standing: bool, agent: Option<&str>) -> Episode {
        Episode {
            id: 0,
            tenant: "t".into(),
            user_id: "ann".into(),
            agent_id: agent.map(str::to_owned),
            task_type: task_type.into(),
            description: "a try".into(),
            outcome: Outcome::Failure,
            reflection: String::new(),
            lesson: lesson.into(),
            standing,
            source_session: None,
            created_at: Timestamp::now(),
        }
    }

    fn query(task_type: Option<&str>, max_lessons: usize, max_tokens: u32) -> LessonQuery<'_> {
        LessonQuery {
            tenant: "t",
            user_id: "ann",
            agent_id: Some("support"),
            task_type,
            max_lessons,
            max_tokens,
        }
    }

    #[tokio::test]
    async fn standing_lessons_then_the_newest_of_the_task_type_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        for episode in [
            episode("refund", "Always confirm the order number.", true, None),
            episode("refund", "Ask for the receipt first.", false, None),
            episode("upgrade", "Check the contract end date.", false, None),
            episode(
                "refund",
                "Offer store credit before cash.",
                false,
                Some("support"),
            ),
            episode("refund", "Another agent's lesson.", false, Some("sales")),
            episode("refund", "Never promise a date.", false, None),
            episode("upgrade", "Be brief.", true, None),
        ] {
            store.memories().put_episode(episode).await.unwrap();
        }
        let encoding = TokenEncoding::default();
        let text = |q: LessonQuery<'_>| {
            build_lessons(&store, &q, encoding)
                .unwrap()
                .map(|lessons| lessons.text)
        };
        let refund = text(query(Some("refund"), 2, 500)).unwrap();
        assert_eq!(
            refund,
            "Lessons from earlier tasks:\n\
             - (standing) Always confirm the order number.\n\
             - (standing) Be brief.\n\
             - (refund, failure) Never promise a date.\n\
             - (refund, failure) Offer store credit before cash."
        );
        // The same question, the same answer.
        assert_eq!(text(query(Some("refund"), 2, 500)).unwrap(), refund);
        // Without a task type, the standing lessons only; with no budget, nothing.
        assert_eq!(
            text(query(None, 5, 500)).unwrap().lines().count(),
            3,
            "title and two standing lessons"
        );
        assert_eq!(text(query(Some("refund"), 5, 5)), None);
        // A cap cuts the tail, never the order.
        let all = text(query(Some("refund"), 5, 500)).unwrap();
        assert_eq!(all.lines().count(), 6, "{all}");
        let capped = text(query(Some("refund"), 5, 30)).unwrap();
        assert!(all.starts_with(&capped), "{capped}");
        assert!(capped.lines().count() < all.lines().count(), "{capped}");
        // Another user has none.
        let other = LessonQuery {
            user_id: "bob",
            ..query(Some("refund"), 5, 500)
        };
        assert_eq!(build_lessons(&store, &other, encoding).unwrap(), None);
    }
}
