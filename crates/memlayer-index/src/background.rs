//! The loop that keeps HNSW graphs built in the background, shared by message recall
//! ([`crate::Recall`]) and the long-term memory partitions of `memlayer-memory`.

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How often an idle builder asks whether there is a graph to build.
const IDLE_POLL: Duration = Duration::from_secs(1);
/// How long a builder waits after a build that failed: it would fail again at once.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// Until `stop` turns true: asks `wanted` every second for a graph build to run, runs
/// `build` with it on the blocking pool — its second argument says stop once `stop` turns
/// true, for it to ask between chunks — and hands the outcome and the time it took to
/// `report`. A build that panics is logged and tried again after 30 s.
pub async fn run_graph_builder<W, R, B>(
    mut stop: watch::Receiver<bool>,
    wanted: impl Fn() -> Option<W>,
    build: B,
    report: impl Fn(R, Duration),
) where
    W: Send + 'static,
    R: Send + 'static,
    B: Fn(W, &dyn Fn() -> bool) -> R + Clone + Send + 'static,
{
    while !*stop.borrow() {
        let Some(work) = wanted() else {
            pause(&mut stop, IDLE_POLL).await;
            continue;
        };
        let build = build.clone();
        let stopping = stop.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || build(work, &|| *stopping.borrow())).await {
            Ok(outcome) => report(outcome, started.elapsed()),
            Err(err) => {
                tracing::warn!(error = %err, "a graph build failed; retrying in 30 s");
                pause(&mut stop, RETRY_AFTER_FAILURE).await;
            }
        }
    }
}

/// Waits `duration`, or until `stop` changes.
pub(crate) async fn pause(stop: &mut watch::Receiver<bool>, duration: Duration) {
    tokio::select! {
        _ = stop.changed() => {}
        () = tokio::time::sleep(duration) => {}
    }
}
