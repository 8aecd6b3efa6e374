//! The reader side of recall: a query's filter (the sessions its scope covers, their
//! keyword partition, the messages it excludes), the read-your-writes wait, and the search
//! that fuses the keyword and vector rankings.

use std::ops::ControlFlow;

use memlayer_store::{
    Access, MAX_MESSAGES_PER_SESSION, MessageKey, SessionRef, StoreError, blocking,
};
use rustc_hash::FxHashSet;

use super::{Excluded, Recall, RecallHit, RecallQuery, Recalled, Scope, TenantUser};
use crate::{HybridQuery, IndexError, Result, Retriever};

/// Which messages a query may find, beyond what the indexes hold.
pub(super) struct Filter {
    /// The sessions its scope covers. It is looked up for every candidate of a search (every
    /// vector of an exact scan), where SipHash took a third of a recall's time: session keys
    /// are the store's own counters, which no caller chooses, so a fast hasher is safe here.
    pub(super) allowed: FxHashSet<u64>,
    /// The keyword partition holding them: a scope is one user's. `None` when the scope
    /// covers nothing indexed.
    pub(super) keywords: Option<TenantUser>,
    /// The session key and message indices it excludes, sorted: the caller chooses them, so
    /// they are searched, not hashed (keys made to collide would make a set quadratic).
    excluded: Option<(u64, Vec<u64>)>,
}
impl Recall {
    /// Searches `query.scope` by keywords and by meaning and fuses the two rankings.
    pub async fn recall(&self, query: RecallQuery) -> Result<Recalled> {
        // Embedded first: a query embedded before comes from the embedder's cache at once,
        // and the read-your-writes head read after it still covers every append committed
        // before the call.
        let (embedded, embedding_failed) = match self
            .inner
            .embedder
            .embed(query.access.tenant(), vec![query.query.clone()])
            .await
        {
            Ok(mut vectors) => (vectors.pop(), None),
            Err(err) => (
                None,
                Some(format!(
                    "the query could not be embedded ({err}); only keywords were searched"
                )),
            ),
        };
        // When the index has caught up with the store, as it almost always has, one trip
        // to the blocking pool answers: under load every trip waits for a thread.
        let this = self.clone();
        let flow = blocking(move || -> Result<_> {
            let head = this.inner.store.feed().outbox_head()?;
            if this.indexed_up_to(head) {
                let filter = this.filter(&query)?;
                let recalled =
                    this.search(&query, &filter, embedded.as_deref(), embedding_failed)?;
                return Ok(ControlFlow::Break(recalled));
            }
            Ok(ControlFlow::Continue((
                head,
                query,
                embedded,
                embedding_failed,
            )))
        })
        .await?;
        let (head, query, embedded, embedding_failed) = match flow {
            ControlFlow::Continue(behind) => behind,
            ControlFlow::Break(recalled) => return Ok(recalled),
        };
        let degraded = embedding_failed.or(self.wait_for_head(head).await?);
        let this = self.clone();
        // The filter is made after the wait: a scope covers the sessions the index has seen.
        blocking(move || -> Result<_> {
            let filter = this.filter(&query)?;
            this.search(&query, &filter, embedded.as_deref(), degraded)
        })
        .await
    }

    /// The sessions a query's scope covers, their keyword partition, and the messages it
    /// excludes.
    pub(super) fn filter(&self, query: &RecallQuery) -> Result<Filter> {
        let (allowed, keywords) = self.scope_sessions(query)?;
        Ok(Filter {
            allowed,
            keywords,
            excluded: self.excluded_keys(&query.access, query.exclude.as_ref())?,
        })
    }

    /// The session key and message indices an exclusion names; `None` when it names
    /// nothing that exists.
    fn excluded_keys(
        &self,
        access: &Access,
        exclude: Option<&Excluded>,
    ) -> Result<Option<(u64, Vec<u64>)>> {
        let Some(exclude) = exclude else {
            return Ok(None);
        };
        let sid = self
            .inner
            .store
            .feed()
            .session_key(access, &exclude.session_id)?;
        let mut indices = exclude.indices.clone();
        indices.sort_unstable();
        indices.dedup();
        Ok(sid.map(|sid| (sid, indices)))
    }

    /// Waits until every append committed before the call is indexed, or the configured
    /// time passes; says what is missing if it does.
    pub async fn wait_for_index(&self) -> Result<Option<String>> {
        let store = self.inner.store.clone();
        let head = blocking(move || store.feed().outbox_head()).await?;
        self.wait_for_head(head).await
    }

    /// Whether every outbox entry up to `head` is in the vector index, and every message
    /// stored before the start in the keyword index.
    fn indexed_up_to(&self, head: u64) -> bool {
        let progress = self.inner.progress.borrow();
        progress.vectors >= head && progress.backfilled
    }

