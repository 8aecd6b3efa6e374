//! Episodes: what an agent did for a user on one kind of task, how it went, and the lesson
//! it drew (Reflexion-style), so later attempts at the same kind of task start from it.
//!
//! The store keeps them, lists them by owner and by task type, and deletes them for
//! erasures; choosing and rendering the lessons a context shows belongs to the strategies
//! crate.

use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::ids::{next_seq, random_id, unused_id};
use crate::integrity::TablesCheck;
use crate::model::Access;
use crate::model::{Timestamp, validate_id, validate_text};
use crate::record::Record;
use crate::sessions::read_session_record;
use crate::store::{Eraser, Memories, wait};
use crate::tables::{EPISODE_OWNERS, EPISODE_TASKS, EPISODES, NEXT_EPISODE_SEQ_KEY, SESSIONS};
use crate::{Result, Store, StoreError};

/// Longest description or reflection, in characters.
pub const MAX_EPISODE_TEXT: usize = 4_000;
/// Longest lesson, in characters: a lesson is one rule to follow, not a report.
pub const MAX_LESSON_TEXT: usize = 1_000;

/// How an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The task was done.
    Success,
    /// It was not.
    Failure,
    /// Part of it was.
    Partial,
}

/// One attempt at a task and the lesson drawn from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Episode {
    /// Its id: unique in the store, random (it says nothing about other episodes), below
    /// 2^53; 0 before it is stored.
    pub id: u64,
    /// The tenant.
    pub tenant: String,
    /// The user the task was done for.
    pub user_id: String,
    /// The agent it belongs to; `None`: every agent of the user learns from it.
    pub agent_id: Option<String>,
    /// The kind of task (an id, e.g. `refund_request`): lessons are looked up by it.
    pub task_type: String,
    /// What was attempted.
    pub description: String,
    /// How it went.
    pub outcome: Outcome,
    /// Why it went that way.
    pub reflection: String,
    /// What to do (or avoid) next time.
    pub lesson: String,
    /// A standing lesson is shown for every task type, not only its own.
    pub standing: bool,
    /// The session it was drawn from, if any: erasing that session erases the episode.
    pub source_session: Option<String>,
    /// When it was recorded.
    pub created_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EpisodeRecord {
    tenant: String,
    user_id: String,
    agent_id: Option<String>,
    task_type: String,
    description: String,
    outcome: Outcome,
    reflection: String,
    lesson: String,
    standing: bool,
    source_session: Option<String>,
    created_at: u64,
}

impl Record for EpisodeRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "episode record";
}

impl EpisodeRecord {
    fn into_episode(self, id: u64) -> Episode {
        Episode {
            id,
            tenant: self.tenant,
            user_id: self.user_id,
            agent_id: self.agent_id,
            task_type: self.task_type,
            description: self.description,
            outcome: self.outcome,
            reflection: self.reflection,
            lesson: self.lesson,
            standing: self.standing,
            source_session: self.source_session,
            created_at: Timestamp::from_micros(self.created_at),
        }
    }
}

impl Episode {
    /// The checks before an episode is recorded: ids, and texts within their bounds.
    pub fn validate(&self) -> Result<()> {
        validate_id("tenant", &self.tenant)?;
        validate_id("user_id", &self.user_id)?;
        if let Some(agent) = &self.agent_id {
            validate_id("agent_id", agent)?;
        }
        validate_id("task_type", &self.task_type)?;
        if let Some(session) = &self.source_session {
            validate_id("source_session_id", session)?;
        }
        bounded("description", &self.description, MAX_EPISODE_TEXT, false)?;
        bounded("reflection", &self.reflection, MAX_EPISODE_TEXT, true)?;
        bounded("lesson", &self.lesson, MAX_LESSON_TEXT, false)
    }
}

fn bounded(field: &'static str, text: &str, max: usize, may_be_empty: bool) -> Result<()> {
    validate_text(field, text)?;
    let invalid = |reason: String| Err(StoreError::InvalidInput { field, reason });
    if !may_be_empty && text.trim().is_empty() {
        return invalid("must not be empty".into());
    }
    if text.chars().count() > max {
        return invalid(format!("must be at most {max} characters"));
    }
    Ok(())
}

