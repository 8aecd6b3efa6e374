//! One session read from one consistent snapshot, in as many steps as the reader needs: a
//! context first reads the outline of every message (role and token count, no content),
//! decides from it which messages it will show, and reads only their content — all from the
//! same snapshot, so the two reads cannot disagree about which messages exist.

use redb::ReadOnlyTable;

use crate::backend::SessionView;
use crate::model::{Access, Message, Role, Session, StoredSummary, Timestamp, validate_id};
use crate::record::SessionRecord;
use crate::sealing::{Opener, outline};
use crate::sessions::{message_from_record, read_session_record, session_from_record};
use crate::store::{ReadTxn, Sessions, wait};
use crate::tables::{MESSAGES, SESSIONS, SUMMARIES};
use crate::{Result, StoreError};

/// A message without its content and metadata: what windowing and token budgets need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageOutline {
    /// Position in the session.
    pub index: u64,
    /// Who said it.
    pub role: Role,
    /// When it was said.
    pub timestamp: Timestamp,
    /// Tokens in its content.
    pub token_count: u32,
}

/// Which state of a session something was read from: the session itself (its surrogate key,
/// never reused, so one deleted and created again under the same id differs) and how many of
/// its messages had been erased. Messages are only appended or erased, so two reads with the
/// same version agree on every message below the older one's count.
///
/// Derived data computed from a read (a summary, a session memory) is saved only while the
/// session is still at that version ([`StoreError::SessionChanged`] otherwise): a message
/// erased, or a session deleted, after the read and before the save never reaches it.
///
/// [`StoreError::SessionChanged`]: crate::StoreError::SessionChanged
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionVersion {
    pub(crate) sid: u64,
    pub(crate) erasures: u64,
}

impl SessionVersion {
    /// The version of the session with surrogate key `sid` after `erasures` of its messages
    /// were erased: for a backend other than redb (PostgreSQL keeps both on the session's
    /// row) to hand out the versions its reads were made at and check them on a save.
    pub fn new(sid: u64, erasures: u64) -> Self {
        Self { sid, erasures }
    }

    pub(crate) fn of(record: &SessionRecord) -> Self {
        Self {
            sid: record.sid,
            erasures: record.erased,
        }
    }
}

/// A session as it was when the snapshot was taken; later writes are not seen. Hold it only
/// for the reads at hand: a compaction waits for open snapshots.
pub struct SessionSnapshot {
    session: Session,
    version: SessionVersion,
    reads: Reads,
}

/// Where a snapshot's reads go.
enum Reads {
    /// A read transaction of the redb file.
    File(ReadTxn),
    /// The view a backend took ([`crate::Store::served_by`]).
    Backend(Box<dyn SessionView>),
}

impl Sessions<'_> {
    /// A snapshot of the session, or `None` if `access` reaches no session with that id.
    pub fn snapshot(self, access: &Access, session_id: &str) -> Result<Option<SessionSnapshot>> {
        if let Some(backend) = self.store.backend() {
            let view = wait(backend.sessions().snapshot(access, session_id))?;
            return Ok(view.map(|view| SessionSnapshot {
                session: view.session().clone(),
                version: view.version(),
                reads: Reads::Backend(view),
            }));
        }
        access.validate()?;
        validate_id("session_id", session_id)?;
        let txn = self.store.begin_read()?;
        let record: Option<SessionRecord> =
            read_session_record(&txn.open_table(SESSIONS)?, access, session_id)?;
        record
            .map(|record| {
                Ok(SessionSnapshot {
                    session: session_from_record(session_id.to_owned(), &record)?,
                    version: SessionVersion::of(&record),
                    reads: Reads::File(txn),
                })
            })
            .transpose()
    }
}

impl SessionSnapshot {
    /// The session record.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The version of the session this snapshot reads.
    pub fn version(&self) -> SessionVersion {
        self.version
    }

    /// The session's surrogate key (as in [`crate::MessageKey`]): never reused, so it tells
    /// a session from one deleted and created again under the same id.
    pub fn sid(&self) -> u64 {
        self.version.sid
    }

