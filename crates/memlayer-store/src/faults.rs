//! Storage fault injection: the real `Store` (its writer thread, group commit and every table)
//! over a disk that fails its k-th I/O operation or loses power there, for every k over a
//! scripted workload. What survives is reopened through the normal open path (`Store::open`,
//! with redb's integrity check) and compared with the operations model (`fuzzing::Model`):
//! every acknowledged write is there once and in order, a failed group commit is there whole or
//! not at all, deleted and erased data stays gone, and the reopened store takes new writes.
//! The same faults during the creation of a store must not stop the next start.
//! docs/storage-format.md ("Fault injection") says what it proves and what it found.

use std::future::Future;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::fuzzing::{Model, Op, Outcome, execute};
use crate::{CommitMode, Recovery, Store, StoreError, StoreOptions};

/// What the disk does from the k-th I/O operation (`write`, `set_len`, `sync_data`) on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Only that operation fails, as a full disk or a transient device error would.
    Fail,
    /// The power fails: that operation and every later one fail, and only what was synced,
    /// plus any part of what was written since, is on the disk afterwards.
    PowerLoss,
    /// The disk is full: that operation and every later one fail with `ENOSPC` until space
    /// is freed ([`FaultyDisk::free`]).
    Full,
}

/// Which of the writes since the last completed `sync_data` a crash leaves on the disk.
#[derive(Debug, Clone, Copy)]
enum Survivors {
    /// None of them.
    Synced,
    /// All of them (the process died; the operating system wrote its cache out).
    All,
    /// A seeded choice per change: none of it, all of it, or (a write) a coin flip per
    /// 512-byte sector. redb assumes no more of a disk than that single bytes are not torn and
    /// that a write changes no bytes outside its range.
    Torn(u64),
}

const SECTOR: usize = 512;

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug)]
struct DiskState {
    file: FileBackend,
    /// The file as of the last completed `sync_data`: what a power loss cannot take.
    durable: Vec<u8>,
    /// What changed since, in order.
    pending: Vec<Pending>,
    /// I/O operations so far.
    ops: u64,
    fault: Option<(u64, Fault)>,
}

/// A real file (redb's own `FileBackend`) that counts its I/O operations, fails the chosen one
/// and keeps, beside the file, the image a power loss would leave.
#[derive(Debug, Clone)]
struct FaultyDisk {
    state: Arc<Mutex<DiskState>>,
}

