//! The worker threads. Each owns one model instance, because fastembed's `embed` takes
//! `&mut self`, and all take batches from shared queues, so a batch waits only until some
//! worker that may take it is free and an async caller never runs the model on its own
//! thread.
//!
//! Requests come first. A batch is queued with its [`Priority`]: a request's (a question to
//! recall with, a memory to remember) or the background's (the indexing pipeline working
//! through appended messages). Background workers run at the lowest scheduling priority
//! ([`lower_thread_priority`]), so under load the CPU goes to the server's request threads
//! first and the pipeline takes what is left; they take a queued request's batch before a
//! background one. Request workers run at the process's priority and take only requests'
//! batches, so a request never waits behind the pipeline's backlog or on a starved
//! background thread.
//!
//! A worker runs each batch alone rather than merging queued batches of different requests,
//! as the store's writer merges commits: a forward pass pads every text to the longest of its
//! batch, and on chat messages of mixed length batch 1 is faster per text than batch 32
//! (`cargo xtask bench embed`), so merging would cost throughput and latency.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};

use fastembed::TextEmbedding;

use crate::error::EmbedError;
use crate::model;

/// Called once with the batch's vectors, in the order of its texts.
pub(crate) type Reply = Box<dyn FnOnce(Result<Vec<Vec<f32>>, EmbedError>) + Send>;

/// One batch: embedded in one forward pass.
pub(crate) struct Job {
    pub(crate) texts: Vec<String>,
    pub(crate) reply: Reply,
}

/// Whose batch it is; see the module's documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A request waits for it.
    Request,
    /// The indexing pipeline's; nobody waits for it in particular.
    Background,
}

/// How much nicer than the process a background worker is where `SCHED_IDLE` is refused: at
/// nice 10 a thread gets about a tenth of the CPU a nice-0 thread contending with it gets
/// (Linux's CFS weights).
pub(crate) const BACKGROUND_NICENESS: i32 = 10;

/// The batches waiting for a worker, by priority.
#[derive(Default)]
struct Queues {
    request: VecDeque<Job>,
    background: VecDeque<Job>,
    /// Cleared at shutdown: workers finish what is queued, then stop.
    open: bool,
}

impl Queues {
    /// The next batch a worker of `role` takes: a request's first.
    fn next(&mut self, role: Priority) -> Option<Job> {
        self.request.pop_front().or_else(|| match role {
            Priority::Background => self.background.pop_front(),
            Priority::Request => None,
        })
    }
}

struct Shared {
    queues: Mutex<Queues>,
    /// Signalled when a batch is queued and at shutdown.
    queued: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How many batches wait, by priority.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Requests' batches.
    pub request: usize,
    /// The pipeline's batches.
    pub background: usize,
}

pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    /// Starts one worker per model instance: the first `request_workers` for requests only,
    /// the rest for both, the background's at a lower priority.
    pub(crate) fn spawn(
        models: Vec<TextEmbedding>,
        request_workers: usize,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues {
                open: true,
                ..Queues::default()
            }),
            queued: Condvar::new(),
        });
        let pool = Self {
            shared,
            workers: Mutex::new(Vec::with_capacity(models.len())),
        };
        for (index, model) in models.into_iter().enumerate() {
            // Linux keeps 15 bytes of a thread's name; these fit and tell the roles apart.
            let (role, name) = if index < request_workers {
                (Priority::Request, format!("embed-request-{index}"))
            } else {
                (Priority::Background, format!("embed-backlog-{index}"))
            };
            let shared = Arc::clone(&pool.shared);
            // If a later spawn fails, dropping `pool` on return stops the workers started.
            let worker = thread::Builder::new()
                .name(name)
                .spawn(move || work(model, role, &shared))?;
            pool.workers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(worker);
        }
        Ok(pool)
    }

    /// Queues a batch; after shutdown its reply gets [`EmbedError::ShutDown`] at once.
    pub(crate) fn submit(&self, job: Job, priority: Priority) {
        let rejected = {
            let mut queues = self.shared.lock();
            if queues.open {
                match priority {
                    Priority::Request => queues.request.push_back(job),
                    Priority::Background => queues.background.push_back(job),
                }
                None
            } else {
                Some(job)
            }
        };
        match rejected {
            Some(job) => (job.reply)(Err(EmbedError::ShutDown)),
            // Request workers do not take a background batch, so waking only one worker could
            // wake one that leaves it queued while a background worker sleeps.
            None => self.shared.queued.notify_all(),
        }
    }

    /// How many batches wait, by priority.
    pub(crate) fn depths(&self) -> QueueDepths {
        let queues = self.shared.lock();
        QueueDepths {
            request: queues.request.len(),
            background: queues.background.len(),
        }
    }

    /// Stops taking batches, lets the workers finish the ones already queued, and waits.
    pub(crate) fn shutdown(&self) {
        self.shared.lock().open = false;
        self.shared.queued.notify_all();
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for worker in workers {
            // A worker only ends by the queues closing; a panic inside the model is caught.
            let _ = worker.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn work(mut model: TextEmbedding, role: Priority, shared: &Shared) {
    if role == Priority::Background {
        lower_thread_priority();
    }
    loop {
        let job = {
            let mut queues = shared.lock();
            loop {
                if let Some(job) = queues.next(role) {
                    break job;
                }
                if !queues.open {
                    return;
                }
                queues = shared
                    .queued
                    .wait(queues)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        let result = model::embed_batch(&mut model, &job.texts);
        (job.reply)(result);
        if role == Priority::Background {
            yield_to_requests();
        }
    }
}

/// Hands the core to a request's thread that woke on it, if any, between two pieces of
/// background work. `SCHED_IDLE` alone does not on every kernel: on this project's test
/// machines a woken thread waited out the rest of the background thread's burst, up to a
/// scheduler tick, even with the other core free (docs/benchmarks.md, "Background work and
/// the latency of requests"). Called after each text the backlog embeds and each node a
/// graph builder links, it bounds that wait by one such piece of work; with nobody waiting
/// it costs one system call.
pub fn yield_to_requests() {
    thread::yield_now();
}

/// Gives the calling thread the priority of memlayer's background work (the embedding
/// backlog here, the indexes' graph building), so that the CPU goes to requests first:
/// Linux's `SCHED_IDLE`, under which a thread runs only on a core no other thread wants and
/// yields it as soon as a request's thread wakes. At nice 10, before, the background still
/// took a third of two busy cores and a woken request thread could wait out a background
/// thread's slice: set by hand on a server's background threads, `SCHED_IDLE` served
/// 1.15–1.38× the appends of 64 clients and cut one client's p99 by a quarter to a half
/// (docs/benchmarks.md). Lowering a thread's own policy needs no privilege; where the system
/// refuses anyway, the thread is made [`BACKGROUND_NICENESS`] nicer instead.
pub fn lower_thread_priority() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    let idle = set_thread_priority_and_policy(
        thread_native_id(),
        thread_priority::ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
    );
    if idle.is_ok() {
        return;
    }
    let thread = Some(rustix::thread::gettid());
    if let Ok(nice) = rustix::process::getpriority_process(thread) {
        let _ = rustix::process::setpriority_process(thread, (nice + BACKGROUND_NICENESS).min(19));
    }
}
