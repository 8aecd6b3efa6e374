use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memlayer_store::Access;

use super::{owner, say, until_one_waits_on_a_lock};
use crate::test_cluster;
use crate::{Change, FeedCursor, PgStore};

/// How long a reader waits for changes it expects: transactions of tests running in parallel
/// on the same cluster hold the horizon back while they run.
const PATIENCE: Duration = Duration::from_secs(60);

fn tenant() -> Access {
    Access::tenant_wide("t")
}

/// Reads from `cursor` on until `expected` changes arrived in all (or the patience ran out).
async fn read_until(
    store: &PgStore,
    cursor: &mut FeedCursor,
    delivered: &mut Vec<Change>,
    expected: usize,
) {
    let deadline = Instant::now() + PATIENCE;
    while delivered.len() < expected && Instant::now() < deadline {
        let page = store.feed_since(cursor, 5).await.unwrap();
        if page.changes.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        delivered.extend(page.changes);
        *cursor = page.cursor;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_racing_appends_gets_every_change_exactly_once() {
    const TASKS: usize = 12;
    const APPENDS: usize = 15;
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    let reader_store = Arc::new(db.store().await.unwrap());
    let writing = Arc::new(AtomicBool::new(true));
    // How many changes the reader got so far: halfway, the writers wait for it to have some,
    // so the reader certainly reads while appends commit around it.
    let read_so_far = Arc::new(AtomicUsize::new(0));
    let reader = {
        let store = Arc::clone(&reader_store);
        let writing = Arc::clone(&writing);
        let read_so_far = Arc::clone(&read_so_far);
        tokio::spawn(async move {
            let mut cursor = FeedCursor::start();
            let mut delivered = Vec::new();
            while writing.load(Ordering::SeqCst) {
                let page = store.feed_since(&cursor, 7).await.unwrap();
                delivered.extend(page.changes);
                read_so_far.store(delivered.len(), Ordering::SeqCst);
                cursor = page.cursor;
            }
            (cursor, delivered)
        })
    };
    let writers: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = Arc::clone(&store);
            let read_so_far = Arc::clone(&read_so_far);
            tokio::spawn(async move {
                let mut appended = Vec::new();
                for n in 0..APPENDS {
                    if n == APPENDS / 2 {
                        let deadline = Instant::now() + PATIENCE;
                        while read_so_far.load(Ordering::SeqCst) == 0 {
                            assert!(Instant::now() < deadline, "the reader never got a change");
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                    // Three sessions shared by all tasks, so appends contend and interleave.
                    let session = format!("s{}", (task + n) % 3);
                    let append = memlayer_store::Append {
                        create: Some(owner("alice")),
                        ..say(&format!("{task}/{n}"))
                    };
                    let done = store.append(&tenant(), &session, append).await.unwrap();
                    appended.push(Change {
                        tenant: "t".into(),
                        session_id: session,
                        first_index: done.first_index,
                        count: done.count,
                    });
                }
                appended
            })
        })
        .collect();
    let mut appended = HashSet::new();
    for writer in writers {
        appended.extend(writer.await.unwrap());
    }
    writing.store(false, Ordering::SeqCst);
    let (mut cursor, mut delivered) = reader.await.unwrap();
    read_until(&reader_store, &mut cursor, &mut delivered, appended.len()).await;

    let unique: HashSet<Change> = delivered.iter().cloned().collect();
    assert_eq!(unique.len(), delivered.len(), "nothing delivered twice");
    let missing: Vec<&Change> = appended.difference(&unique).collect();
    let unknown: Vec<&Change> = unique.difference(&appended).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{} of {} appends never delivered: {missing:?}; delivered but never appended: {unknown:?}",
        missing.len(),
        appended.len()
    );
    let after = reader_store.feed_since(&cursor, 100).await.unwrap();
    assert_eq!(after.changes, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_with_a_lower_id_committing_late_is_not_skipped() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    for session in ["slow", "fast"] {
        store
            .create_session(&tenant(), Some(session), owner("alice"))
            .await
            .unwrap();
    }
    // A rolled-back transaction's row is never delivered.
    let mut ghost = db.connect().await.unwrap();
    let txn = ghost.transaction().await.unwrap();
    txn.execute(
        "INSERT INTO feed (tenant, session_id, first_index, count) VALUES ('t', 'ghost', 0, 1)",
        &[],
    )
    .await
    .unwrap();
    txn.rollback().await.unwrap();

    // Hold the row of session "slow", so that an append to it takes its transaction id and
    // then waits, while a later append to "fast" takes a higher id and commits first.
    let mut holder = db.connect().await.unwrap();
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM sessions WHERE session_id = 'slow' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let slow = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.append(&tenant(), "slow", say("late")).await.unwrap() })
    };
    let watcher = db.connect().await.unwrap();
    until_one_waits_on_a_lock(&watcher, "the slow append").await;
    let fast = store.append(&tenant(), "fast", say("early")).await.unwrap();
    let xids = feed_rows(&watcher).await;
    assert_eq!(xids.len(), 1, "only the fast append committed: {xids:?}");

    // The fast append committed, but a transaction older than it is still running: it is
    // held back, or the cursor would pass the slow one's lower id before it commits.
    let mut cursor = FeedCursor::start();
    let page = store.feed_since(&cursor, 100).await.unwrap();
    assert_eq!(
        page.changes,
        [],
        "held back while an older transaction runs"
    );
    cursor = page.cursor;

    hold.commit().await.unwrap();
    let slow = slow.await.unwrap();
    let ids = feed_rows(&watcher).await;
    assert_eq!(
        ids.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(),
        ["slow", "fast"],
        "the slow append has the lower transaction id, though it committed last"
    );

    let mut delivered = Vec::new();
    read_until(&store, &mut cursor, &mut delivered, 2).await;
    let change = |session: &str, first_index, count| Change {
        tenant: "t".into(),
        session_id: session.into(),
        first_index,
        count,
    };
    assert_eq!(
        delivered,
        [
            change("slow", slow.first_index, slow.count),
            change("fast", fast.first_index, fast.count)
        ],
        "in transaction id order, each once, no rolled-back row"
    );
    assert_eq!(store.feed_since(&cursor, 100).await.unwrap().changes, []);
}

#[tokio::test]
async fn pages_resume_where_the_last_one_ended() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    // One transaction writing many rows: pages must split within one transaction id.
    let client = db.connect().await.unwrap();
    client
        .batch_execute(
            "INSERT INTO feed (tenant, session_id, first_index, count)
             SELECT 't', 's' || (n % 4), n, 1 FROM generate_series(0, 22) AS n",
        )
        .await
        .unwrap();
    let mut cursor = FeedCursor::start();
    let mut delivered = Vec::new();
    read_until(&store, &mut cursor, &mut delivered, 23).await;
    let mut indices: Vec<u64> = delivered.iter().map(|c| c.first_index).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..23).collect::<Vec<_>>());
    assert_eq!(store.feed_since(&cursor, 0).await.unwrap().changes, []);
    assert_eq!(store.feed_since(&cursor, 100).await.unwrap().changes, []);
}

/// The feed's rows as (session, transaction id), in transaction id order.
async fn feed_rows(watcher: &tokio_postgres::Client) -> Vec<(String, i64)> {
    watcher
        .query(
            "SELECT session_id, xid::text::bigint FROM feed ORDER BY xid",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}
