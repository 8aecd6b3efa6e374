//! The worker threads. Each owns one model instance, because fastembed's `embed` takes
//! `&mut self`, and all take batches from one shared queue, so a batch waits only until some
//! worker is free and an async caller never runs the model on its own thread.
//!
//! A worker runs each batch alone rather than merging queued batches of different requests,
//! as the store's writer merges commits: a forward pass pads every text to the longest of its
//! batch, and on chat messages of mixed length batch 1 is faster per text than batch 32
//! (`cargo xtask bench embed`), so merging would cost throughput and latency.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
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

pub(crate) struct Pool {
    /// `None` once shut down.
    queue: Mutex<Option<Sender<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    /// Starts one worker per model instance.
    pub(crate) fn spawn(models: Vec<TextEmbedding>) -> std::io::Result<Self> {
        let (queue, jobs) = mpsc::channel();
        let jobs = Arc::new(Mutex::new(jobs));
        let mut workers = Vec::with_capacity(models.len());
        for (index, model) in models.into_iter().enumerate() {
            let jobs = Arc::clone(&jobs);
            // If a later spawn fails, dropping `queue` on return stops the workers started.
            let worker = thread::Builder::new()
                .name(format!("memlayer-embed-{index}"))
                .spawn(move || work(model, &jobs))?;
            workers.push(worker);
        }
        Ok(Self {
            queue: Mutex::new(Some(queue)),
            workers: Mutex::new(workers),
        })
    }

    /// Queues a batch; after shutdown its reply gets [`EmbedError::ShutDown`] at once.
    pub(crate) fn submit(&self, job: Job) {
        let rejected = {
            let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.as_ref() {
                Some(queue) => queue.send(job).err().map(|error| error.0),
                None => Some(job),
            }
        };
        if let Some(job) = rejected {
            (job.reply)(Err(EmbedError::ShutDown));
        }
    }

    /// Stops taking batches, lets the workers finish the ones already queued, and waits.
    pub(crate) fn shutdown(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for worker in workers {
            // A worker only ends by its queue closing; a panic inside the model is caught.
            let _ = worker.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn work(mut model: TextEmbedding, jobs: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting: one idle worker waits on the queue, the others
        // wait for the lock, and none holds it while it computes.
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else {
            return;
        };
        let result = model::embed_batch(&mut model, &job.texts);
        (job.reply)(result);
    }
}
