//! The embedder: options, loading, and the path of a request — cache lookups in the caller's
//! namespace, grouping the texts the cache lacks into batches of similar length, handing the
//! batches to the worker pool, and putting the vectors back in the caller's order.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, mpsc};

use tokio::sync::oneshot;

use crate::assets::Assets;
use crate::cache::{self, Cache, CacheStats, Key, Namespace};
use crate::error::EmbedError;
use crate::model::{self, ModelIdentity};
use crate::pool::{Job, Pool, Priority, QueueDepths};
use crate::runtime;

/// How an [`Embedder`] runs the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderOptions {
    /// Worker threads, each with its own instance of the model (measured: about 150 MB of
    /// memory each); batches run in parallel across workers, and a request larger than one
    /// batch is split among them.
    ///
    /// The default is one worker per core, at most 2, each with one ONNX Runtime thread.
    /// Measured on 2 cores with 1,000 chat messages of 5–40 words (`cargo xtask bench
    /// embed`): single-text requests arriving concurrently, the server's usual load,
    /// ran at 255 texts/s on 2 workers × 1 thread against 197 on 1 worker × 2 threads (210
    /// against 143 on a busier machine), because two threads share one short forward pass
    /// poorly. A lone request of 32 texts, split between the two workers, ran at 191 against
    /// 172 texts/s, though on the busier machine 1 × 2 won that case (145 against 98).
    pub workers: usize,
    /// ONNX Runtime's intra-op threads per worker; `workers × intra_threads` should not
    /// exceed the cores given to embedding. The default is 1.
    pub intra_threads: usize,
    /// Workers beside [`EmbedderOptions::workers`] that embed only for requests (a recall's
    /// question, a memory to remember) at the process's scheduling priority, while the
    /// `workers` run the indexing pipeline's batches at a lower one and take a request's
    /// only when one waits (see [`Priority`]). Each is one more model instance. The default
    /// is 1: a question is embedded at once however long the pipeline's backlog is; 0 leaves
    /// requests to the `workers`, ahead of the backlog but at their lower priority.
    pub request_workers: usize,
    /// Most texts per forward pass. The default is 1, for two reasons. The model quantizes
    /// its activations per forward pass (dynamic int8 quantization), so in a batch a
    /// text's vector depends on the texts beside it (by up to 0.056 in one component): one
    /// text at a time, a text always gets the same vector, as the content-hash cache
    /// assumes. And every text of a batch is padded to the longest one, so on chat-length
    /// texts batches are slower per text anyway (one thread, the int8 export used before:
    /// about 125 texts/s at batch 1, 90 at 32, 70 at 256).
    pub max_batch: usize,
    /// Most vectors kept in the content-hash cache, all namespaces together; 0 disables it.
    /// The default, 10,000, takes about 16 MB with 384-dimension vectors.
    pub cache_capacity: usize,
    /// Tokens per text; longer texts are truncated. The default, 256, is sentence-transformers'
    /// setting for all-MiniLM-L6-v2, so vectors match what users of that library get; the
    /// model accepts up to 512.
    pub max_length: usize,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(1, |cores| cores.get().min(2)),
            intra_threads: 1,
            request_workers: 1,
            max_batch: 1,
            cache_capacity: 10_000,
            max_length: 256,
        }
    }
}

impl EmbedderOptions {
    fn validate(&self) -> Result<(), EmbedError> {
        let positive = [
            ("workers", self.workers),
            ("intra_threads", self.intra_threads),
            ("max_batch", self.max_batch),
            ("max_length", self.max_length),
        ];
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((option, _)) => Err(EmbedError::InvalidOptions {
                option,
                reason: "must be at least 1",
            }),
            None => Ok(()),
        }
    }
}

/// Turns texts into L2-normalised vectors with a local ONNX model.
///
/// Every call names a namespace, the tenant whose texts they are: the cache serves a vector
/// only to the namespace that had it embedded, so how fast a call answers tells a tenant
/// nothing about what another embedded.
///
/// Cloning is cheap and clones share the workers and the cache. The workers stop when the
/// last clone is dropped, or at [`Embedder::shutdown`].
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

struct Inner {
    identity: ModelIdentity,
    max_batch: usize,
    workers: usize,
    request_workers: usize,
    cache: Cache,
    pool: Pool,
}

