//! Ending conversations nobody continues: a session with no activity for the configured
//! time is ended as if its client had called `end` (merged into the user's session memory
//! with its agent). It runs in the background, never on a request's path.
//!
//! The store lists open sessions by last activity, so each pass reads only the sessions
//! that are due, and the task sleeps until the next one can be: the oldest open session's
//! activity plus the timeout (nothing appended later can be due earlier).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memlayer_store::{Access, Store, Timestamp};

use crate::{ContextBuilder, MemoryError};

/// Sessions taken from the store per commit.
const BATCH: usize = 100;
/// Longest the task sleeps between passes, so a clock that jumps is noticed.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Shortest: a session due now is ended on the next pass, not in a busy loop.
const MIN_SLEEP: Duration = Duration::from_millis(10);

/// Ends every open session of `store` whose last activity is `timeout` or more before `now`,
/// until `stopping` turns true, and returns how many it merged. A session that cannot be
/// merged (the summariser failed, the store refused) is logged and stays ended: it is not
/// retried on every pass.
///
/// `stopping` is looked at between batches: taking a batch ends its sessions in the store,
/// so a batch taken is merged whole, and a stop waits for that batch only, never for every
/// session due (a large store's first pass merged thousands while a clean stop waited).
pub async fn end_idle_sessions(
    contexts: &ContextBuilder,
    store: &Store,
    timeout: Duration,
    now: Timestamp,
    stopping: &AtomicBool,
) -> Result<usize, MemoryError> {
    let cutoff = Timestamp::from_micros(now.as_micros().saturating_sub(micros(timeout)));
    let mut ended = 0;
    while !stopping.load(Ordering::Relaxed) {
        let due = store.sessions().take_idle_sessions(cutoff, BATCH).await?;
        if due.is_empty() {
            return Ok(ended);
        }
        for (tenant, session_id) in due {
            match contexts
                .end_session(&Access::tenant_wide(tenant), &session_id)
                .await
            {
                Ok(_) => ended += 1,
                // A session created and never written to has nothing to merge.
                Err(MemoryError::NothingToSummarize) => {}
                Err(err) => {
                    tracing::warn!(error = %err.for_log(), "could not merge an idle session into session memory");
                }
            }
        }
    }
    Ok(ended)
}

/// Until `shutdown` resolves, ends sessions idle for `timeout` (see [`end_idle_sessions`]).
pub async fn run_idle_sessions(
    contexts: ContextBuilder,
    store: Store,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        // Ending a session writes its merge: paused while the disk refuses writes.
        tokio::select! {
            () = &mut shutdown => return,
            () = store.writable() => {}
        }
        let stopping = AtomicBool::new(false);
        let pass = end_idle_sessions(&contexts, &store, timeout, Timestamp::now(), &stopping);
        tokio::pin!(pass);
        let (ended, stop) = tokio::select! {
            ended = &mut pass => (ended, false),
            () = &mut shutdown => {
                stopping.store(true, Ordering::Relaxed);
                (pass.await, true)
            }
        };
        if let Err(err) = ended {
            tracing::error!(error = %err.for_log(), "ending idle sessions failed; it is retried");
        }
        if stop {
            return;
        }
        let oldest = store
            .read(|store| store.sessions().oldest_open_activity())
            .await
            .ok()
            .flatten();
        let wait = match oldest {
            Some(at) => {
                let due = at.as_micros().saturating_add(micros(timeout));
                Duration::from_micros(due.saturating_sub(Timestamp::now().as_micros()))
            }
            None => timeout,
        };
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(wait.clamp(MIN_SLEEP, MAX_SLEEP)) => {}
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
