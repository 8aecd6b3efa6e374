//! The listing index: every session under each of its four scopes (see [`scopes`]), by last
//! activity, so a listing by any filter combination, a retention rule's selection and a
//! tenant's oldest conversation are each one range scan.
//!
//! Entries are keyed by the [`bucket`] of a session's last activity, not its exact time: an
//! append moves the session's entries (here and in the open sessions of `idle.rs`) only when
//! its activity enters a new bucket. An agent appending a step every few milliseconds moves
//! them ten times a second instead of on every append, which was a sixth of the store
//! writer's work (docs/benchmarks.md). The exact time stays in the session's record, and every
//! reader orders the sessions within a bucket by it, so what they return is exact: a bucket
//! holds only the sessions of one scope last active within the same tenth of a second.

use redb::{ReadableTable, Table, WriteTransaction};

use crate::model::Timestamp;
use crate::record::{Record, SessionRecord};
use crate::tables::{SESSION_ACTIVITY, SESSION_COUNTS, scopes};
use crate::{Result, StoreError};

/// The width of an activity bucket.
pub(crate) const BUCKET_MICROS: u64 = 100_000;

/// The bucket (its first microsecond) that activity at `at` falls in.
pub(crate) fn bucket(at: u64) -> u64 {
    at - at % BUCKET_MICROS
}

/// The first bucket after the one `at` falls in: the exclusive end of a range that must hold
/// every session last active before `at`.
pub(crate) fn bucket_after(at: u64) -> u64 {
    bucket(at).saturating_add(BUCKET_MICROS)
}

type ActivityKey = (&'static str, &'static str, u64, &'static str);
type SessionKey = (&'static str, &'static str);

/// Lists a new session in its four scopes, counts it, and opens it (`idle.rs`).
pub(crate) fn add(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    record: &SessionRecord,
) -> Result<()> {
    list(txn, tenant, session_id, record, true)?;
    crate::idle::open(txn, tenant, session_id, record.updated_at)
}

/// Takes a deleted session out of the listing, the counts and the open sessions.
pub(crate) fn remove(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    record: &SessionRecord,
) -> Result<()> {
    list(txn, tenant, session_id, record, false)?;
    crate::idle::close(txn, tenant, session_id, record)
}

/// Adds the session's four entries and counts (`listed`), or removes them.
fn list(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    record: &SessionRecord,
    listed: bool,
) -> Result<()> {
    let mut activity = txn.open_table(SESSION_ACTIVITY)?;
    let mut counts = txn.open_table(SESSION_COUNTS)?;
    let at = bucket(record.updated_at);
    for scope in scopes(&record.user_id, &record.agent_id) {
        let key = (tenant, scope.as_str(), at, session_id);
        if listed {
            activity.insert(key, ())?;
        } else {
            activity.remove(key)?;
        }
        count(&mut counts, (tenant, scope.as_str()), listed)?;
    }
    Ok(())
}

/// Counts one session more or one fewer in a scope; a count that reaches zero is removed.
fn count(counts: &mut Table<'_, SessionKey, u64>, scope: (&str, &str), added: bool) -> Result<()> {
    let count = counts.get(scope)?.map_or(0, |c| c.value());
    match (added, count) {
        (true, _) => counts.insert(scope, count + 1)?,
        (false, 0 | 1) => counts.remove(scope)?,
        (false, _) => counts.insert(scope, count - 1)?,
    };
    Ok(())
}

/// Records activity at `now` in the session's record, and moves its entries when that
/// starts a new bucket.
pub(crate) fn touch(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    record: &mut SessionRecord,
    now: Timestamp,
) -> Result<()> {
    // Keep last activity monotonic even if the wall clock steps back.
    let updated_at = record.updated_at.max(now.as_micros());
    let (from, to) = (bucket(record.updated_at), bucket(updated_at));
    if from != to {
        let mut activity = txn.open_table(SESSION_ACTIVITY)?;
        for scope in scopes(&record.user_id, &record.agent_id) {
            activity.remove((tenant, scope.as_str(), from, session_id))?;
            activity.insert((tenant, scope.as_str(), to, session_id), ())?;
        }
        crate::idle::touch(txn, tenant, session_id, record.updated_at, updated_at)?;
    }
    record.updated_at = updated_at;
    Ok(())
}

/// Every entry of one scope, oldest bucket first.
fn scope_entries<'t>(
    activity: &'t impl ReadableTable<ActivityKey, ()>,
    (tenant, scope): (&str, &str),
) -> Result<redb::Range<'t, ActivityKey, ()>> {
    Ok(activity.range((tenant, scope, 0, "")..(tenant, scope, u64::MAX, ""))?)
}