impl FaultyDisk {
    fn create(path: &Path, fault: Option<(u64, Fault)>) -> Self {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .unwrap();
        let state = DiskState {
            file: FileBackend::new(file).unwrap(),
            durable: Vec::new(),
            pending: Vec::new(),
            ops: 0,
            fault,
        };
        Self {
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DiskState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Counts one I/O operation and fails it when the fault says so; otherwise runs it.
    fn io(
        &self,
        operation: impl FnOnce(&mut DiskState) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut state = self.lock();
        let op = state.ops;
        state.ops += 1;
        match state.fault {
            Some((k, Fault::Fail)) if op == k => Err(injected()),
            Some((k, Fault::PowerLoss)) if op >= k => Err(injected()),
            Some((k, Fault::Full)) if op >= k => {
                Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
            }
            _ => operation(&mut state),
        }
    }

    /// Makes the next I/O operation the one that meets `fault`.
    fn fault_from_now(&self, fault: Fault) {
        let mut state = self.lock();
        state.fault = Some((state.ops, fault));
    }

    /// Space was freed, or the device came back: no operation fails any more.
    fn free(&self) {
        self.lock().fault = None;
    }

    /// Opens a store on this disk; `Store::recover` probes it with one I/O operation, which
    /// fails as long as the disk's fault lasts, and reopens the store on it.
    fn open_store(&self, path: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        let probed = self.clone();
        Store::open_with_backend(path, self.clone(), move || probed.io(|_| Ok(())), options)
    }

    /// The bytes a crash now leaves on the disk.
    fn crash_image(&self, survivors: Survivors) -> Vec<u8> {
        let state = self.lock();
        let mut image = state.durable.clone();
        let mut random = match survivors {
            Survivors::Synced => return image,
            Survivors::All => None,
            Survivors::Torn(seed) => Some(SplitMix(seed)),
        };
        for pending in &state.pending {
            // Per change: none of it, all of it, or a coin flip per sector.
            match (random.as_mut().map_or(1, |r| r.next() % 3), pending) {
                (0, _) => {}
                (2, Pending::Write { offset, data }) => {
                    for (n, sector) in data.chunks(SECTOR).enumerate() {
                        if random.as_mut().is_some_and(|r| r.next() % 2 == 0) {
                            let sector = Pending::Write {
                                offset: offset + (n * SECTOR) as u64,
                                data: sector.to_vec(),
                            };
                            apply(&mut image, &sector);
                        }
                    }
                }
                _ => apply(&mut image, pending),
            }
        }
        image
    }
}

fn injected() -> std::io::Error {
    std::io::Error::other("injected fault")
}

fn apply(image: &mut Vec<u8>, pending: &Pending) {
    match pending {
        Pending::SetLen(len) => image.resize(usize::try_from(*len).unwrap(), 0),
        Pending::Write { offset, data } => {
            let offset = usize::try_from(*offset).unwrap();
            if image.len() < offset + data.len() {
                image.resize(offset + data.len(), 0);
            }
            image[offset..offset + data.len()].copy_from_slice(data);
        }
    }
}

impl StorageBackend for FaultyDisk {
    fn len(&self) -> std::io::Result<u64> {
        self.lock().file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.lock().file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.io(|state| {
            state.file.set_len(len)?;
            state.pending.push(Pending::SetLen(len));
            Ok(())
        })
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.io(|state| {
            state.file.sync_data()?;
            let pending = std::mem::take(&mut state.pending);
            for change in &pending {
                apply(&mut state.durable, change);
            }
            Ok(())
        })
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.io(|state| {
            state.file.write(offset, data)?;
            state.pending.push(Pending::Write {
                offset,
                data: data.to_vec(),
            });
            Ok(())
        })
    }

    fn close(&self) -> std::io::Result<()> {
        self.lock().file.close()
    }

    // The file's locks are the real ones, so the store holds the file as it does in production.
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.lock().file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.lock().file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.lock().file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.lock().file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.lock().file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.lock().file.query_lock_range(start, end)
    }
}

/// A tiny deterministic generator (SplitMix64) for the store's tests: torn writes here, so a
/// failing k replays, and the mixes of the erasure race in `tests.rs`.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One step of the workload: an operation alone, or several submitted while the writer is
/// busy, so that they share one group commit.
enum Step {
    One(Op),
    Group(Vec<Op>),
}

fn append(session: u8, messages: &[(u8, &str)], key: Option<u8>) -> Op {
    Op::Append {
        session,
        messages: messages
            .iter()
            .map(|(role, content)| (*role, (*content).to_owned()))
            .collect(),
        create: true,
        key,
    }
}

/// Appends to three sessions (batches, idempotency keys), runs, memories, erasures with their
/// compactions, a clear, a delete and a session created again under a deleted id.
fn workload() -> Vec<Step> {
    use Step::{Group, One};
    vec![
        One(append(0, &[(1, "hello"), (2, "hi there")], Some(1))),
        One(append(1, &[(1, "first words of s1")], None)),
        Group(vec![
            append(0, &[(1, "second question")], Some(2)),
            append(1, &[(2, "an answer in s1")], Some(3)),
            Op::Run { session: 0, run: 1 },
            Op::Remember {
                user: 0,
                text: "likes green tea".into(),
                key: None,
            },
        ]),
        One(Op::Remember {
            user: 1,
            text: "works at Acme".into(),
            key: Some(0),
        }),
        One(Op::Remember {
            user: 1,
            text: "works at Globex".into(),
            key: Some(0),
        }),
        One(append(
            2,
            &[(0, "be brief"), (1, "x"), (2, "y"), (3, "tool output")],
            Some(4),
        )),
        One(Op::Erase {
            session: 0,
            index: 1,
        }),
        One(Op::Compact),
        One(Op::Clear { session: 1 }),
        Group(vec![
            append(2, &[(1, "z")], Some(5)),
            Op::Run { session: 2, run: 1 },
            Op::Forget { user: 0, memory: 0 },
            append(0, &[(3, "{\"ok\":true}")], None),
        ]),
        One(Op::Delete { session: 1 }),
        One(Op::Compact),
        One(append(1, &[(1, "a new s1")], Some(1))),
        One(Op::Run { session: 1, run: 1 }),
        One(Op::Erase {
            session: 2,
            index: 0,
        }),
        One(Op::Compact),
    ]
}

/// What one run of the workload did.
#[derive(Default)]
struct Trace {
    /// The model of every acknowledged operation, in acknowledgement order.
    acknowledged: Model,
    /// The operations of the first step that failed, with their errors. Those whose commit
    /// failed (any error but `WritesRefused` and redb's `PreviousIo`, which refuse a
    /// transaction before it begins) may be in the store, all of them or none.
    failed: Vec<(Op, StoreError)>,
    /// Texts erased (a message or memory erased, a session deleted) before an acknowledged
    /// compaction: no byte image of the file may hold them any more.
    gone: Vec<String>,
}

impl Trace {
    /// The failed operations that may have reached the store: one group commit.
    fn failed_group(&self) -> impl Iterator<Item = &Op> {
        self.failed
            .iter()
            .filter(|(_, err)| !refused_before_it_began(err))
            .map(|(op, _)| op)
    }
}

fn refused_before_it_began(err: &StoreError) -> bool {
    match err {
        StoreError::WritesRefused { .. } => true,
        StoreError::Storage(err) => matches!(**err, redb::Error::PreviousIo),
        _ => false,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Runs the workload until its first failure (`PowerLoss`: the machine is gone) or to the end
/// (`Fail`: the process carries on), checking every answer against the model: before the
/// failure each one is what the model predicts, from it on each one is a storage error.
fn run_workload(store: &Store, rt: &tokio::runtime::Runtime, fault: Option<Fault>) -> Trace {
    let mut acknowledged = Model::default();
    let mut failed = Vec::new();
    let mut broken = false;
    let (mut erased, mut gone) = (Vec::new(), Vec::new());
    for step in workload() {
        let results = match step {
            Step::One(op) => {
                let result = rt.block_on(execute(store, &op));
                vec![(op, result)]
            }
            Step::Group(ops) => {
                let results = rt.block_on(group_commit(store, &ops));
                ops.into_iter().zip(results).collect()
            }
        };
        let first_failure = !broken;
        for (op, result) in results {
            match result {
                Ok(outcome) if !broken => {
                    let before = acknowledged.texts();
                    assert_eq!(outcome, acknowledged.apply(&op), "{op:?}");
                    erased.extend(before.difference(&acknowledged.texts()).cloned());
                    if matches!(op, Op::Compact) {
                        gone.append(&mut erased);
                    }
                }
                Ok(outcome) => panic!("{op:?} answered {outcome:?} after a write failed"),
                Err(err @ (StoreError::Storage(_) | StoreError::WritesRefused { .. })) => {
                    broken = true;
                    if first_failure {
                        failed.push((op, err));
                    }
                }
                Err(err) => panic!("{op:?} failed with {err:?}, not a storage error"),
            }
        }
        if broken && fault == Some(Fault::PowerLoss) {
            break;
        }
    }
    if fault.is_none() {
        assert!(failed.is_empty(), "no fault, yet {failed:?}");
    }
    // A store that refuses every write must not report itself ready.
    match store.check_ready() {
        Ok(()) => assert!(!broken, "ready after {failed:?}"),
        Err(err) => assert!(
            broken && matches!(err, StoreError::WritesRefused { .. }),
            "not ready ({err}) after {failed:?}"
        ),
    }
    Trace {
        acknowledged,
        failed,
        gone,
    }
}

/// Submits `ops` while the writer thread is busy with another job, so that all of them wait
/// in its queue and it commits them as one group.
async fn group_commit(store: &Store, ops: &[Op]) -> Vec<Result<Outcome, StoreError>> {
    let (started, running) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let busy = started_future(store.write(move |_txn| {
        let _ = started.send(());
        let _ = released.recv();
        Ok(())
    }));
    // The job runs on the writer thread; if the store refuses writes it is dropped unrun and
    // this returns at once.
    let _ = running.recv();
    let queued: Vec<_> = ops
        .iter()
        .map(|op| started_future(execute(store, op)))
        .collect();
    drop(release);
    let _ = busy.finish().await;
    let mut results = Vec::new();
    for future in queued {
        results.push(future.finish().await);
    }
    results
}

/// A future polled once, so that a write is queued at once and awaited later.
enum Started<F: Future> {
    Pending(Pin<Box<F>>),
    Ready(F::Output),
}

fn started_future<F: Future>(future: F) -> Started<F> {
    let mut future = Box::pin(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Pending => Started::Pending(future),
        Poll::Ready(output) => Started::Ready(output),
    }
}

impl<F: Future> Started<F> {
    async fn finish(self) -> F::Output {
        match self {
            Self::Pending(future) => future.await,
            Self::Ready(output) => output,
        }
    }
}

/// Opens the file left at `path` the normal way and checks it against the trace (see
/// [`check_recovered`]).
fn check_reopened(path: &Path, trace: &Trace, rt: &tokio::runtime::Runtime, what: &str) {
    let store =
        Store::open(path).unwrap_or_else(|err| panic!("{what}: reopening failed with {err}"));
    check_recovered(&store, trace, rt, what);
    store.shutdown();
}

/// Checks a store that was reopened after the faults of `trace` against it: it holds the
/// acknowledged state, or that plus the failed group; then retries the failed operations (the
/// keyed appends must apply once) and adds a write.
fn check_recovered(store: &Store, trace: &Trace, rt: &tokio::runtime::Runtime, what: &str) {
    let mut with_group = trace.acknowledged.clone();
    for op in trace.failed_group() {
        with_group.apply(op);
    }
    let mut model = match trace.acknowledged.check(store) {
        Ok(()) => trace.acknowledged.clone(),
        Err(without) => match with_group.check(store) {
            Ok(()) => with_group,
            Err(with) => panic!(
                "{what}: the store holds neither the acknowledged writes ({without}) nor those \
                 plus the failed group ({with}); failed: {:?}",
                trace.failed
            ),
        },
    };
    let retries = trace.failed.iter().map(|(op, _)| op.clone());
    for op in retries.chain([append(0, &[(1, "after the crash")], None)]) {
        let result = rt.block_on(execute(store, &op));
        let outcome = result.unwrap_or_else(|err| panic!("{what}: {op:?} after reopening: {err}"));
        assert_eq!(outcome, model.apply(&op), "{what}: {op:?} after reopening");
    }
    if let Err(difference) = model.check(store) {
        panic!("{what}: after the retries: {difference}");
    }
}

pub(crate) fn temp_dir() -> tempfile::TempDir {
    // fsync costs nothing in memory, and the sweep syncs thousands of times.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .unwrap()
}

/// I/O operations of a fault-free run: up to the end of creating the store, and in all.
struct Counts {
    created: u64,
    total: u64,
}

/// Runs the whole workload once on a fault-free disk: the reference for the sweep, and the
/// I/O operations to sweep over.
fn fault_free_run(dir: &Path, commit: CommitMode, rt: &tokio::runtime::Runtime) -> Counts {
    let path = dir.join(format!("reference-{commit:?}.redb"));
    let disk = FaultyDisk::create(&path, None);
    let options = StoreOptions::default().with_commit(commit);
    let store = disk.open_store(&path, options).unwrap();
    let created = disk.ops();
    let trace = run_workload(&store, rt, None);
    trace.acknowledged.check(&store).unwrap();
    let total = disk.ops();
    store.shutdown();
    drop(store);
    let mut gone = trace.gone.clone();
    gone.sort();
    let erased = [
        "an answer in s1",
        "be brief",
        "first words of s1",
        "hi there",
        "likes green tea",
    ];
    assert_eq!(gone, erased, "the workload erases and compacts these");
    assert_gone(&std::fs::read(&path).unwrap(), &trace, "fault-free run");
    check_reopened(&path, &trace, rt, "fault-free run");
    Counts { created, total }
}

/// Runs the workload with `fault` at I/O operation `k`, from the creation of the store on. A
/// fault that stops the creation itself leaves nothing acknowledged.
fn run_with_fault(
    path: &Path,
    k: u64,
    fault: Fault,
    commit: CommitMode,
    rt: &tokio::runtime::Runtime,
) -> (Trace, FaultyDisk) {
    let disk = FaultyDisk::create(path, Some((k, fault)));
    let options = StoreOptions::default().with_commit(commit);
    let trace = match disk.open_store(path, options) {
        Ok(store) => {
            let trace = run_workload(&store, rt, Some(fault));
            store.shutdown();
            trace
        }
        Err(StoreError::Storage(_)) => Trace::default(),
        Err(err) => panic!("k={k}: opening failed with {err:?}, not a storage error"),
    };
    (trace, disk)
}

/// Set to `full` to fail every I/O operation of the workload and check every crash image;
/// the default checks every third one (one image each), which keeps `cargo test` to seconds.
const SWEEP_VARIABLE: &str = "MEMLAYER_FAULT_SWEEP";

fn full_sweep() -> bool {
    std::env::var(SWEEP_VARIABLE).is_ok_and(|value| value == "full")
}

/// The commit modes to sweep: the server's, or every mode in the full sweep.
fn commit_modes() -> Vec<CommitMode> {
    if full_sweep() {
        vec![
            CommitMode::QuickRepair,
            CommitMode::TwoPhase,
            CommitMode::SinglePhase,
        ]
    } else {
        vec![CommitMode::default()]
    }
}

/// The operations to fail: every one, or every third (the I/O operations of a commit vary in
/// number, so every third still lands on every kind of operation of some commit).
fn sweep(counts: &Counts) -> impl Iterator<Item = u64> {
    let step = if full_sweep() { 1 } else { 3 };
    (counts.created..counts.total).step_by(step)
}

/// Fails if the file's bytes still hold a text whose erasure was followed by an acknowledged
/// compaction (redb does not zero freed pages; compaction is what removes them).
fn assert_gone(image: &[u8], trace: &Trace, what: &str) {
    for text in &trace.gone {
        let found = image
            .windows(text.len())
            .any(|window| window == text.as_bytes());
        assert!(!found, "{what}: erased {text:?} is still in the file");
    }
}

/// The key file beside the store file at `path`.
fn key_file(path: &Path) -> PathBuf {
    crate::store::sibling(path, crate::store::KEY_FILE_SUFFIX)
}

/// Removes the store file at `path` and its key file, if the store got as far as one.
fn remove_store(path: &Path) {
    std::fs::remove_file(path).unwrap();
    if let Err(err) = std::fs::remove_file(key_file(path)) {
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    }
}

/// Writes `image` to a fresh file and returns its path.
fn image_file(dir: &Path, name: &str, image: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, image).unwrap();
    path
}

#[test]
fn every_io_failure_leaves_acknowledged_writes_and_whole_groups() {
    let dir = temp_dir();
    let rt = runtime();
    for commit in commit_modes() {
        let counts = fault_free_run(dir.path(), commit, &rt);
        let mut failed_groups = 0;
        for k in sweep(&counts) {
            let path = dir.path().join(format!("fail-{k}.redb"));
            let (trace, disk) = run_with_fault(&path, k, Fault::Fail, commit, &rt);
            let what = format!("k={k} ({commit:?}, I/O error)");
            assert_gone(&std::fs::read(&path).unwrap(), &trace, &what);
            if trace.failed_group().count() > 1 {
                failed_groups += 1;
            }
            drop(disk);
            check_reopened(&path, &trace, &rt, &what);
            remove_store(&path);
        }
        assert!(failed_groups > 0, "{commit:?}: no fault hit a group commit");
    }
}

#[test]
fn every_power_loss_keeps_what_was_acknowledged() {
    let dir = temp_dir();
    let rt = runtime();
    for commit in commit_modes() {
        let counts = fault_free_run(dir.path(), commit, &rt);
        for k in sweep(&counts) {
            let path = dir.path().join(format!("live-{k}.redb"));
            let (trace, disk) = run_with_fault(&path, k, Fault::PowerLoss, commit, &rt);
            let images = [
                ("synced", Survivors::Synced),
                ("all", Survivors::All),
                ("torn", Survivors::Torn(k)),
            ];
            // The default sweep takes turns; the full one checks each image.
            let turn = usize::try_from(k / 3 % 3).unwrap();
            let images = if full_sweep() {
                &images[..]
            } else {
                &images[turn..=turn]
            };
            for &(name, survivors) in images {
                let image = disk.crash_image(survivors);
                let what = format!("k={k} ({commit:?}, {name} after power loss)");
                assert_gone(&image, &trace, &what);
                let crashed = image_file(dir.path(), &format!("crash-{k}-{name}.redb"), &image);
                // The key file is a real file, each key synced before a commit names it.
                std::fs::copy(key_file(&path), key_file(&crashed)).unwrap();
                check_reopened(&crashed, &trace, &rt, &what);
                remove_store(&crashed);
            }
            drop(disk);
            remove_store(&path);
        }
    }
}

/// What an interrupted creation leaves: the file redb had begun, under the temporary name
/// `Store::open` builds a new store under. Whatever it holds, the next start must remove it
/// and create the store afresh (the fault-free run's `created` operations build a store).
#[test]
fn an_interrupted_creation_never_stops_the_next_start() {
    let dir = temp_dir();
    let rt = runtime();
    let counts = fault_free_run(dir.path(), CommitMode::default(), &rt);
    for k in 0..counts.created {
        for fault in [Fault::Fail, Fault::PowerLoss] {
            let begun = dir.path().join(format!("begun-{k}.redb"));
            let (_, disk) = run_with_fault(&begun, k, fault, CommitMode::default(), &rt);
            let images = [
                ("synced", disk.crash_image(Survivors::Synced)),
                ("all", disk.crash_image(Survivors::All)),
                ("torn", disk.crash_image(Survivors::Torn(k))),
            ];
            drop(disk);
            remove_store(&begun);
            for (name, image) in images {
                let what = format!("k={k} ({fault:?}, {name})");
                let data = tempfile::tempdir_in(dir.path()).unwrap();
                let path = data.path().join("memlayer.redb");
                image_file(data.path(), "memlayer.redb.new", &image);
                check_reopened(&path, &Trace::default(), &rt, &what);
                let mut names: Vec<_> = std::fs::read_dir(data.path())
                    .unwrap()
                    .map(|entry| entry.unwrap().file_name())
                    .collect();
                names.sort();
                // The store, the stamp its clean close left and its key file.
                assert_eq!(
                    names,
                    [
                        "memlayer.redb",
                        "memlayer.redb.closed",
                        "memlayer.redb.keys"
                    ],
                    "{what}"
                );
            }
        }
    }
}

/// A crash after the new store was linked into place but before its temporary name was
/// removed leaves two names of one file: the next start keeps the store and drops the name.
#[test]
fn a_leftover_temporary_name_of_a_created_store_is_dropped() {
    let dir = temp_dir();
    let rt = runtime();
    let path = dir.path().join("memlayer.redb");
    let mut model = Model::default();
    let store = Store::open(&path).unwrap();
    let op = append(0, &[(1, "kept")], Some(1));
    assert_eq!(rt.block_on(execute(&store, &op)).unwrap(), model.apply(&op));
    store.shutdown();
    drop(store);
    std::fs::hard_link(&path, dir.path().join("memlayer.redb.new")).unwrap();
    let store = Store::open(&path).unwrap();
    model.check(&store).unwrap();
    assert!(!dir.path().join("memlayer.redb.new").exists());
}

/// A full disk is told from a failing one: the write that met the fault, every write refused
/// after it and the readiness probe all say which it was, while reads go on serving what was
/// acknowledged.
/// A store on a disk that `fault` can be turned on for, holding one acknowledged append
/// (`model` says what it holds): where the disk-fault tests start.
fn store_with_one_append(
    dir: &Path,
    fault: Fault,
    rt: &tokio::runtime::Runtime,
) -> (PathBuf, FaultyDisk, Store, Model) {
    let path = dir.join(format!("{fault:?}.redb"));
    let disk = FaultyDisk::create(&path, None);
    let store = disk.open_store(&path, StoreOptions::default()).unwrap();
    let mut model = Model::default();
    let kept = append(0, &[(1, "kept")], Some(1));
    assert_eq!(
        rt.block_on(execute(&store, &kept)).unwrap(),
        model.apply(&kept)
    );
    (path, disk, store, model)
}

#[test]
fn a_full_disk_is_told_from_a_failing_one_and_reads_go_on() {
    use crate::DiskFault;
    let dir = temp_dir();
    let rt = runtime();
    for (fault, expected) in [
        (Fault::Full, DiskFault::Full),
        (Fault::Fail, DiskFault::Failed),
    ] {
        let (_, disk, store, model) = store_with_one_append(dir.path(), fault, &rt);
        disk.fault_from_now(fault);
        let met = rt
            .block_on(execute(
                &store,
                &append(0, &[(1, "met the fault")], Some(2)),
            ))
            .unwrap_err();
        assert_eq!(met.disk_fault(), Some(expected), "{met:?}");
        let refused = rt
            .block_on(execute(&store, &append(1, &[(1, "refused")], None)))
            .unwrap_err();
        assert!(
            matches!(refused, StoreError::WritesRefused { .. }),
            "{refused:?}"
        );
        assert_eq!(refused.disk_fault(), Some(expected));
        // Logged with its cause, which says what the disk did.
        assert!(refused.for_log().contains(&met.for_log()), "{refused:?}");
        let unready = store.check_ready().unwrap_err();
        assert_eq!(unready.disk_fault(), Some(expected), "{unready:?}");
        assert_eq!(
            store.eraser().compact().unwrap_err().disk_fault(),
            Some(expected)
        );
        // The failed append either committed whole or not at all; either way, what was
        // acknowledged reads back.
        let mut with_met = model.clone();
        with_met.apply(&append(0, &[(1, "met the fault")], Some(2)));
        assert!(model.check(&store).is_ok() || with_met.check(&store).is_ok());
        store.shutdown();
    }
}

/// After a full or failing disk made the store refuse writes, `recover` waits while the disk
/// still refuses and reopens the store in the same process once it takes writes again:
/// writes resume, what was acknowledged is there once, a retried keyed append applies once.
#[test]
fn the_store_reopens_by_itself_once_the_disk_takes_writes_again() {
    let dir = temp_dir();
    let rt = runtime();
    for fault in [Fault::Full, Fault::PowerLoss] {
        let (path, disk, store, mut model) = store_with_one_append(dir.path(), fault, &rt);
        disk.fault_from_now(fault);
        let met = append(0, &[(1, "met the fault")], Some(2));
        rt.block_on(execute(&store, &met)).unwrap_err();
        assert!(store.refusals().borrow().is_some());
        // Still full or failing: nothing is reopened, reads go on.
        assert!(matches!(store.recover().unwrap(), Recovery::Waiting(_)));
        assert!(store.check_ready().is_err());
        let mut with_met = model.clone();
        with_met.apply(&met);
        assert!(model.check(&store).is_ok() || with_met.check(&store).is_ok());

        disk.free();
        assert!(matches!(store.recover().unwrap(), Recovery::Writable));
        store.check_ready().unwrap();
        assert!(
            matches!(started_future(store.writable()), Started::Ready(())),
            "writable at once after the reopening"
        );
        for op in [met, append(1, &[(1, "after the reopening")], None)] {
            let outcome = rt.block_on(execute(&store, &op)).unwrap();
            assert_eq!(outcome, model.apply(&op), "{fault:?}: {op:?}");
        }
        model.check(&store).unwrap();
        store.shutdown();
        drop(store);
        drop(disk);
        let reopened = Store::open(&path).unwrap();
        model.check(&reopened).unwrap();
    }
}

/// The sweep of `every_io_failure_leaves_acknowledged_writes_and_whole_groups`, recovered
/// from in the same process: at every third I/O operation of the workload (appends, group
/// commits, erasures, compactions) the disk fills up (and stays full until space is freed)
/// or fails once; then `recover` reopens the store, which holds the acknowledged writes or
/// those plus the failed group, applies the retried writes once and keeps erased text out
/// of the file.
#[test]
fn every_full_or_failing_disk_is_recovered_from_without_a_restart() {
    let dir = temp_dir();
    let rt = runtime();
    let counts = fault_free_run(dir.path(), CommitMode::default(), &rt);
    let mut refused = 0;
    for k in sweep(&counts) {
        for fault in [Fault::Full, Fault::Fail] {
            let path = dir.path().join(format!("recover-{k}-{fault:?}.redb"));
            let disk = FaultyDisk::create(&path, Some((k, fault)));
            let store = disk.open_store(&path, StoreOptions::default()).unwrap();
            let trace = run_workload(&store, &rt, Some(fault));
            let what = format!("k={k} ({fault:?}, recovered in process)");
            refused += usize::from(store.refusals().borrow().is_some());
            disk.free();
            match store.recover() {
                Ok(Recovery::Writable) => {}
                other => panic!("{what}: recover answered {other:?}"),
            }
            assert_gone(&std::fs::read(&path).unwrap(), &trace, &what);
            check_recovered(&store, &trace, &rt, &what);
            store.shutdown();
            drop(store);
            drop(disk);
            remove_store(&path);
        }
    }
    assert!(refused > 0, "no fault made the store refuse writes");
}

/// A disk probe a crash interrupted leaves its file beside the store; the next open removes
/// it, so no probe's megabyte lingers in the data directory.
#[test]
fn a_leftover_probe_file_is_removed_at_open() {
    let dir = temp_dir();
    let path = dir.path().join("memlayer.redb");
    Store::open(&path).unwrap().shutdown();
    let probe = dir.path().join("memlayer.redb.probe");
    std::fs::write(&probe, [0; 4096]).unwrap();
    Store::open(&path).unwrap().shutdown();
    assert!(!probe.exists());
}

/// A reopening never closes the database under an open read, since the reopened database
/// would not know of its snapshot and could reuse the pages it reads: it waits for open reads
/// to end, and when one stays open, answers `Waiting` to be tried again.
#[test]
fn a_reopening_waits_for_open_reads_to_end() {
    let dir = temp_dir();
    let rt = runtime();
    let path = dir.path().join("reads.redb");
    let disk = FaultyDisk::create(&path, None);
    let store = disk.open_store(&path, StoreOptions::default()).unwrap();
    let kept = append(0, &[(1, "kept")], Some(1));
    rt.block_on(execute(&store, &kept)).unwrap();
    disk.fault_from_now(Fault::Full);
    rt.block_on(execute(&store, &append(0, &[(1, "x")], None)))
        .unwrap_err();
    disk.free();

    let read = store.begin_read().unwrap();
    assert!(matches!(
        store.recover().unwrap(),
        Recovery::Waiting(StoreError::Busy(_))
    ));
    assert!(store.check_ready().is_err());
    // A read that ends while the reopening waits lets it through.
    let ending = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(read);
    });
    assert!(matches!(store.recover().unwrap(), Recovery::Writable));
    ending.join().unwrap();
    store.check_ready().unwrap();
}