    /// How many of the session's messages were erased one by one so far. Messages are
    /// never changed, only appended (after `message_count`) or erased, so two snapshots of
    /// one session (same `created_at`) with the same count hold the same messages below the
    /// older one's `message_count`: what was read from the first still holds in the second
    /// (with the same `sid` and, for reads from the load checkpoint, the same `load_from`).
    pub fn erasures(&self) -> u64 {
        self.version.erasures
    }

    /// Up to `limit` messages from index `from` on, in index order.
    pub fn messages(&self, from: u64, limit: usize) -> Result<Vec<Message>> {
        let txn = match &self.reads {
            Reads::File(txn) => txn,
            Reads::Backend(view) => return wait(view.messages(from, limit)),
        };
        let sid = self.sid();
        let mut opener = Opener::new(txn.keys(), sid);
        messages_table(txn)?
            .range((sid, from)..(sid, self.session.message_count))?
            .take(limit)
            .map(|entry| {
                let (key, value) = entry?;
                let index = key.value().1;
                message_from_record(index, opener.message(index, value.value())?)
            })
            .collect::<Result<_>>()
            .map_err(|err| self.changed(err))
    }

    /// The outline of every message from index `from` on, in index order.
    pub fn outline(&self, from: u64) -> Result<Vec<MessageOutline>> {
        let txn = match &self.reads {
            Reads::File(txn) => txn,
            Reads::Backend(view) => return wait(view.outline(from)),
        };
        let sid = self.sid();
        messages_table(txn)?
            .range((sid, from)..(sid, self.session.message_count))?
            .map(|entry| {
                let (key, value) = entry?;
                let outline = outline(value.value())?;
                Ok(MessageOutline {
                    index: key.value().1,
                    role: outline.role,
                    timestamp: Timestamp::from_micros(outline.timestamp),
                    token_count: outline.token_count,
                })
            })
            .collect()
    }

    /// The messages at `indices` that exist, in the order asked.
    pub fn messages_at(&self, indices: &[u64]) -> Result<Vec<Message>> {
        let txn = match &self.reads {
            Reads::File(txn) => txn,
            Reads::Backend(view) => return wait(view.messages_at(indices)),
        };
        let table = messages_table(txn)?;
        let mut opener = Opener::new(txn.keys(), self.sid());
        let mut found = Vec::with_capacity(indices.len());
        for &index in indices {
            if let Some(value) = table.get((self.sid(), index))? {
                let stored = opener
                    .message(index, value.value())
                    .map_err(|err| self.changed(err))?;
                found.push(message_from_record(index, stored)?);
            }
        }
        Ok(found)
    }

    /// The session's rolling summary, if one was saved.
    pub fn summary(&self) -> Result<Option<StoredSummary>> {
        let txn = match &self.reads {
            Reads::File(txn) => txn,
            Reads::Backend(view) => return wait(view.summary()),
        };
        txn.open_table(SUMMARIES)?
            .get(self.sid())?
            .map(|value| {
                let stored = Opener::new(txn.keys(), self.sid())
                    .summary(value.value())
                    .map_err(|err| self.changed(err))?;
                Ok(StoredSummary {
                    text: stored.text,
                    first_index: stored.first_index,
                    last_index: stored.last_index,
                    created_at: Timestamp::from_micros(stored.created_at),
                })
            })
            .transpose()
    }
}

impl SessionSnapshot {
    /// A key destroyed after this snapshot was taken: an erasure re-keyed or deleted the
    /// session since, so what it read no longer holds.
    fn changed(&self, err: StoreError) -> StoreError {
        match err {
            StoreError::KeyDestroyed { .. } => StoreError::SessionChanged {
                session_id: self.session.id.clone(),
            },
            other => other,
        }
    }
}