/// The ids of every session of a scope, in no order a caller may rely on: the index alone
/// answers, no record is read.
pub(crate) fn session_ids(
    activity: &impl ReadableTable<ActivityKey, ()>,
    scope: (&str, &str),
) -> Result<Vec<String>> {
    scope_entries(activity, scope)?
        .map(|entry| Ok(entry?.0.value().3.to_owned()))
        .collect()
}

/// The record of a session an index lists; its absence is corruption.
pub(crate) fn listed_record(
    sessions: &impl ReadableTable<SessionKey, &'static [u8]>,
    tenant: &str,
    session_id: &str,
    listing: &'static str,
) -> Result<SessionRecord> {
    let value = sessions
        .get((tenant, session_id))?
        .ok_or_else(|| StoreError::Corrupted {
            what: listing,
            detail: format!("lists missing session {session_id:?}"),
        })?;
    SessionRecord::decode(value.value())
}

/// Sessions `skip..skip + take` of a scope in order of last activity, newest first (ties by
/// id, descending), with their records. Reads the records of the page and of the sessions
/// sharing a bucket with its first or last, nothing else.
pub(crate) fn newest_first(
    activity: &impl ReadableTable<ActivityKey, ()>,
    sessions: &impl ReadableTable<SessionKey, &'static [u8]>,
    (tenant, scope): (&str, &str),
    skip: usize,
    take: usize,
) -> Result<Vec<(String, SessionRecord)>> {
    let mut pager = Pager {
        skip,
        end: skip.saturating_add(take),
        passed: 0,
        page: Vec::new(),
    };
    let mut current = None;
    let mut bucket_ids = Vec::new();
    for entry in scope_entries(activity, (tenant, scope))?.rev() {
        let (key, _) = entry?;
        let (_, _, at, session_id) = key.value();
        if current != Some(at) {
            pager.bucket(sessions, tenant, &mut bucket_ids)?;
            if pager.passed >= pager.end {
                break;
            }
            current = Some(at);
        }
        bucket_ids.push(session_id.to_owned());
    }
    pager.bucket(sessions, tenant, &mut bucket_ids)?;
    Ok(pager.page)
}

/// The page [`newest_first`] gathers, one bucket at a time.
struct Pager {
    skip: usize,
    end: usize,
    /// Sessions in the buckets gone through.
    passed: usize,
    page: Vec<(String, SessionRecord)>,
}

impl Pager {
    /// Goes through the bucket of the sessions `ids` (emptied), reading their records only
    /// when some of them are on the page.
    fn bucket(
        &mut self,
        sessions: &impl ReadableTable<SessionKey, &'static [u8]>,
        tenant: &str,
        ids: &mut Vec<String>,
    ) -> Result<()> {
        let len = ids.len();
        if self.passed + len > self.skip && self.passed < self.end {
            let mut listed = ids
                .drain(..)
                .map(|id| {
                    let record = listed_record(sessions, tenant, &id, "session listing")?;
                    Ok((id, record))
                })
                .collect::<Result<Vec<_>>>()?;
            listed.sort_unstable_by(|(a_id, a), (b_id, b)| {
                (b.updated_at, b_id).cmp(&(a.updated_at, a_id))
            });
            let from = self.skip.saturating_sub(self.passed);
            let to = (self.end - self.passed).min(len);
            self.page.extend(listed.drain(from..to));
        }
        ids.clear();
        self.passed += len;
        Ok(())
    }
}

