//! Sessions, their messages, runs and summaries, idle sessions and snapshots.

use super::BoxFuture;
use crate::Result;
use crate::model::{
    Access, Append, Appended, Message, NewRun, NewSession, Page, Run, Session, SessionFilter,
    StoredSummary, Timestamp,
};
use crate::snapshot::{MessageOutline, SessionSnapshot, SessionVersion};
use crate::store::Store;

/// Sessions, their messages, runs and summaries, and idle sessions: [`Store::sessions`]
/// answered by a backend. Each method's contract is the handle's method of the same name
/// ([`crate::Sessions`]).
pub trait SessionBackend: Send + Sync {
    /// [`crate::Sessions::create_session`].
    fn create_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: Option<&'a str>,
        new: NewSession,
    ) -> BoxFuture<'a, Result<Session>>;

    /// [`crate::Sessions::append`].
    fn append<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        append: Append,
    ) -> BoxFuture<'a, Result<Appended>>;

    /// [`crate::Sessions::record_run`].
    fn record_run<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        run: NewRun,
    ) -> BoxFuture<'a, Result<Run>>;

    /// [`crate::Sessions::clear_session`].
    fn clear_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<u64>>;

    /// [`crate::Sessions::save_summary`].
    fn save_summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        read: SessionVersion,
        text: String,
        first_index: u64,
        last_index: u64,
    ) -> BoxFuture<'a, Result<()>>;

    /// [`crate::Sessions::session`].
    fn session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Session>>>;

    /// [`crate::Sessions::session_exists`].
    fn session_exists<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>>;

    /// [`crate::Sessions::messages`].
    fn messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Message>>>;

    /// [`crate::Sessions::runs`].
    fn runs<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Run>>>;

    /// [`crate::Sessions::search_messages`].
    fn search_messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Message>>>;

    /// [`crate::Sessions::summary`].
    fn summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSummary>>>;

    /// [`crate::Sessions::list_sessions`].
    fn list_sessions<'a>(
        &'a self,
        access: &'a Access,
        filter: &'a SessionFilter,
        page: u64,
        page_size: usize,
    ) -> BoxFuture<'a, Result<Page<Session>>>;

    /// [`crate::Sessions::snapshot`]: one consistent view of the session for several reads.
    fn snapshot<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn SessionView>>>>;

    /// [`crate::Sessions::take_idle_sessions`]. With several callers at once (several nodes
    /// on one database), each idle session is taken by one of them.
    fn take_idle_sessions(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>>>;

    /// [`crate::Sessions::end_session_activity`].
    fn end_session_activity<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<()>>;

    /// [`crate::Sessions::oldest_open_activity`].
    fn oldest_open_activity(&self) -> BoxFuture<'_, Result<Option<Timestamp>>>;
}

/// One session as it was when the view was taken ([`SessionSnapshot`]'s contract): every
/// read through it agrees with every other, whatever was written since.
pub trait SessionView: Send + Sync {
    /// [`SessionSnapshot::session`].
    fn session(&self) -> &Session;

    /// [`SessionSnapshot::version`].
    fn version(&self) -> SessionVersion;

    /// [`SessionSnapshot::messages`].
    fn messages(&self, from: u64, limit: usize) -> BoxFuture<'_, Result<Vec<Message>>>;

    /// [`SessionSnapshot::outline`].
    fn outline(&self, from: u64) -> BoxFuture<'_, Result<Vec<MessageOutline>>>;

    /// [`SessionSnapshot::messages_at`].
    fn messages_at<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Message>>>;

    /// [`SessionSnapshot::summary`].
    fn summary(&self) -> BoxFuture<'_, Result<Option<StoredSummary>>>;
}