fn messages_table(txn: &ReadTxn) -> Result<ReadOnlyTable<(u64, u64), &'static [u8]>> {
    Ok(txn.open_table(MESSAGES)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::version;
    use crate::{Append, NewMessage, NewSession, Store};

    fn message(role: Role, content: &str, token_count: u32) -> NewMessage {
        NewMessage {
            timestamp: Some(Timestamp::from_micros(u64::from(token_count))),
            ..NewMessage::new(role, content, token_count)
        }
    }

    #[tokio::test]
    async fn a_snapshot_reads_outlines_and_contents_of_one_moment() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        assert!(
            store
                .sessions()
                .snapshot(&Access::tenant_wide("t"), "s")
                .unwrap()
                .is_none()
        );
        let append = Append {
            messages: vec![
                message(Role::System, "rules", 1),
                message(Role::User, "hi", 2),
                message(Role::Assistant, "hello", 3),
                message(Role::User, "bye", 4),
            ],
            create: Some(NewSession {
                user_id: "u".into(),
                agent_id: "a".into(),
                ..NewSession::default()
            }),
            idempotency_key: None,
        };
        store
            .sessions()
            .append(&Access::tenant_wide("t"), "s", append)
            .await
            .unwrap();
        store
            .sessions()
            .save_summary(
                &Access::tenant_wide("t"),
                "s",
                version(&store, "t", "s"),
                "sum".into(),
                1,
                2,
            )
            .await
            .unwrap();
        let snapshot = store
            .sessions()
            .snapshot(&Access::tenant_wide("t"), "s")
            .unwrap()
            .unwrap();

        // Writes after the snapshot are not seen by it.
        store
            .eraser()
            .erase_message(&Access::tenant_wide("t"), "s", 2)
            .await
            .unwrap();
        let more = Append {
            messages: vec![message(Role::Assistant, "later", 5)],
            create: None,
            idempotency_key: None,
        };
        store
            .sessions()
            .append(&Access::tenant_wide("t"), "s", more)
            .await
            .unwrap();

        assert_eq!(snapshot.session().message_count, 4);
        assert_eq!(snapshot.erasures(), 0);
        assert_eq!(
            Some(snapshot.sid()),
            store
                .feed()
                .session_key(&Access::tenant_wide("t"), "s")
                .unwrap()
        );
        let outline = snapshot.outline(1).unwrap();
        assert_eq!(
            outline
                .iter()
                .map(|m| (m.index, m.role, m.token_count, m.timestamp.as_micros()))
                .collect::<Vec<_>>(),
            [
                (1, Role::User, 2, 2),
                (2, Role::Assistant, 3, 3),
                (3, Role::User, 4, 4)
            ]
        );
        let contents = |messages: Vec<Message>| -> Vec<(u64, String)> {
            messages.into_iter().map(|m| (m.index, m.content)).collect()
        };
        assert_eq!(
            contents(snapshot.messages(2, usize::MAX).unwrap()),
            [(2, "hello".to_owned()), (3, "bye".to_owned())]
        );
        assert_eq!(
            contents(snapshot.messages_at(&[3, 0, 9]).unwrap()),
            [(3, "bye".to_owned()), (0, "rules".to_owned())]
        );
        let summary = snapshot.summary().unwrap().unwrap();
        assert_eq!((summary.first_index, summary.last_index), (1, 2));
        drop(snapshot);

        // A new snapshot sees the erasure (the message and the summary covering it) and the
        // append.
        let now = store
            .sessions()
            .snapshot(&Access::tenant_wide("t"), "s")
            .unwrap()
            .unwrap();
        assert_eq!(
            now.outline(0)
                .unwrap()
                .iter()
                .map(|m| m.index)
                .collect::<Vec<_>>(),
            [0, 1, 3, 4]
        );
        assert!(now.summary().unwrap().is_none());
        assert_eq!(now.erasures(), 1);
        drop(now);
        // Erasing an erased message erases nothing and counts nothing.
        store
            .eraser()
            .erase_message(&Access::tenant_wide("t"), "s", 2)
            .await
            .unwrap();
        assert_eq!(
            store
                .sessions()
                .snapshot(&Access::tenant_wide("t"), "s")
                .unwrap()
                .unwrap()
                .erasures(),
            1
        );
    }
}