/// Every session of a scope last active before `before`, oldest first (ties by id), as
/// `(last activity, session id)`. Reads each one's record.
pub(crate) fn active_before(
    activity: &impl ReadableTable<ActivityKey, ()>,
    sessions: &impl ReadableTable<SessionKey, &'static [u8]>,
    (tenant, scope): (&str, &str),
    before: u64,
) -> Result<Vec<(u64, String)>> {
    let mut found = Vec::new();
    for entry in
        activity.range((tenant, scope, 0, "")..(tenant, scope, bucket_after(before), ""))?
    {
        let (key, _) = entry?;
        let (_, _, _, session_id) = key.value();
        let record = listed_record(sessions, tenant, session_id, "session listing")?;
        // Only the last bucket can hold sessions active at `before` or later.
        if record.updated_at < before {
            found.push((record.updated_at, session_id.to_owned()));
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The session of a scope active least recently (ties: the smallest id), with that time.
pub(crate) fn oldest(
    activity: &impl ReadableTable<ActivityKey, ()>,
    sessions: &impl ReadableTable<SessionKey, &'static [u8]>,
    (tenant, scope): (&str, &str),
) -> Result<Option<(u64, String)>> {
    let mut oldest: Option<(u64, String)> = None;
    let mut first_bucket = None;
    for entry in scope_entries(activity, (tenant, scope))? {
        let (key, _) = entry?;
        let (_, _, at, session_id) = key.value();
        if *first_bucket.get_or_insert(at) != at {
            break;
        }
        let record = listed_record(sessions, tenant, session_id, "session listing")?;
        let candidate = (record.updated_at, session_id.to_owned());
        if oldest.as_ref().is_none_or(|oldest| candidate < *oldest) {
            oldest = Some(candidate);
        }
    }
    Ok(oldest)
}

/// Format 5 keys the listing by bucket; format 4 keyed it by the exact time. Moves every
/// entry to its bucket (`idle::key_by_bucket` does the same for the open sessions).
pub(crate) fn key_by_bucket(txn: &WriteTransaction) -> Result<()> {
    let mut activity = txn.open_table(SESSION_ACTIVITY)?;
    let mut exact = Vec::new();
    for entry in activity.iter()? {
        let (key, _) = entry?;
        let (tenant, scope, at, session_id) = key.value();
        if bucket(at) != at {
            let session = (tenant.to_owned(), scope.to_owned(), session_id.to_owned());
            exact.push((session, at));
        }
    }
    for ((tenant, scope, session_id), at) in exact {
        let (tenant, scope, session_id) = (tenant.as_str(), scope.as_str(), session_id.as_str());
        activity.remove((tenant, scope, at, session_id))?;
        activity.insert((tenant, scope, bucket(at), session_id), ())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use redb::{Database, ReadableDatabase};

    use super::*;
    use crate::tables::{OPEN_SESSIONS, SESSIONS, scope};

    const TENANTS: [&str; 2] = ["t0", "t1"];
    const NAMES: [&str; 2] = ["x", "y"];

    #[derive(Debug, Clone)]
    enum Op {
        Create {
            tenant: usize,
            id: u8,
            user: usize,
            agent: usize,
            at: u64,
        },
        Touch {
            tenant: usize,
            id: u8,
            at: u64,
        },
        Remove {
            tenant: usize,
            id: u8,
        },
        TakeIdle {
            cutoff: u64,
            limit: usize,
        },
    }

    /// Times within five buckets, often on or beside a bucket's edge.
    fn time() -> impl Strategy<Value = u64> {
        let offset = prop_oneof![Just(0), Just(1), Just(BUCKET_MICROS - 1), 0..BUCKET_MICROS];
        (0..5u64, offset).prop_map(|(bucket, offset)| bucket * BUCKET_MICROS + offset)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..2usize, 0..6u8, 0..2usize, 0..2usize, time())
                .prop_map(|(tenant, id, user, agent, at)| Op::Create { tenant, id, user, agent, at }),
            4 => (0..2usize, 0..6u8, time()).prop_map(|(tenant, id, at)| Op::Touch { tenant, id, at }),
            1 => (0..2usize, 0..6u8).prop_map(|(tenant, id)| Op::Remove { tenant, id }),
            1 => (time(), 0..4usize).prop_map(|(cutoff, limit)| Op::TakeIdle { cutoff, limit }),
        ]
    }

    /// What the store should hold: `(tenant, id)` → its record and whether it is open.
    type Model = BTreeMap<(&'static str, String), (SessionRecord, bool)>;

    fn record(sid: u64, user: &str, agent: &str, at: u64) -> SessionRecord {
        SessionRecord {
            sid,
            user_id: user.to_owned(),
            agent_id: agent.to_owned(),
            flow_id: None,
            created_at: at,
            updated_at: at,
            metadata: String::new(),
            next_index: 0,
            next_run: 0,
            last_role: None,
            load_from: 0,
            erased: 0,
            key: None,
        }
    }

    fn apply(txn: &WriteTransaction, model: &mut Model, op: Op) -> Result<()> {
        let mut sessions = txn.open_table(SESSIONS)?;
        match op {
            Op::Create {
                tenant,
                id,
                user,
                agent,
                at,
            } => {
                let key = (TENANTS[tenant], id.to_string());
                if !model.contains_key(&key) {
                    let record = record(model.len() as u64, NAMES[user], NAMES[agent], at);
                    add(txn, key.0, &key.1, &record)?;
                    sessions.insert((key.0, key.1.as_str()), record.encode().as_slice())?;
                    model.insert(key, (record, true));
                }
            }
            Op::Touch { tenant, id, at } => {
                let key = (TENANTS[tenant], id.to_string());
                if let Some((record, _)) = model.get_mut(&key) {
                    touch(txn, key.0, &key.1, record, Timestamp::from_micros(at))?;
                    sessions.insert((key.0, key.1.as_str()), record.encode().as_slice())?;
                }
            }
            Op::Remove { tenant, id } => {
                let key = (TENANTS[tenant], id.to_string());
                if let Some((record, _)) = model.remove(&key) {
                    remove(txn, key.0, &key.1, &record)?;
                    sessions.remove((key.0, key.1.as_str()))?;
                }
            }
            Op::TakeIdle { cutoff, limit } => {
                drop(sessions);
                let mut due: Vec<_> = model
                    .iter()
                    .filter(|(_, (record, open))| *open && record.updated_at < cutoff)
                    .map(|((tenant, id), (record, _))| (record.updated_at, *tenant, id.clone()))
                    .collect();
                due.sort();
                due.truncate(limit);
                let expected: Vec<_> = due
                    .into_iter()
                    .map(|(_, tenant, id)| (tenant.to_owned(), id))
                    .collect();
                assert_eq!(crate::idle::take(txn, cutoff, limit)?, expected);
                for (tenant, id) in expected {
                    if let Some((_, open)) =
                        model.get_mut(&(TENANTS[usize::from(tenant == "t1")], id))
                    {
                        *open = false;
                    }
                }
            }
        }
        Ok(())
    }

    /// Every reader against the model, at every page and at every cutoff that matters.
    fn check(db: &Database, model: &Model) -> Result<()> {
        let txn = db.begin_read()?;
        let activity = txn.open_table(SESSION_ACTIVITY)?;
        let sessions = txn.open_table(SESSIONS)?;
        let mut cutoffs: Vec<u64> = vec![0, u64::MAX];
        for (record, _) in model.values() {
            for delta in [0, 1] {
                cutoffs.push(record.updated_at + delta);
            }
        }
        for tenant in TENANTS {
            let mut listed_scopes = vec![scope(None, None)];
            for name in NAMES {
                listed_scopes.push(scope(Some(name), None));
                listed_scopes.push(scope(None, Some(name)));
                for agent in NAMES {
                    listed_scopes.push(scope(Some(name), Some(agent)));
                }
            }
            for listed in &listed_scopes {
                let mut expected: Vec<(u64, String)> = model
                    .iter()
                    .filter(|((t, _), (record, _))| {
                        *t == tenant && scopes(&record.user_id, &record.agent_id).contains(listed)
                    })
                    .map(|((_, id), (record, _))| (record.updated_at, id.clone()))
                    .collect();
                expected.sort();
                let scope = (tenant, listed.as_str());
                for &cutoff in &cutoffs {
                    let before: Vec<_> = expected
                        .iter()
                        .filter(|(at, _)| *at < cutoff)
                        .cloned()
                        .collect();
                    assert_eq!(active_before(&activity, &sessions, scope, cutoff)?, before);
                }
                assert_eq!(
                    oldest(&activity, &sessions, scope)?,
                    expected.first().cloned()
                );
                let newest: Vec<_> = expected.iter().rev().map(|(_, id)| id.clone()).collect();
                for skip in 0..=newest.len() + 1 {
                    for take in [0, 1, 2, 5] {
                        let page: Vec<_> = newest_first(&activity, &sessions, scope, skip, take)?
                            .into_iter()
                            .map(|(id, _)| id)
                            .collect();
                        let want: Vec<_> = newest.iter().skip(skip).take(take).cloned().collect();
                        assert_eq!(page, want, "{scope:?} skip {skip} take {take}");
                    }
                }
            }
        }
        let open_oldest = model
            .values()
            .filter(|(_, open)| *open)
            .map(|(record, _)| record.updated_at)
            .min();
        assert_eq!(
            crate::idle::oldest(&txn.open_table(OPEN_SESSIONS)?, &sessions)?,
            open_oldest
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Creates, activity at any time (including earlier than the last), deletions and
        /// idle sweeps, interleaved: listings, retention's selection, the oldest session and
        /// the idle sweep answer exactly what ordering the records by their last activity
        /// would, whichever buckets the sessions share.
        #[test]
        fn readers_order_by_exact_activity_across_buckets(
            ops in proptest::collection::vec(op(), 1..40),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let db = Database::create(dir.path().join("activity.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(SESSION_ACTIVITY).unwrap();
            txn.open_table(SESSION_COUNTS).unwrap();
            txn.open_table(OPEN_SESSIONS).unwrap();
            txn.open_table(SESSIONS).unwrap();
            txn.commit().unwrap();
            let mut model = Model::new();
            for op in ops {
                let txn = db.begin_write().unwrap();
                apply(&txn, &mut model, op).unwrap();
                txn.commit().unwrap();
                check(&db, &model).unwrap();
            }
        }
    }
}