impl Embedder {
    /// Loads ONNX Runtime (once per process) and the model, one instance per worker.
    ///
    /// Every failure is an error, never a panic: a missing file is
    /// [`EmbedError::MissingAsset`], a library that does not load is
    /// [`EmbedError::RuntimeLoad`], a model that does not load is [`EmbedError::ModelLoad`].
    /// A process loads one ONNX Runtime library; opening another embedder with a different
    /// `runtime_library` fails with [`EmbedError::RuntimeLoad`].
    pub fn open(assets: &Assets, options: EmbedderOptions) -> Result<Self, EmbedError> {
        options.validate()?;
        assets.check()?;
        let environment = runtime::environment(&assets.runtime_library)?;
        let files = model::read(&assets.model_dir)?;
        let mut models = (0..options.request_workers + options.workers)
            .map(|_| {
                model::instantiate(
                    &files,
                    &assets.model_dir,
                    &environment,
                    options.max_length,
                    options.intra_threads,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let load_error = |reason: String| EmbedError::ModelLoad {
            path: assets.model_dir.clone(),
            reason,
        };
        // The dimension is whatever the model outputs; a model that cannot embed one short
        // text did not load.
        let probe = model::embed_batch(&mut models[0], &["dimension probe".to_owned()])
            .map_err(|err| load_error(err.to_string()))?;
        let dimension = probe.first().map_or(0, Vec::len);
        let pool = Pool::spawn(models, options.request_workers)
            .map_err(|err| load_error(format!("could not start a worker thread: {err}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                identity: ModelIdentity {
                    name: files.name,
                    sha256: files.sha256,
                    dimension,
                },
                max_batch: options.max_batch,
                workers: options.workers,
                request_workers: options.request_workers,
                cache: Cache::new(options.cache_capacity),
                pool,
            }),
        })
    }

    /// The model every vector of this embedder comes from.
    pub fn identity(&self) -> &ModelIdentity {
        &self.inner.identity
    }

    /// Forgets every vector cached for `namespace`. Erasure calls it with the erasing tenant:
    /// the cache is keyed by the hash of the text, and a vector of erased text must not
    /// outlive the text. Other tenants' entries stay: their texts were not erased, and
    /// emptying their caches would let them notice by their own slower answers that another
    /// tenant erased something.
    pub fn clear_cache(&self, namespace: &str) {
        self.inner.cache.clear(Namespace::new(namespace));
    }

    /// How many batches wait for a worker, by priority: the background's is the pipeline's
    /// backpressure.
    pub fn queue_depths(&self) -> QueueDepths {
        self.inner.pool.depths()
    }

    /// The cache's hit and miss counts (of every namespace) and size.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.cache.stats()
    }

    /// Embeds `texts` of `namespace` on the workers and waits on the calling thread; one
    /// vector per text, in order. Use [`Embedder::embed`] from async code.
    pub fn embed_blocking(
        &self,
        namespace: &str,
        texts: &[&str],
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = Request::new(&self.inner.cache, Namespace::new(namespace), texts);
        let batches = request.take_batches(
            self.inner
                .batch_size(request.misses.len(), Priority::Request),
        );
        let count = batches.len();
        let (sender, replies) = mpsc::channel();
        for (index, texts) in batches.into_iter().enumerate() {
            let sender = sender.clone();
            let reply = Box::new(move |result| {
                // The receiver lives until every reply has come or one failed; a failed
                // request no longer needs the others.
                let _ = sender.send((index, result));
            });
            self.inner
                .pool
                .submit(Job { texts, reply }, Priority::Request);
        }
        // With every sender owned by a reply, a worker that died without replying ends the
        // wait below instead of blocking it forever.
        drop(sender);
        let mut results: Vec<Option<Vec<Vec<f32>>>> = vec![None; count];
        for _ in 0..count {
            let (index, result) = replies.recv().map_err(|_| EmbedError::ShutDown)?;
            results[index] = Some(result?);
        }
        request.finish(&self.inner.cache, results.into_iter().flatten())
    }

    /// Embeds `texts` of `namespace` (the tenant whose texts they are; see [`Embedder`]) for
    /// a request waiting on them, ahead of the pipeline's backlog; one vector per text, in
    /// order. The model never runs on the caller's thread, so this never blocks the async
    /// runtime. Dropping the future before it completes does not stop batches already
    /// queued.
    pub async fn embed(
        &self,
        namespace: &str,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_as(Priority::Request, namespace, texts).await
    }

    /// [`Embedder::embed`] for the indexing pipeline: after every waiting request's batches,
    /// on the workers of lower scheduling priority.
    pub async fn embed_in_background(
        &self,
        namespace: &str,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_as(Priority::Background, namespace, texts).await
    }