    /// Waits until every outbox entry up to `head` is indexed, or the configured time
    /// passes; says what is missing if it does.
    async fn wait_for_head(&self, head: u64) -> Result<Option<String>> {
        let mut progress = self.inner.progress.subscribe();
        self.inner.awaited.notify_one();
        // The guard `wait_for` returns must not live across the next await (it is not Send).
        let caught_up = matches!(
            tokio::time::timeout(
                self.inner.options.read_your_writes_wait,
                progress.wait_for(|p| p.vectors >= head && p.backfilled),
            )
            .await,
            Ok(Ok(_))
        );
        if caught_up {
            return Ok(None);
        }
        if !self.inner.progress.borrow().backfilled {
            return Ok(Some(
                "the keyword index is still being rebuilt after the start: messages stored \
                 before it were searched by meaning only"
                    .to_owned(),
            ));
        }
        // No count: the backlog is every tenant's, and its length would tell the asker how
        // much other tenants write.
        Ok(Some(
            "recent appends are not embedded yet; they were searched by keywords only".to_owned(),
        ))
    }

    /// The sessions a scope covers, and the keyword partition they are in: none of a user
    /// the query's access does not reach.
    fn scope_sessions(&self, query: &RecallQuery) -> Result<(FxHashSet<u64>, Option<TenantUser>)> {
        let access = &query.access;
        match &query.scope {
            Scope::Session { session_id } => {
                let sid = self
                    .inner
                    .store
                    .feed()
                    .session_key(access, session_id)?
                    .ok_or_else(|| {
                        IndexError::Store(StoreError::SessionNotFound {
                            session_id: session_id.clone(),
                        })
                    })?;
                // Unknown until the index has seen a message of the session, and it has none.
                let partition = self.read().owners.get(&sid).map(|owner| owner.user.clone());
                Ok((FxHashSet::from_iter([sid]), partition))
            }
            Scope::User { user_id, .. } if !access.sees(user_id) => {
                Ok((FxHashSet::default(), None))
            }
            Scope::User { user_id, agent_id } => {
                let user = TenantUser {
                    tenant: access.tenant().to_owned(),
                    user_id: user_id.clone(),
                };
                let sessions = self
                    .read()
                    .owners
                    .iter()
                    .filter(|(_, owner)| {
                        owner.user == user
                            && agent_id
                                .as_ref()
                                .is_none_or(|agent| &owner.agent_id == agent)
                    })
                    .map(|(sid, _)| *sid)
                    .collect();
                Ok((sessions, Some(user)))
            }
        }
    }

    fn search(
        &self,
        query: &RecallQuery,
        filter: &Filter,
        embedded: Option<&[f32]>,
        degraded: Option<String>,
    ) -> Result<Recalled> {
        let Filter {
            allowed: sessions,
            keywords,
            excluded,
        } = filter;
        // No partition: the scope covers no message the indexes had when the filter was
        // made (every message in `docs` has its session's owner), so nothing can be found.
        let Some(partition) = keywords else {
            return Ok(Recalled {
                hits: Vec::new(),
                degraded,
            });
        };
        let indexes = self.read();
        // Every key the vector and keyword sides hold is in `docs` (they change together,
        // under the write lock), so its fields are read only when the query filters on them.
        let filters_fields =
            query.roles.is_some() || query.after.is_some() || query.before.is_some();
        let admits = |raw: u64| {
            let key = MessageKey::from_u64(raw);
            sessions.contains(&key.session())
                && !excluded.as_ref().is_some_and(|(sid, indices)| {
                    key.session() == *sid && indices.binary_search(&key.index()).is_ok()
                })
                && (!filters_fields
                    || indexes.docs.get(&raw).is_some_and(|doc| {
                        query
                            .roles
                            .as_ref()
                            .is_none_or(|roles| roles.contains(&doc.role))
                            && query.after.is_none_or(|after| doc.timestamp >= after)
                            && query.before.is_none_or(|before| doc.timestamp < before)
                    }))
        };
        // A message's neighbours are the turns before and after it in its session that the
        // indexes have.
        let neighbours = |raw: u64| {
            let key = MessageKey::from_u64(raw);
            let at = |index: Option<u64>| {
                index
                    .map(|index| MessageKey::new(key.session(), index).as_u64())
                    .filter(|neighbour| indexes.docs.contains_key(neighbour))
            };
            let next = Some(key.index() + 1).filter(|&next| next < MAX_MESSAGES_PER_SESSION);
            [at(key.index().checked_sub(1)), at(next)]
        };
        let fused = indexes.hybrid.search(
            partition,
            HybridQuery {
                text: &query.query,
                vector: embedded,
                k: query.k,
                filter: Some(&admits),
                neighbours: Some(&neighbours),
            },
        )?;
        let keys: Vec<MessageKey> = fused.iter().map(|f| MessageKey::from_u64(f.id)).collect();
        let places: Vec<Option<SessionRef>> = keys
            .iter()
            .map(|key| Some(indexes.owners.get(&key.session())?.at.clone()))
            .collect();
        // Not under the index lock: a store in a database answers over the network, and a
        // writer waiting for the lock would hold up every reader meanwhile.
        drop(indexes);
        let messages = self.inner.store.feed().messages_by_key(&keys)?;
        let hits = fused
            .iter()
            .zip(places)
            .zip(messages)
            .filter_map(|((fused, place), message)| {
                Some(RecallHit {
                    session: place?,
                    message: message?,
                    score: fused.score,
                    keyword_rank: fused.rank(Retriever::Keyword),
                    vector_rank: fused.rank(Retriever::Vector),
                })
            })
            .collect();
        Ok(Recalled { hits, degraded })
    }
}
