//! [`PgStore`]: a pool of connections to one migrated database.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Mutex;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

use crate::seal::DataKey;
use crate::{PostgresError, Result};

/// Connections the pool opens at most when [`PgStore::connect`] builds it.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// Longest a call waits for a connection: for a free one of a full pool, or for a new one to
/// be made. Then it fails (`503`, which clients retry) rather than holding its request for as
/// long as the pool stays starved or the database unreachable.
pub const POOL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Settings every connection of a store asks the server for, unless the URL's `options` name
/// them. memlayer leaves a transaction idle between its statements for no longer than a
/// request runs (30 s at most), so a transaction idle for a minute belongs to a node that
/// froze inside it (a paused VM or process): the server ends it, where it would otherwise hold
/// back every node's reclaim of erased keys for as long as the freeze lasts. The keepalives let
/// the server notice a client that vanished (its host gone) within about a minute instead of
/// the kernel's two hours; they do not apply over a unix socket.
const SESSION_SETTINGS: [(&str, &str); 4] = [
    ("idle_in_transaction_session_timeout", "60s"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
];

/// Sessions whose key and next index an append remembers (see [`KnownSessions`]).
const KNOWN_SESSIONS: usize = 4_096;

/// memlayer's records in one PostgreSQL database. Cheap to share behind an `Arc`; every call
/// takes a connection from the pool for its statements only.
pub struct PgStore {
    pub(crate) pool: Pool,
    pub(crate) known: KnownSessions,
    /// Counts the appends this store committed, for the workers that wait for new work
    /// (`memlayer_store::Backend::commits`); other nodes' appends are found by their polls.
    pub(crate) commits: tokio::sync::watch::Sender<u64>,
    /// When this store last pruned the embedding outbox (src/embeddings.rs).
    pub(crate) feed_pruned_at: Mutex<Option<std::time::Instant>>,
    /// The node this store serves ([`PgStore::for_node`]): its claims on outbox entries carry
    /// the name, so that the node restarted takes its own claims back at once.
    pub(crate) node: Option<String>,
    io: IoThread,
}

/// The thread whose runtime drives every connection's socket. Not the caller's runtime:
/// memlayer's synchronous reads wait for the database on that runtime's threads, and a
/// request can block a worker on an index lock held by such a reader; were the sockets
/// driven by the same workers, the answer the reader waits for could never arrive.
struct IoThread {
    handle: tokio::runtime::Handle,
    /// Dropped with the store: the thread then ends, and its runtime with it.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl IoThread {
    fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| PostgresError::IoThread { source })?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("memlayer-postgres-io".into())
            .spawn(move || {
                let _ = runtime.block_on(stopped);
            })
            .map_err(|source| PostgresError::IoThread { source })?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }
}

