//! `PgStore` behind memlayer-store's backend boundary (`memlayer_store::backend`): the
//! concerns it implements so far, each method answering with its inherent method of the
//! same name. Caller mistakes come back as the very [`StoreError`] they carry; every other
//! failure is [`StoreError::Backend`] with this crate's error as its source.

use std::sync::Arc;

use memlayer_store::{
    Access, Append, Appended, BoxFuture, Message, MessageOutline, NewRun, NewSession, Page, Run,
    Session, SessionBackend, SessionFilter, SessionVersion, SessionView, StoreError, StoredSummary,
    Timestamp,
};

use crate::{PgSnapshot, PgStore, PostgresError};

impl From<PostgresError> for StoreError {
    fn from(err: PostgresError) -> Self {
        match err {
            PostgresError::Store(err) => err,
            PostgresError::Pool {
                source: deadpool_postgres::PoolError::Closed,
            } => StoreError::Closed,
            // What the erasure coordinator retries, as it does a redb compaction that reads
            // held up.
            blocked @ (PostgresError::ErasureBlocked { .. } | PostgresError::KeysInUse { .. }) => {
                StoreError::Busy(blocked.to_string())
            }
            other => StoreError::Backend {
                source: Arc::new(other),
            },
        }
    }
}

/// `result` with a backend failure as a [`StoreError`]: what every trait method of this
/// crate answers.
pub(crate) fn store<T>(result: crate::Result<T>) -> memlayer_store::Result<T> {
    result.map_err(StoreError::from)
}

impl SessionBackend for PgStore {
    fn create_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: Option<&'a str>,
        new: NewSession,
    ) -> BoxFuture<'a, memlayer_store::Result<Session>> {
        Box::pin(async move { store(self.create_session(access, session_id, new).await) })
    }

    fn append<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        append: Append,
    ) -> BoxFuture<'a, memlayer_store::Result<Appended>> {
        Box::pin(async move { store(self.append(access, session_id, append).await) })
    }

    fn record_run<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        run: NewRun,
    ) -> BoxFuture<'a, memlayer_store::Result<Run>> {
        Box::pin(async move { store(self.record_run(access, session_id, run).await) })
    }

    fn clear_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.clear_session(access, session_id).await) })
    }

    fn save_summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        read: SessionVersion,
        text: String,
        first_index: u64,
        last_index: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<()>> {
        Box::pin(async move {
            store(
                self.save_summary(access, session_id, read, text, first_index, last_index)
                    .await,
            )
        })
    }

    fn session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Session>>> {
        Box::pin(async move { store(self.session(access, session_id).await) })
    }

    fn session_exists<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.session_exists(access, session_id).await) })
    }

    fn messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Message>>> {
        Box::pin(async move {
            let page = store(self.messages(access, session_id, from, limit).await)?;
            Ok(page.items)
        })
    }

    fn runs<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Run>>> {
        Box::pin(async move { store(self.runs(access, session_id, from, limit).await) })
    }

    fn search_messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Message>>> {
        Box::pin(async move { store(self.search_messages(access, session_id, query, limit).await) })
    }

    fn summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<StoredSummary>>> {
        Box::pin(async move { store(self.summary(access, session_id).await) })
    }

    fn list_sessions<'a>(
        &'a self,
        access: &'a Access,
        filter: &'a SessionFilter,
        page: u64,
        page_size: usize,
    ) -> BoxFuture<'a, memlayer_store::Result<Page<Session>>> {
        Box::pin(async move { store(self.list_sessions(access, filter, page, page_size).await) })
    }

    fn snapshot<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Box<dyn SessionView>>>> {
        Box::pin(async move {
            let snapshot = store(self.snapshot(access, session_id).await)?;
            Ok(snapshot.map(|snapshot| Box::new(snapshot) as Box<dyn SessionView>))
        })
    }

    fn take_idle_sessions(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<(String, String)>>> {
        Box::pin(async move { store(self.take_idle_sessions(cutoff, limit).await) })
    }

    fn end_session_activity<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<()>> {
        Box::pin(async move { store(self.end_session_activity(access, session_id).await) })
    }

    fn oldest_open_activity(&self) -> BoxFuture<'_, memlayer_store::Result<Option<Timestamp>>> {
        Box::pin(async move { store(self.oldest_open_activity().await) })
    }
}

impl SessionView for PgSnapshot {
    fn session(&self) -> &Session {
        PgSnapshot::session(self)
    }

    fn version(&self) -> SessionVersion {
        PgSnapshot::version(self)
    }

    fn messages(
        &self,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<Message>>> {
        Box::pin(async move { store(PgSnapshot::messages(self, from, limit).await) })
    }

    fn outline(&self, from: u64) -> BoxFuture<'_, memlayer_store::Result<Vec<MessageOutline>>> {
        Box::pin(async move { store(PgSnapshot::outline(self, from).await) })
    }

    fn messages_at<'a>(
        &'a self,
        indices: &'a [u64],
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Message>>> {
        Box::pin(async move { store(PgSnapshot::messages_at(self, indices).await) })
    }

    fn summary(&self) -> BoxFuture<'_, memlayer_store::Result<Option<StoredSummary>>> {
        Box::pin(async move { store(PgSnapshot::summary(self).await) })
    }
}
