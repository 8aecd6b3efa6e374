//! Backups while serving: a consistent copy of the whole store in a new file.
//!
//! The copy is logical. One read transaction — a snapshot that neither waits for nor blocks
//! the writer — is copied table by table into a new redb file, which is committed durably
//! and is itself a valid store. Copying entries rather than pages also leaves out the free
//! pages of the live file, so a backup never carries bytes of data already erased. (Data
//! erased *after* a backup stays in that backup: backups are for the operator to rotate.)
//! The destination is another database, not this store's, so writing it does not go through
//! the writer thread.
//!
//! A backup is one file, with no key file beside it: what the store keeps sealed
//! (`sealing.rs`) is opened on the way and copied plain, as a store before sealing kept it
//! (sessions without a key; idempotency digests, which were keyed, forgotten). A store opened
//! from a backup serves it so, and seals the sessions it creates.

use std::fs::File;
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{
    Database, ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};

use crate::data_keys::DataKeys;
use crate::erasure::forget_session_digests;
use crate::record::{Record, SessionRecord};
use crate::sealing::{Sealer, rewrite_session};
use crate::tables::{SESSIONS, TableVisitor, for_each_table};
use crate::{Result, Store, StoreError};

/// What a backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backup {
    /// Tables copied (every table of the store).
    pub tables: u64,
    /// Entries copied, over all tables.
    pub entries: u64,
    /// Size of the backup file in bytes.
    pub bytes: u64,
}

impl Store {
    /// Writes a consistent copy of the whole store into `file`, which must be empty (a new
    /// file, or an anonymous temporary one that is streamed elsewhere and never named). Reads
    /// and writes go on meanwhile; the copy holds what was committed when it began.
    pub fn backup(&self, file: File) -> Result<Backup> {
        let source = self.begin_read()?;
        let size = file
            .try_clone()
            .map_err(|err| StoreError::Backup(Arc::new(err)))?;
        let target = Database::builder().create_with_backend(FileBackend::new(file)?)?;
        let txn = target.begin_write()?;
        let mut copy = CopyTables {
            from: &source,
            to: &txn,
            backup: Backup {
                tables: 0,
                entries: 0,
                bytes: 0,
            },
        };
        for_each_table(&mut copy)?;
        let mut backup = copy.backup;
        unseal(&txn, source.keys())?;
        txn.commit()?;
        drop(target);
        backup.bytes = size
            .metadata()
            .map_err(|err| StoreError::Backup(Arc::new(err)))?
            .len();
        Ok(backup)
    }
}

/// Stores every sealed session of `txn` plain.
fn unseal(txn: &WriteTransaction, keys: &DataKeys) -> Result<()> {
    let mut sessions = txn.open_table(SESSIONS)?;
    let sealed = sessions
        .iter()?
        .filter_map(|entry| {
            let decoded = entry.map_err(StoreError::from).and_then(|(key, value)| {
                let (tenant, session_id) = key.value();
                let record = SessionRecord::decode(value.value())?;
                Ok(((tenant.to_owned(), session_id.to_owned()), record))
            });
            match decoded {
                Ok((_, ref record)) if record.key.is_none() => None,
                other => Some(other),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    for ((tenant, session_id), mut record) in sealed {
        let sid = record.sid;
        rewrite_session(txn, keys, sid, &Sealer::plain(sid), false)?;
        forget_session_digests(txn, sid)?;
        record.key = None;
        sessions.insert(
            (tenant.as_str(), session_id.as_str()),
            record.encode().as_slice(),
        )?;
    }
    Ok(())
}

struct CopyTables<'a> {
    from: &'a ReadTransaction,
    to: &'a WriteTransaction,
    backup: Backup,
}

impl TableVisitor for CopyTables<'_> {
    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: TableDefinition<K, V>,
    ) -> Result<()> {
        let from = self.from.open_table(table)?;
        let mut to = self.to.open_table(table)?;
        for entry in from.iter()? {
            let (key, value) = entry?;
            to.insert(key.value(), value.value())?;
        }
        self.backup.tables += 1;
        self.backup.entries += from.len()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, TableHandle};

    use super::*;
    use crate::{Access, Append, NewMessage, NewSession, Role};

    #[tokio::test]
    async fn a_backup_is_a_store_with_every_table_and_what_was_committed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("live.redb")).unwrap();
        let messages = ["kept one", "kept two"].map(|text| NewMessage::new(Role::User, text, 2));
        let append = Append {
            messages: messages.into(),
            create: Some(NewSession {
                user_id: "u".into(),
                agent_id: "a".into(),
                ..NewSession::default()
            }),
            idempotency_key: None,
        };
        store
            .sessions()
            .append(&Access::tenant_wide("t"), "s-1", append)
            .await
            .unwrap();
        let path = dir.path().join("backup.redb");
        let backup = store.backup(File::create_new(&path).unwrap()).unwrap();
        assert!(backup.entries > 0 && backup.bytes > 0, "{backup:?}");

        // Every table the live file has is in the backup, with the same number of entries.
        let live = store.begin_read().unwrap();
        let copy_db = Database::open(&path).unwrap();
        let copy = copy_db.begin_read().unwrap();
        let names = |txn: &ReadTransaction| {
            let mut names: Vec<String> = txn
                .list_tables()
                .unwrap()
                .map(|table| table.name().to_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&live), names(&copy));
        assert_eq!(backup.tables, names(&live).len() as u64);
        drop((live, copy, copy_db));

        // And it opens as a store with the session.
        let restored = Store::open(&path).unwrap();
        let messages = restored
            .sessions()
            .messages(&Access::tenant_wide("t"), "s-1", 0, 10)
            .unwrap();
        let texts: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["kept one", "kept two"]);
    }
}
