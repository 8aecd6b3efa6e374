//! Conversation retention: each tenant may keep conversations for a number of days; a daily
//! pass erases the ones inactive for longer. A pass missed while the server was down runs at
//! the next start, because what is due is decided by the last run's time, not by a clock.

use std::time::Duration;

use memlayer_store::{StoreError, Timestamp};

use crate::coordinator::ORPHANS_CHECKED_EVERY;
use crate::job::{ErasureRequest, Receipt, Target};
use crate::{Coordinator, ErasureError, RunningErasure};

/// The erasure of every conversation of `tenant` inactive for more than `days` days before
/// `now` (all of them with 0).
fn purge_request(tenant: &str, days: u32, requested_by: &str, now: Timestamp) -> ErasureRequest {
    let cutoff = if days == 0 {
        u64::MAX
    } else {
        now.as_micros()
            .saturating_sub(u64::from(days) * MICROS_PER_DAY)
    };
    ErasureRequest {
        tenant: tenant.to_owned(),
        target: Target::InactiveSince {
            older_than_days: days,
            cutoff,
        },
        requested_by: requested_by.to_owned(),
        user_id: None,
    }
}

/// How often a tenant's rule runs.
const RETENTION_PERIOD: Duration = Duration::from_secs(24 * 60 * 60);
/// How often the scheduler looks for a rule that is due.
const CHECK_EVERY: Duration = Duration::from_secs(15 * 60);
/// After a pass that left erasures pending, the first wait before the next one; it doubles
/// up to [`RETRY_MAX`] while they stay pending.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);
const MICROS_PER_DAY: u64 = 24 * 60 * 60 * 1_000_000;

/// A tenant's retention rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRule {
    /// The tenant.
    pub tenant: String,
    /// Conversations inactive for more days than this are erased.
    pub days: u32,
    /// When the rule last ran (the epoch if never).
    pub last_run: Timestamp,
}

impl Coordinator {
    /// Every tenant's rule.
    pub async fn retention_rules(&self) -> Result<Vec<RetentionRule>, ErasureError> {
        let rules = self
            .store()
            .read(|store| store.tenants().retention_rules())
            .await?;
        Ok(rules
            .into_iter()
            .map(|(tenant, days, last_run)| RetentionRule {
                tenant,
                days,
                last_run,
            })
            .collect())
    }

    /// Runs every rule whose last run is a day or more before `now`, and returns what they
    /// erased. A run is claimed in the store before its purge starts, so that of nodes
    /// sharing the store one runs it (one receipt); a node that dies between the claim and
    /// recording the purge's job leaves that day's run to the next day's, which erases what
    /// it would have.
    pub async fn apply_due_retention(&self, now: Timestamp) -> Result<Vec<Receipt>, ErasureError> {
        let mut receipts = Vec::new();
        for rule in self.retention_rules().await? {
            let due = now.as_micros().saturating_sub(rule.last_run.as_micros())
                >= RETENTION_PERIOD.as_micros() as u64;
            if !due
                || !self
                    .store()
                    .tenants()
                    .claim_retention(&rule.tenant, rule.last_run, now)
                    .await?
            {
                continue;
            }
            receipts.push(
                self.purge(&rule.tenant, rule.days, "retention", now)
                    .await?,
            );
        }
        Ok(receipts)
    }

    /// Erases every conversation of `tenant` inactive for more than `days` days before
    /// `now` (all of them with 0).
    pub async fn purge(
        &self,
        tenant: &str,
        days: u32,
        requested_by: &str,
        now: Timestamp,
    ) -> Result<Receipt, ErasureError> {
        self.erase(purge_request(tenant, days, requested_by, now))
            .await
    }

    /// [`Coordinator::purge`] in the background (see [`Coordinator::start`]).
    pub async fn start_purge(
        &self,
        tenant: &str,
        days: u32,
        requested_by: &str,
        now: Timestamp,
    ) -> Result<RunningErasure, ErasureError> {
        self.start(purge_request(tenant, days, requested_by, now))
            .await
    }

    /// Until `shutdown` resolves, every few minutes, whenever the store takes writes again
    /// after a disk fault, and soon after a run left its job pending: finishes erasures left
    /// pending (by a crash, a compaction postponed by busy reads, a full disk or a database
    /// that did not answer) and applies due retention rules. A pass that could not finish
    /// them is retried after a backoff ([`RETRY_FIRST`], doubling up to [`RETRY_MAX`]).
    pub async fn run_maintenance(self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        // Kept across passes, so that a fault and its recovery during a pass are seen too.
        let mut refusals = self.store().refusals();
        let mut backoff = RETRY_FIRST;
        loop {
            refusals.borrow_and_update();
            let resumed = self.resume().await;
            if let Err(err) = &resumed {
                tracing::error!(error = %err.for_log(), "resuming pending erasures failed; it is retried");
            }
            if let Err(err) = self.apply_due_retention(Timestamp::now()).await {
                tracing::error!(error = %err.for_log(), "retention pass failed; it is retried");
            }
            let next_pass = if resumed.is_ok() {
                backoff = RETRY_FIRST;
                CHECK_EVERY
            } else {
                let wait = backoff;
                backoff = (backoff * 2).min(RETRY_MAX);
                wait
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(next_pass) => {}
                // An erasure a full disk interrupted finishes as soon as space is back.
                () = writes_resumed(&mut refusals) => {}
                // A request's erasure failed part-way (a failed pass notifies too, but then
                // waits out its backoff); a moment later, the next pass finishes it.
                () = self.left_pending(), if resumed.is_ok() => {
                    tokio::select! {
                        () = &mut shutdown => return,
                        () = tokio::time::sleep(RETRY_FIRST) => {}
                    }
                }
                // A job whose node died (on a store several nodes share) is this one's once
                // its lease ran out. After a failed pass the backoff decides when to retry.
                () = self.orphaned_job(), if resumed.is_ok() => {}
            }
        }
    }

    /// Resolves when, at a check every [`ORPHANS_CHECKED_EVERY`], more jobs are pending
    /// than run here: one run by another node, or left by one that died (`resume` takes
    /// those whose lease ran out). One small read per check.
    async fn orphaned_job(&self) {
        loop {
            tokio::time::sleep(ORPHANS_CHECKED_EVERY).await;
            let this = self.clone();
            match memlayer_store::blocking(move || this.pending()).await {
                Ok(pending) if pending > self.running_here() => return,
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %err.for_log(), "counting pending erasures failed");
                }
            }
        }
    }
}

/// Resolves when the store takes writes again after refusing them since `refusals` was last
/// looked at.
async fn writes_resumed(refusals: &mut tokio::sync::watch::Receiver<Option<StoreError>>) {
    loop {
        if refusals.changed().await.is_err() {
            // The store is gone, and with it any change to wait for.
            return std::future::pending().await;
        }
        if refusals.borrow_and_update().is_none() {
            return;
        }
    }
}
