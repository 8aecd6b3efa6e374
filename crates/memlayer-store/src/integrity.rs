//! Whether the tables that list long-term memories and episodes agree with the records they
//! list: what `memlayer check` verifies besides the page checksums, after a crash or before a
//! backup. Each listing is written in the transaction that writes its record, so any
//! disagreement is a bug or damage, never a crash's doing.

use crate::Result;
use crate::store::Memories;

/// What [`Memories::check_tables`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablesCheck {
    /// Memory records read.
    pub memories: u64,
    /// Episode records read.
    pub episodes: u64,
    /// Every disagreement, naming the table and the record's opaque id (never text, user
    /// ids or keys, so the report can be shared).
    pub problems: Vec<String>,
}

impl TablesCheck {
    /// Whether every listing agrees with its record.
    pub fn is_consistent(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn problem(&mut self, problem: String) {
        self.problems.push(problem);
    }

    /// Checks an entry of `table` listing the `kind` `id`: its record, as read (`stored`),
    /// must exist and `fit` the entry; `misfit` says what the entry claims otherwise.
    pub(crate) fn listing<R>(
        &mut self,
        table: &str,
        kind: &str,
        id: u64,
        stored: Result<Option<R>>,
        fits: impl FnOnce(&R) -> bool,
        misfit: &str,
    ) {
        match stored {
            Ok(Some(record)) if fits(&record) => {}
            Ok(Some(_)) => self.problem(format!("{table} lists {kind} {id} under {misfit}")),
            Ok(None) => self.problem(format!("{table} lists {kind} {id}, which is not stored")),
            // A record that does not decode is reported by the pass over the records.
            Err(_) => {}
        }
    }
}

impl Memories<'_> {
    /// Reads every memory and episode and every entry listing one, in one snapshot:
    /// each memory has its owner entry, its key entry when it is keyed and a source entry for
    /// every session it cites; each episode its owner and task entries; and every entry
    /// names a stored record that matches it. Reads everything: for operators and tests, not
    /// for a request path.
    pub fn check_tables(self) -> Result<TablesCheck> {
        let txn = self.store.begin_read()?;
        let mut check = TablesCheck::default();
        crate::memories::check_memory_tables(&txn, &mut check)?;
        crate::episodes::check_episode_tables(&txn, &mut check)?;
        Ok(check)
    }
}