/// Adds [`SESSION_SETTINGS`] to the `options` the connections send, keeping the URL's own
/// (and its value of any setting it names).
fn with_session_settings(config: &mut tokio_postgres::Config) {
    let given = config.get_options().unwrap_or_default().to_owned();
    let mut options = given.clone();
    for (name, value) in SESSION_SETTINGS {
        if !given.contains(name) {
            if !options.is_empty() {
                options.push(' ');
            }
            options.push_str(&format!("-c {name}={value}"));
        }
    }
    config.options(&options);
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to `database_url` (`postgres://user:password@host/db`, or the key=value
    /// form; a host starting with `/` is a unix socket directory) with a pool of up to
    /// `pool_size` connections, and migrates the database.
    ///
    /// No TLS yet: the database is expected on a unix socket or a trusted network.
    pub async fn connect(database_url: &str, pool_size: usize) -> Result<Self> {
        Self::connect_named(database_url, pool_size, "memlayer").await
    }

    /// [`PgStore::connect`] with connections named `application_name` (unless the URL names
    /// them): what `pg_stat_activity` shows, so an operator (or a test) tells the nodes
    /// sharing a database apart.
    pub async fn connect_named(
        database_url: &str,
        pool_size: usize,
        application_name: &str,
    ) -> Result<Self> {
        let mut config = tokio_postgres::Config::from_str(database_url)
            .map_err(|source| PostgresError::Url { source })?;
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        Self::connect_config(config, pool_size).await
    }

    /// This store serving the node named `node_id`, a name it keeps across restarts: the
    /// outbox entries it claims for embedding name it, and a store for the same node takes
    /// them back at once, where any other waits for the claim's lease to run out (see
    /// "Several nodes" in src/embeddings.rs). Two live stores must not share a name.
    pub fn for_node(mut self, node_id: &str) -> Self {
        self.node = Some(node_id.to_owned());
        self
    }

    /// Where `database_url` points, for people to read: the database and its hosts, never the
    /// user or a password.
    pub fn location(database_url: &str) -> Result<String> {
        let config = tokio_postgres::Config::from_str(database_url)
            .map_err(|source| PostgresError::Url { source })?;
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|host| match host {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        Ok(format!(
            "PostgreSQL database {} on {}",
            config.get_dbname().unwrap_or("(the user's)"),
            if hosts.is_empty() {
                "localhost".to_owned()
            } else {
                hosts.join(", ")
            }
        ))
    }

    /// [`PgStore::connect`] with a parsed configuration.
    pub async fn connect_config(
        mut config: tokio_postgres::Config,
        pool_size: usize,
    ) -> Result<Self> {
        with_session_settings(&mut config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                // A connection that broke is found by the statement that uses it; checking
                // each one with a query on every checkout would add a round trip per call.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            // The timeouts' timer: every checkout runs on the store's I/O thread, a Tokio
            // runtime with its timer enabled.
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|source| PostgresError::BuildPool { source })?;
        Self::open(pool).await
    }

    /// Migrates the database `pool` connects to, and serves from it. The pool's connections
    /// are as its configuration makes them: [`PgStore::connect_config`] adds the session
    /// settings (an idle transaction's timeout, keepalives) this path leaves to the caller.
    pub async fn open(pool: Pool) -> Result<Self> {
        let store = Self {
            pool,
            known: KnownSessions::default(),
            commits: tokio::sync::watch::Sender::new(0),
            feed_pruned_at: Mutex::new(None),
            node: None,
            io: IoThread::start()?,
        };
        let mut client = store.connection().await?;
        crate::migrate::migrate(&mut client).await?;
        drop(client);
        Ok(store)
    }

    /// A connection of the pool. A new one is made on the store's own I/O thread
    /// ([`IoThread`]), whose runtime alone drives its socket.
    pub(crate) async fn connection(&self) -> Result<deadpool_postgres::Object> {
        let pool = self.pool.clone();
        let got = self
            .io
            .handle
            .spawn(async move { pool.get().await })
            .await
            .map_err(|_| PostgresError::IoThreadGone)?;
        Ok(got?)
    }

    /// The pool, for callers that share it.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Succeeds while the database answers a statement on a pooled connection (the
    /// readiness probe); after [`Self::close`], [`memlayer_store::StoreError::Closed`].
    pub async fn check_ready(&self) -> Result<()> {
        self.connection().await?.execute("SELECT 1", &[]).await?;
        Ok(())
    }

    /// Closes the pool: statements already running finish on their connections, every
    /// later call (reads too, unlike the redb store) is refused with
    /// [`memlayer_store::StoreError::Closed`].
    pub fn close(&self) {
        self.pool.close();
    }

    /// Tells the workers waiting for new work that an append committed.
    pub(crate) fn count_commit(&self) {
        self.commits.send_modify(|commits| *commits += 1);
    }
}

/// The data key and the next message index of sessions this process appended to: an append
/// seals its messages for the index it expects before the one statement that stores them, and
/// a right guess spares it a round trip. A wrong guess costs nothing but a retry — the
/// statement checks both against the session row — so the entries need no invalidation for
/// correctness, only a bound on their number. They do hold keys in memory, though:
/// `PgStore::delete_session` forgets the entry of the session whose key it destroys (another
/// node's store keeps its entry until its next append to the id finds it stale).
#[derive(Default)]
pub(crate) struct KnownSessions {
    entries: Mutex<HashMap<(String, String), (DataKey, u64)>>,
}

impl KnownSessions {
    pub(crate) fn get(&self, tenant: &str, session_id: &str) -> Option<(DataKey, u64)> {
        self.lock()
            .get(&(tenant.to_owned(), session_id.to_owned()))
            .cloned()
    }

    pub(crate) fn put(&self, tenant: &str, session_id: &str, key: DataKey, next_index: u64) {
        let mut entries = self.lock();
        if entries.len() >= KNOWN_SESSIONS {
            // Forgetting everything is the cheapest bound: the cost is one retry per session.
            entries.clear();
        }
        entries.insert(
            (tenant.to_owned(), session_id.to_owned()),
            (key, next_index),
        );
    }

    pub(crate) fn forget(&self, tenant: &str, session_id: &str) {
        self.lock()
            .remove(&(tenant.to_owned(), session_id.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (DataKey, u64)>> {
        // The map holds guesses only; one a panicking thread left half-written is still safe.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