impl Store {
    /// [`Store::put_episode`] with ids from `draw` (tests force collisions with it).
    pub(crate) async fn put_episode_drawing(
        &self,
        episode: Episode,
        draw: impl FnMut() -> Result<u64> + Send + 'static,
    ) -> Result<u64> {
        episode.validate()?;
        self.write(move |txn| {
            if let Some(session_id) = &episode.source_session {
                let sessions = txn.open_table(SESSIONS)?;
                let owner = Access::one_user(&*episode.tenant, &*episode.user_id);
                if read_session_record(&sessions, &owner, session_id)?.is_none() {
                    return Err(StoreError::session_not_found(session_id));
                }
            }
            let mut episodes = txn.open_table(EPISODES)?;
            let id = unused_id(draw, |id| Ok(episodes.get(id)?.is_some()))?;
            let seq = next_seq(txn, NEXT_EPISODE_SEQ_KEY)?;
            let record = EpisodeRecord {
                tenant: episode.tenant,
                user_id: episode.user_id,
                agent_id: episode.agent_id,
                task_type: episode.task_type,
                description: episode.description,
                outcome: episode.outcome,
                reflection: episode.reflection,
                lesson: episode.lesson,
                standing: episode.standing,
                source_session: episode.source_session,
                created_at: episode.created_at.as_micros(),
            };
            episodes.insert(id, record.encode().as_slice())?;
            let (tenant, user) = (record.tenant.as_str(), record.user_id.as_str());
            txn.open_table(EPISODE_OWNERS)?
                .insert((tenant, user, id), seq)?;
            txn.open_table(EPISODE_TASKS)?
                .insert((tenant, user, record.task_type.as_str(), seq), id)?;
            Ok(id)
        })
        .await
    }
}

impl Memories<'_> {
    /// Records a new episode and returns its id. A source session must be one of the same
    /// user's sessions (checked in the same transaction, so it cannot be erased in between).
    pub async fn put_episode(self, episode: Episode) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend.memories().put_episode(episode).await;
        }
        self.store.put_episode_drawing(episode, random_id).await
    }

    /// The episode with this id if it belongs to `tenant`.
    pub fn episode(self, tenant: &str, id: u64) -> Result<Option<Episode>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().episode(tenant, id));
        }
        validate_id("tenant", tenant)?;
        let txn = self.store.begin_read()?;
        let table = txn.open_table(EPISODES)?;
        let Some(value) = table.get(id)? else {
            return Ok(None);
        };
        let episode = EpisodeRecord::decode(value.value())?.into_episode(id);
        Ok((episode.tenant == tenant).then_some(episode))
    }

    /// Every episode of a user, oldest first.
    pub fn user_episodes(self, tenant: &str, user_id: &str) -> Result<Vec<Episode>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().user_episodes(tenant, user_id));
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let txn = self.store.begin_read()?;
        let owners = txn.open_table(EPISODE_OWNERS)?;
        let table = txn.open_table(EPISODES)?;
        let mut listed = owners
            .range((tenant, user_id, 0)..=(tenant, user_id, u64::MAX))?
            .map(|entry| {
                let (key, seq) = entry?;
                Ok((seq.value(), key.value().2))
            })
            .collect::<Result<Vec<_>>>()?;
        listed.sort_unstable();
        listed
            .into_iter()
            .map(|(_, id)| read_episode(&table, id))
            .collect()
    }

    /// A user's episodes of one task type that `keep` accepts, newest first, at most
    /// `limit`: one reverse range of the task index, reading only the episodes it returns.
    pub fn recent_episodes(
        self,
        tenant: &str,
        user_id: &str,
        task_type: &str,
        limit: usize,
        keep: impl Fn(&Episode) -> bool + Sync,
    ) -> Result<Vec<Episode>> {
        if let Some(backend) = self.store.backend() {
            return wait(
                backend
                    .memories()
                    .recent_episodes(tenant, user_id, task_type, limit, &keep),
            );
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("task_type", task_type)?;
        let txn = self.store.begin_read()?;
        let tasks = txn.open_table(EPISODE_TASKS)?;
        let table = txn.open_table(EPISODES)?;
        let mut found = Vec::new();
        for entry in tasks
            .range((tenant, user_id, task_type, 0)..=(tenant, user_id, task_type, u64::MAX))?
            .rev()
        {
            if found.len() >= limit {
                break;
            }
            let episode = read_episode(&table, entry?.1.value())?;
            if keep(&episode) {
                found.push(episode);
            }
        }
        Ok(found)
    }
}

impl Eraser {
    /// Deletes an episode of `tenant`; returns whether it existed.
    pub async fn delete_episode(&self, tenant: &str, id: u64) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().delete_episode(tenant, id).await;
        }
        validate_id("tenant", tenant)?;
        let tenant = tenant.to_owned();
        self.store
            .write_alone(move |txn| {
                let record = txn
                    .open_table(EPISODES)?
                    .get(id)?
                    .map(|value| EpisodeRecord::decode(value.value()))
                    .transpose()?;
                match record {
                    Some(record) if record.tenant == tenant => {
                        txn.open_table(EPISODES)?.remove(id)?;
                        remove_episode_keys(txn, id, &record)?;
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            })
            .await
    }

    /// Deletes a user's episodes: all of them, or (with `session_id`) those drawn from that
    /// session. Returns how many, all in one commit.
    pub async fn delete_user_episodes(
        &self,
        tenant: &str,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend
                .eraser()
                .delete_user_episodes(tenant, user_id, session_id)
                .await;
        }
        self.store
            .remove_user_rows(tenant, user_id, session_id, remove_user_episodes)
            .await
    }
}

