//! Recovery from disk faults without a person: while the store refuses writes after the disk
//! filled up or failed one, the disk is probed every second and the store reopened once it
//! takes writes again (`Store::recover`: checksums verified as at a start), so a single-node
//! deployment comes back by itself when space is freed. When the reopening itself fails, the
//! file or the device is at fault and waiting will not help: the server stops with an error,
//! the process exits non-zero, and a supervisor's restart checks the file again at start.

use std::future::Future;
use std::time::Duration;

use memlayer_store::{Recovery, Store, StoreError};

/// How often the disk is probed while the store refuses writes. A probe writes and syncs
/// 1 MiB, little next to what a second of refused traffic would have written, and a client
/// told to retry after `STORAGE_RETRY_AFTER_SECS` finds writes back on its first retry.
const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Until `shutdown` resolves, reopens the store whenever a disk fault made it refuse writes
/// and the disk takes them again. Fails with the reopening's error when the store could not
/// be reopened; it then refuses every read and write, and the caller stops the server.
pub(crate) async fn keep_store_writable(
    store: Store,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StoreError> {
    tokio::pin!(shutdown);
    let mut refusals = store.refusals();
    loop {
        let cause = tokio::select! {
            () = &mut shutdown => return Ok(()),
            refused = refusals.wait_for(Option::is_some) => match refused {
                Ok(cause) => cause.clone(),
                // The store is gone; so is anything to recover.
                Err(_) => return Ok(()),
            },
        };
        if let Some(cause) = cause {
            tracing::error!(
                error = %cause.for_log(),
                "the store refuses writes after a disk fault; reads go on, and writes resume \
                 by themselves once the disk takes them again (probed every second)"
            );
        }
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                () = tokio::time::sleep(PROBE_EVERY) => {}
            }
            match store.read(Store::recover).await {
                Ok(Recovery::Writable) => {
                    tracing::info!(
                        "the disk takes writes again: the store was reopened, its checksums \
                         verified, and writes resume"
                    );
                    break;
                }
                Ok(Recovery::Waiting(err)) => {
                    tracing::debug!(error = %err.for_log(), "the disk still refuses writes");
                }
                Err(err) => {
                    tracing::error!(
                        error = %err.for_log(),
                        "reopening the store after a disk fault failed; the server stops so \
                         that a supervisor restarts it"
                    );
                    return Err(err);
                }
            }
        }
    }
}
