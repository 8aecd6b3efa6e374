//! The threads memory partitions are read and indexed on.
//!
//! glibc's malloc gives threads that allocate at the same time arenas of their own (up to
//! eight per core) and keeps what is freed in the arena it came from. Loaded on whichever
//! blocking thread a recall ran on, partitions spread over many arenas, and what an evicted
//! one freed in one arena stayed there while the next load filled another. Loads on a few
//! threads of their own reuse the same arenas, and the request threads keep theirs: after a
//! recall of each of 100 users with a million memories, 2.5 GiB resident against 3.1 GiB
//! before (docs/benchmarks.md, "Vectors held quantized").
//!
//! Even so glibc keeps the pages an evicted partition freed, for the next allocations of the
//! arena; after a load that evicted, a loader thread asks it to give every arena's free pages
//! back ([`Loaders::give_back_freed_memory`]): 200 MiB of a server's 2.1 GiB with a million
//! memories of 100 users (docs/benchmarks.md, "A start at a million messages and memories").

use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use tokio::runtime::Handle;

/// Threads loading partitions: two users' first recalls load side by side, as on the
/// blocking pool before, on this project's two cores.
const THREADS: usize = 2;

type Job = Box<dyn FnOnce() + Send>;

/// Runs partition loads on [`THREADS`] threads of their own, which end when it is dropped.
pub(crate) struct Loaders {
    /// `None` when no thread could be started: loads then run on the caller's thread.
    jobs: Option<Sender<Job>>,
}

impl Loaders {
    pub(crate) fn start() -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        for number in 0..THREADS {
            let queue = Arc::clone(&queue);
            let spawned = thread::Builder::new()
                .name(format!("memlayer-memory-load-{number}"))
                .spawn(move || serve(&queue));
            match spawned {
                Ok(_) => started += 1,
                Err(err) => tracing::warn!(
                    error = %err,
                    "could not start a memory partition loader thread"
                ),
            }
        }
        Self {
            jobs: (started > 0).then_some(jobs),
        }
    }

    /// Runs `work` on a loader thread and waits for it; a panic in it resumes here. The work
    /// runs inside the caller's Tokio runtime, if it has one: a store served by a backend
    /// (PostgreSQL) waits for its answers through the runtime.
    pub(crate) fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> T {
        let Some(jobs) = &self.jobs else {
            return work();
        };
        let runtime = Handle::try_current().ok();
        let (reply, answer) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _inside = runtime.as_ref().map(Handle::enter);
            let _ = reply.send(panic::catch_unwind(AssertUnwindSafe(work)));
        });
        if let Err(mpsc::SendError(job)) = jobs.send(job) {
            // Every loader thread is gone (they only end with `Loaders`): load here.
            job();
        }
        match answer.recv() {
            Ok(Ok(value)) => value,
            Ok(Err(panicked)) => panic::resume_unwind(panicked),
            Err(mpsc::RecvError) => unreachable!("a job always answers before it is dropped"),
        }
    }

    /// Queues a job that asks the allocator to give the pages it holds free back to the
    /// system, without waiting for it: it walks every arena, some milliseconds on a large
    /// heap, which a recall need not wait for.
    pub(crate) fn give_back_freed_memory(&self) {
        match &self.jobs {
            Some(jobs) => {
                let _ = jobs.send(Box::new(trim_allocator));
            }
            None => trim_allocator(),
        }
    }
}

/// Asks glibc's malloc to return the free pages of every arena to the system (glibc 2.8 and
/// later `madvise` free pages inside the heaps too, not only the top). Elsewhere nothing:
/// other allocators return memory on their own or have no such call.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim_allocator() {
    // SAFETY: `malloc_trim` takes no pointer and has no precondition; glibc serialises it
    // with every other allocator call (it is MT-Safe).
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_allocator() {}

/// A loader thread: runs jobs until every sender is gone.
fn serve(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match job {
            Ok(job) => job(),
            Err(mpsc::RecvError) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's resident memory, in KiB.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn resident_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn pages_freed_below_a_live_allocation_are_given_back() {
        let loaders = Loaders::start();
        // 256 MiB in small pieces on a loader thread, then all freed but the last: glibc
        // keeps what lies below a live allocation until asked.
        let kept = loaders.run(|| {
            let mut pieces: Vec<Box<[u8]>> = (0..256 * 1024)
                .map(|_| vec![1u8; 1024].into_boxed_slice())
                .collect();
            let kept = pieces.pop();
            drop(pieces);
            kept
        });
        let before = resident_kib();
        loaders.give_back_freed_memory();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = resident_kib();
            if now + 128 * 1024 < before {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{before} KiB resident before the trim, {now} KiB after"
            );
            thread::sleep(std::time::Duration::from_millis(10));
        }
        drop(kept);
    }

    #[test]
    fn work_runs_on_a_loader_thread_and_panics_come_back() {
        let loaders = Loaders::start();
        let name = loaders.run(|| thread::current().name().map(str::to_owned));
        assert!(name.is_some_and(|name| name.starts_with("memlayer-memory-load-")));
        let panicked = panic::catch_unwind(AssertUnwindSafe(|| {
            loaders.run(|| -> u32 { panic!("a load failed") })
        }));
        assert!(panicked.is_err());
        // The thread that ran the panicking job still serves.
        assert_eq!(loaders.run(|| 2 + 2), 4);
        assert_eq!(loaders.run(|| 3 * 3), 9);
        assert!(
            !loaders.run(|| Handle::try_current().is_ok()),
            "no runtime to enter"
        );
    }

    #[test]
    fn work_runs_inside_the_callers_runtime() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let loaders = Loaders::start();
        let flavor = runtime.block_on(async {
            loaders.run(|| Handle::try_current().map(|handle| handle.runtime_flavor()))
        });
        assert_eq!(
            flavor.ok(),
            Some(tokio::runtime::RuntimeFlavor::MultiThread)
        );
    }
}