/// Removes a user's episodes, or (with `session_id`) those drawn from that session, in `txn`.
pub(crate) fn remove_user_episodes(
    txn: &WriteTransaction,
    tenant: &str,
    user_id: &str,
    session_id: Option<&str>,
) -> Result<u64> {
    let mut doomed = Vec::new();
    {
        let owners = txn.open_table(EPISODE_OWNERS)?;
        let table = txn.open_table(EPISODES)?;
        for entry in owners.range((tenant, user_id, 0)..=(tenant, user_id, u64::MAX))? {
            let id = entry?.0.value().2;
            let value = table.get(id)?.ok_or_else(|| unlisted(id))?;
            let record = EpisodeRecord::decode(value.value())?;
            if session_id.is_none() || record.source_session.as_deref() == session_id {
                doomed.push((id, record));
            }
        }
    }
    // One range removal over the episodes' texts, not one `remove` each (see
    // `Store::write_alone`).
    let ids: std::collections::HashSet<u64> = doomed.iter().map(|(id, _)| *id).collect();
    if let (Some(&first), Some(&last)) = (ids.iter().min(), ids.iter().max()) {
        txn.open_table(EPISODES)?
            .retain_in(first..=last, |id, _| !ids.contains(&id))?;
    }
    for (id, record) in &doomed {
        remove_episode_keys(txn, *id, record)?;
    }
    Ok(doomed.len() as u64)
}

/// Removes an episode's entries from the tables that list it (its text is removed by the
/// caller).
fn remove_episode_keys(txn: &WriteTransaction, id: u64, record: &EpisodeRecord) -> Result<()> {
    let (tenant, user) = (record.tenant.as_str(), record.user_id.as_str());
    let seq = txn
        .open_table(EPISODE_OWNERS)?
        .remove((tenant, user, id))?
        .map(|seq| seq.value())
        .ok_or_else(|| StoreError::Corrupted {
            what: "episode indexes",
            detail: format!("episode {id} is stored but not listed"),
        })?;
    txn.open_table(EPISODE_TASKS)?
        .remove((tenant, user, record.task_type.as_str(), seq))?;
    Ok(())
}

fn read_episode(table: &impl ReadableTable<u64, &'static [u8]>, id: u64) -> Result<Episode> {
    let value = table.get(id)?.ok_or_else(|| unlisted(id))?;
    Ok(EpisodeRecord::decode(value.value())?.into_episode(id))
}

fn unlisted(id: u64) -> StoreError {
    StoreError::Corrupted {
        what: "episode indexes",
        detail: format!("episode {id} is listed but not stored"),
    }
}

/// The episodes' part of [`Memories::check_tables`](crate::Memories::check_tables).
pub(crate) fn check_episode_tables(txn: &ReadTransaction, check: &mut TablesCheck) -> Result<()> {
    let episodes = txn.open_table(EPISODES)?;
    let owners = txn.open_table(EPISODE_OWNERS)?;
    let tasks = txn.open_table(EPISODE_TASKS)?;
    let stored = |id: u64| -> Result<Option<EpisodeRecord>> {
        episodes
            .get(id)?
            .map(|value| EpisodeRecord::decode(value.value()))
            .transpose()
    };
    for entry in episodes.iter()? {
        let (id, value) = entry?;
        let id = id.value();
        check.episodes += 1;
        let record = match EpisodeRecord::decode(value.value()) {
            Ok(record) => record,
            Err(err) => {
                check.problem(format!("episode {id}: {err}"));
                continue;
            }
        };
        let (tenant, user) = (record.tenant.as_str(), record.user_id.as_str());
        match owners.get((tenant, user, id))? {
            None => check.problem(format!("episode {id} is not listed in episode_owner_seqs")),
            Some(seq) => {
                let listed = tasks.get((tenant, user, record.task_type.as_str(), seq.value()))?;
                if listed.map(|listed| listed.value()) != Some(id) {
                    check.problem(format!(
                        "episode {id} is not listed in episode_task_seqs at its sequence"
                    ));
                }
            }
        }
    }
    for entry in owners.iter()? {
        let (key, _) = entry?;
        let (tenant, user_id, id) = key.value();
        check.listing(
            "episode_owner_seqs",
            "episode",
            id,
            stored(id),
            |record| record.tenant == tenant && record.user_id == user_id,
            "an owner it does not have",
        );
    }
    for entry in tasks.iter()? {
        let (key, id) = entry?;
        let (tenant, user_id, task_type, _) = key.value();
        let id = id.value();
        check.listing(
            "episode_task_seqs",
            "episode",
            id,
            stored(id),
            |record| {
                record.tenant == tenant
                    && record.user_id == user_id
                    && record.task_type == task_type
            },
            "an owner or task it does not have",
        );
    }
    Ok(())
}