/// The redb store as a session backend. Its reads run on the blocking pool
/// ([`Store::read`]), as its callers run them; a snapshot's reads run where they are awaited
/// (a redb snapshot cannot move to another thread's closure), and are short.
impl SessionBackend for Store {
    fn create_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: Option<&'a str>,
        new: NewSession,
    ) -> BoxFuture<'a, Result<Session>> {
        Box::pin(self.sessions().create_session(access, session_id, new))
    }

    fn append<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        append: Append,
    ) -> BoxFuture<'a, Result<Appended>> {
        Box::pin(self.sessions().append(access, session_id, append))
    }

    fn record_run<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        run: NewRun,
    ) -> BoxFuture<'a, Result<Run>> {
        Box::pin(self.sessions().record_run(access, session_id, run))
    }

    fn clear_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.sessions().clear_session(access, session_id))
    }

    fn save_summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        read: SessionVersion,
        text: String,
        first_index: u64,
        last_index: u64,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.sessions().save_summary(
            access,
            session_id,
            read,
            text,
            first_index,
            last_index,
        ))
    }

    fn session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Session>>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(self.read(move |store| store.sessions().session(&access, &session_id)))
    }

    fn session_exists<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<bool>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(self.read(move |store| store.sessions().session_exists(&access, &session_id)))
    }

    fn messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Message>>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(
            self.read(move |store| store.sessions().messages(&access, &session_id, from, limit)),
        )
    }

    fn runs<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Run>>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(self.read(move |store| store.sessions().runs(&access, &session_id, from, limit)))
    }

    fn search_messages<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        query: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Message>>> {
        let (access, session_id, query) = (access.clone(), session_id.to_owned(), query.to_owned());
        Box::pin(self.read(move |store| {
            store
                .sessions()
                .search_messages(&access, &session_id, &query, limit)
        }))
    }

    fn summary<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredSummary>>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(self.read(move |store| store.sessions().summary(&access, &session_id)))
    }

    fn list_sessions<'a>(
        &'a self,
        access: &'a Access,
        filter: &'a SessionFilter,
        page: u64,
        page_size: usize,
    ) -> BoxFuture<'a, Result<Page<Session>>> {
        let (access, filter) = (access.clone(), filter.clone());
        Box::pin(self.read(move |store| {
            store
                .sessions()
                .list_sessions(&access, &filter, page, page_size)
        }))
    }

    fn snapshot<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn SessionView>>>> {
        Box::pin(async move {
            let snapshot = self.sessions().snapshot(access, session_id)?;
            Ok(snapshot.map(|snapshot| Box::new(snapshot) as Box<dyn SessionView>))
        })
    }

    fn take_idle_sessions(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<(String, String)>>> {
        Box::pin(self.sessions().take_idle_sessions(cutoff, limit))
    }

    fn end_session_activity<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.sessions().end_session_activity(access, session_id))
    }

    fn oldest_open_activity(&self) -> BoxFuture<'_, Result<Option<Timestamp>>> {
        Box::pin(self.read(|store| store.sessions().oldest_open_activity()))
    }
}

impl SessionView for SessionSnapshot {
    fn session(&self) -> &Session {
        SessionSnapshot::session(self)
    }

    fn version(&self) -> SessionVersion {
        SessionSnapshot::version(self)
    }

    fn messages(&self, from: u64, limit: usize) -> BoxFuture<'_, Result<Vec<Message>>> {
        Box::pin(std::future::ready(SessionSnapshot::messages(
            self, from, limit,
        )))
    }

    fn outline(&self, from: u64) -> BoxFuture<'_, Result<Vec<MessageOutline>>> {
        Box::pin(std::future::ready(SessionSnapshot::outline(self, from)))
    }

    fn messages_at<'a>(&'a self, indices: &'a [u64]) -> BoxFuture<'a, Result<Vec<Message>>> {
        Box::pin(std::future::ready(SessionSnapshot::messages_at(
            self, indices,
        )))
    }

    fn summary(&self) -> BoxFuture<'_, Result<Option<StoredSummary>>> {
        Box::pin(std::future::ready(SessionSnapshot::summary(self)))
    }
}
