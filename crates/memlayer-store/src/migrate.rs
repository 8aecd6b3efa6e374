//! Brings a file written by an older build up to [`FORMAT_VERSION`], in the transaction that
//! initialises it at open: a file is migrated whole or not at all, and an older build refuses
//! it afterwards (its format version is newer than that build's).

use redb::{ReadableTable, WriteTransaction};

use crate::Result;
use crate::tables::{
    EPISODE_OWNERS, EPISODE_TASKS, ERASURE_IDS, ERASURE_JOBS, ERASURE_RECEIPT_SEQS,
    ERASURE_RECEIPTS, FORMAT_VERSION, FORMAT_VERSION_KEY, MEMORY_OWNERS, META,
    NEXT_EPISODE_SEQ_KEY, NEXT_JOB_SEQ_KEY, NEXT_MEMORY_SEQ_KEY,
};

/// What format 1 had and format 2 replaced.
mod v1 {
    use redb::TableDefinition;

    /// `(tenant, user_id, memory_id)` → `()`, listed in id order.
    pub(super) const MEMORY_OWNERS: TableDefinition<(&str, &str, u64), ()> =
        TableDefinition::new("memory_owners");
    /// `(tenant, user_id, episode_id)` → `()`, listed in id order.
    pub(super) const EPISODE_OWNERS: TableDefinition<(&str, &str, u64), ()> =
        TableDefinition::new("episode_owners");
    /// `(tenant, user_id, task_type, episode_id)` → `()`, newest last by id.
    pub(super) const EPISODE_TASKS: TableDefinition<(&str, &str, &str, u64), ()> =
        TableDefinition::new("episode_tasks");
    /// The counters ids were taken from.
    pub(super) const NEXT_MEMORY_ID_KEY: &str = "next_memory_id";
    pub(super) const NEXT_EPISODE_ID_KEY: &str = "next_episode_id";
    pub(super) const NEXT_JOB_ID_KEY: &str = "next_job_id";
}

/// `(sid, seq)` → `()`: an index of the outbox by session that format 4 kept, so that
/// deleting a session could remove its outbox entries. Those are now left to the embedding
/// worker (they hold no text), and format 5 drops the index.
pub(crate) const OUTBOX_BY_SESSION: redb::TableDefinition<(u64, u64), ()> =
    redb::TableDefinition::new("outbox_by_session");

/// Migrates a file of format `found` (older than this build's) in `txn`.
pub(crate) fn migrate(txn: &WriteTransaction, found: u64) -> Result<()> {
    if found < 2 {
        counted_ids_to_sequences(txn)?;
    }
    if found < 3 {
        crate::memories::index_sources(txn)?;
    }
    if found < 5 {
        txn.delete_table(OUTBOX_BY_SESSION)?;
        crate::activity::key_by_bucket(txn)?;
        crate::idle::key_by_bucket(txn)?;
    }
    txn.open_table(META)?
        .insert(FORMAT_VERSION_KEY, FORMAT_VERSION)?;
    Ok(())
}

/// Format 1 counted memory, episode and erasure ids and ordered every listing by them;
/// format 2 draws ids at random and orders by sequence numbers kept beside them. A counted id
/// is the sequence number its record would have had, so every stored id becomes its own
/// sequence number and every counter the next one: listings keep their order, and what is
/// created later comes after. The stored ids themselves do not change (clients hold them).
fn counted_ids_to_sequences(txn: &WriteTransaction) -> Result<()> {
    for (counter, sequence) in [
        (v1::NEXT_MEMORY_ID_KEY, NEXT_MEMORY_SEQ_KEY),
        (v1::NEXT_EPISODE_ID_KEY, NEXT_EPISODE_SEQ_KEY),
        (v1::NEXT_JOB_ID_KEY, NEXT_JOB_SEQ_KEY),
    ] {
        let mut meta = txn.open_table(META)?;
        let next = meta.remove(counter)?.map(|next| next.value());
        if let Some(next) = next {
            meta.insert(sequence, next)?;
        }
    }
    {
        let old = txn.open_table(v1::MEMORY_OWNERS)?;
        let mut new = txn.open_table(MEMORY_OWNERS)?;
        for entry in old.iter()? {
            let (key, _) = entry?;
            let (tenant, user, id) = key.value();
            new.insert((tenant, user, id), id)?;
        }
    }
    {
        let old = txn.open_table(v1::EPISODE_OWNERS)?;
        let mut new = txn.open_table(EPISODE_OWNERS)?;
        for entry in old.iter()? {
            let (key, _) = entry?;
            let (tenant, user, id) = key.value();
            new.insert((tenant, user, id), id)?;
        }
    }
    {
        let old = txn.open_table(v1::EPISODE_TASKS)?;
        let mut new = txn.open_table(EPISODE_TASKS)?;
        for entry in old.iter()? {
            let (key, _) = entry?;
            let (tenant, user, task, id) = key.value();
            new.insert((tenant, user, task, id), id)?;
        }
    }
    txn.delete_table(v1::MEMORY_OWNERS)?;
    txn.delete_table(v1::EPISODE_OWNERS)?;
    txn.delete_table(v1::EPISODE_TASKS)?;

    let mut ids = txn.open_table(ERASURE_IDS)?;
    for entry in txn.open_table(ERASURE_JOBS)?.iter()? {
        let (id, _) = entry?;
        ids.insert(id.value(), id.value())?;
    }
    let mut order = txn.open_table(ERASURE_RECEIPT_SEQS)?;
    for entry in txn.open_table(ERASURE_RECEIPTS)?.iter()? {
        let (key, _) = entry?;
        let (tenant, id) = key.value();
        ids.insert(id, id)?;
        order.insert((tenant, id), id)?;
    }
    Ok(())
}