    async fn embed_as(
        &self,
        priority: Priority,
        namespace: &str,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut request = Request::new(&self.inner.cache, Namespace::new(namespace), &texts);
        let batch_size = self.inner.batch_size(request.misses.len(), priority);
        let replies: Vec<_> = request
            .take_batches(batch_size)
            .into_iter()
            .map(|texts| {
                let (sender, reply) = oneshot::channel();
                let respond = Box::new(move |result| {
                    // The caller may have stopped waiting; nobody needs the vectors then.
                    let _ = sender.send(result);
                });
                self.inner.pool.submit(
                    Job {
                        texts,
                        reply: respond,
                    },
                    priority,
                );
                reply
            })
            .collect();
        let mut results = Vec::with_capacity(replies.len());
        for reply in replies {
            results.push(reply.await.map_err(|_| EmbedError::ShutDown)??);
        }
        request.finish(&self.inner.cache, results)
    }

    /// Stops the workers after the batches already queued; later calls fail with
    /// [`EmbedError::ShutDown`]. Blocks until the workers have finished, which takes at
    /// most the queued batches' time. Shuts down every clone.
    pub fn shutdown(&self) {
        self.inner.pool.shutdown();
    }
}

impl Inner {
    /// Texts per batch for a call that misses `texts` texts in the cache: at most
    /// `max_batch`, and few enough that every worker that may take them gets a share, so a
    /// large call uses every such worker instead of queueing all its batches behind one.
    fn batch_size(&self, texts: usize, priority: Priority) -> usize {
        let workers = match priority {
            Priority::Request => self.workers + self.request_workers,
            Priority::Background => self.workers,
        };
        self.max_batch.min(texts.div_ceil(workers)).max(1)
    }
}

/// One call's texts: the vectors found in the cache, and the distinct texts still to embed.
struct Request {
    /// By position in the caller's texts; `None` until embedded.
    vectors: Vec<Option<Vec<f32>>>,
    /// Distinct texts missing from the cache, shortest first after [`Request::take_batches`].
    misses: Vec<Miss>,
}

struct Miss {
    key: Key,
    text: String,
    /// Where the text occurs in the caller's texts; a text given twice is embedded once.
    positions: Vec<usize>,
}

impl Request {
    fn new(cache: &Cache, namespace: Namespace, texts: &[impl AsRef<str>]) -> Self {
        let mut vectors = Vec::with_capacity(texts.len());
        let mut misses: Vec<Miss> = Vec::new();
        let mut miss_index: HashMap<Key, usize> = HashMap::new();
        for (position, text) in texts.iter().map(AsRef::as_ref).enumerate() {
            let key = cache::key(namespace, text);
            let cached = cache.get(&key);
            if cached.is_none() {
                match miss_index.entry(key) {
                    Entry::Occupied(index) => misses[*index.get()].positions.push(position),
                    Entry::Vacant(index) => {
                        index.insert(misses.len());
                        misses.push(Miss {
                            key,
                            text: text.to_owned(),
                            positions: vec![position],
                        });
                    }
                }
            }
            vectors.push(cached);
        }
        Self { vectors, misses }
    }

    /// Groups the missing texts into batches of `size` (the last may be smaller), similar
    /// lengths together: a forward pass pads every text to the longest of its batch, and on
    /// mixed lengths that padding costs more than the batching saves. Character count stands
    /// in for token count, which would need a second tokenization.
    fn take_batches(&mut self, size: usize) -> Vec<Vec<String>> {
        self.misses.sort_by_key(|miss| miss.text.chars().count());
        self.misses
            .chunks_mut(size)
            .map(|chunk| {
                chunk
                    .iter_mut()
                    .map(|miss| std::mem::take(&mut miss.text))
                    .collect()
            })
            .collect()
    }

    /// Puts the batches' vectors (in batch order) in place and caches them.
    fn finish(
        mut self,
        cache: &Cache,
        batches: impl IntoIterator<Item = Vec<Vec<f32>>>,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let embedded: Vec<Vec<f32>> = batches.into_iter().flatten().collect();
        if embedded.len() != self.misses.len() {
            return Err(EmbedError::Inference(format!(
                "the model returned {} vectors for {} texts",
                embedded.len(),
                self.misses.len()
            )));
        }
        for (miss, vector) in self.misses.iter().zip(embedded) {
            for &position in &miss.positions {
                self.vectors[position] = Some(vector.clone());
            }
            cache.insert(miss.key, vector);
        }
        Ok(self
            .vectors
            .into_iter()
            .map(|vector| vector.expect("every text was found in the cache or embedded"))
            .collect())
    }
}
