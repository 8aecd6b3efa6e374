//! Disk space as a first-class figure: the store file's size and the free space of its file
//! system in `/metrics` and the conversation stats (which `memlayer stats` and the admin page
//! show), and, when free space falls below `ServerConfig::disk_warning_free_percent`, a
//! warning in the log and in `/readyz` while there is still time to free space, before the
//! disk fills up and writes are refused.

use std::future::Future;
use std::time::Duration;

use memlayer_store::{DiskSpace, Store, StoreError};
use serde::Serialize;
use utoipa::ToSchema;

/// How often the log's warning looks at the free space: a disk fills in minutes at the
/// earliest, and a look is two system calls.
const CHECK_EVERY: Duration = Duration::from_secs(30);

/// The store's disk figures as the API answers them.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Disk {
    /// Bytes the server may still write on the file system of the data directory.
    free_bytes: u64,
    /// The file system's size in bytes.
    size_bytes: u64,
    /// Bytes the store file takes.
    store_bytes: u64,
    /// Whether free space is below the configured warning threshold.
    low: bool,
}

impl Disk {
    pub(crate) fn new(space: &DiskSpace, warning_percent: u8) -> Self {
        Self {
            free_bytes: space.free_bytes,
            size_bytes: space.size_bytes,
            store_bytes: space.store_bytes,
            low: is_low(space, warning_percent),
        }
    }
}

/// Whether less than `warning_percent` of the file system is free (never with 0).
fn is_low(space: &DiskSpace, warning_percent: u8) -> bool {
    space.free_share() * 100.0 < f64::from(warning_percent)
}

/// What `/readyz` says while free space is low: still ready, but not for long.
pub(crate) fn warning(space: &DiskSpace, warning_percent: u8) -> Option<String> {
    is_low(space, warning_percent).then(|| {
        format!(
            "{:.1}% of the data directory's file system is free ({} MiB), below the \
             {warning_percent}% warning threshold: free space before writes are refused",
            space.free_share() * 100.0,
            space.free_bytes >> 20
        )
    })
}

/// Until `shutdown` resolves, logs a warning when free space falls below `warning_percent`
/// and a line when it is back above, once per crossing; nothing with 0.
pub(crate) async fn watch_disk_space(
    store: Store,
    warning_percent: u8,
    shutdown: impl Future<Output = ()>,
) {
    if warning_percent == 0 {
        return;
    }
    tokio::pin!(shutdown);
    let mut low = false;
    loop {
        match store.read(|store| store.disk_space()).await {
            Ok(space) => {
                let now_low = is_low(&space, warning_percent);
                if now_low && !low {
                    tracing::warn!(
                        free_bytes = space.free_bytes,
                        size_bytes = space.size_bytes,
                        store_bytes = space.store_bytes,
                        warning_percent,
                        "free disk space is low: free some before the disk fills up and \
                         writes are refused"
                    );
                } else if low && !now_low {
                    tracing::info!(
                        free_bytes = space.free_bytes,
                        "free disk space is above the warning threshold again"
                    );
                }
                low = now_low;
            }
            // A database's disk is its server's to watch.
            Err(StoreError::Unsupported(_)) => return,
            Err(err) => tracing::debug!(error = %err.for_log(), "cannot read the free disk space"),
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
    }
}
