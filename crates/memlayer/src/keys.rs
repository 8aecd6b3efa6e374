//! `memlayer keys`: API keys managed in the store itself, for operators (the first keys of a
//! tenant, a lost admin key, an emergency revocation, the operator's keys, which no HTTP
//! route makes), and the admin key set-up at each start of `memlayer serve`.
//!
//! On the store file these commands need the server stopped, since it holds the file
//! exclusively; while it runs, the same is done over HTTP (`POST`, `GET /v1/keys`,
//! `DELETE /v1/keys/{prefix}`). On PostgreSQL they work beside running servers, which read
//! keys from the database at every request, so a revocation holds at the next one.

use anyhow::Context;
use clap::{Args, Subcommand};
use memlayer_store::{ApiKey, Bootstrap, KeyRole, NewKey, OPERATOR_TENANT, Store, Timestamp};

use crate::config::StoreArgs;

/// What `keys --help` says about the running server.
const STOPPED_SERVER: &str = "On the store file in the data directory, which a running `memlayer \
serve` holds exclusively, these commands need the server stopped: stop it first, or use the \
HTTP API while it runs (POST /v1/keys, GET /v1/keys, DELETE /v1/keys/{prefix}, with a \
tenant_admin key). On a PostgreSQL database (--database-url, MEMLAYER_DATABASE_URL or \
database_url in the config file) they work beside running servers, and a revocation holds at \
their next request.";

const MICROS_PER_DAY: u64 = 86_400 * 1_000_000;
/// Longest expiry accepted: a hundred years.
const MAX_EXPIRY_DAYS: u32 = 36_500;

#[derive(Subcommand)]
#[command(after_help = STOPPED_SERVER)]
pub(crate) enum KeysCommand {
    /// Create an API key and print it: this is the only time it is shown (memlayer keeps only
    /// its SHA-256 hash). The key alone goes to stdout, so `KEY=$(memlayer keys create ...)`
    /// works; the description goes to stderr.
    ///
    /// Examples:
    ///   memlayer keys create --tenant acme --role tenant_admin
    ///   memlayer keys create --tenant acme --role service --name "support bot" --expires-in-days 90
    ///   memlayer keys create --tenant acme --role user --user-id alice
    ///   memlayer keys create --role operator --name backups
    #[command(verbatim_doc_comment, after_help = STOPPED_SERVER)]
    Create(CreateArgs),
    /// List API keys (never their secrets): prefix, tenant, role, user, state, dates, name.
    #[command(after_help = STOPPED_SERVER)]
    List(ListArgs),
    /// Revoke an API key by its prefix (the part after `mlk_`, as `keys list` shows it; `config`
    /// is the configured admin key), of any tenant or the operator's. It stops working for
    /// good.
    #[command(after_help = STOPPED_SERVER)]
    Revoke(RevokeArgs),
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The tenant (project) the key acts for; required, except for an operator key, which
    /// belongs to no tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// tenant_admin (everything in the tenant, keys included), service (an agent backend),
    /// user (one end user's sessions; needs --user-id) or operator (the whole store: `memlayer
    /// backup`, and nothing of any tenant; only created here, never over HTTP).
    #[arg(long)]
    role: KeyRole,
    /// The one user a `user` key acts for.
    #[arg(long)]
    user_id: Option<String>,
    /// A label for people.
    #[arg(long)]
    name: Option<String>,
    /// Days until the key stops working [default: never].
    #[arg(long)]
    expires_in_days: Option<u32>,
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only this tenant's keys [default: every tenant's].
    #[arg(long)]
    tenant: Option<String>,
}

#[derive(Args)]
pub(crate) struct RevokeArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The key's prefix.
    prefix: String,
}

pub(crate) fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Create(args) => create(args),
        KeysCommand::List(args) => list(&args),
        KeysCommand::Revoke(args) => revoke(&args),
    }
}

/// Runs `work` on the store `args` names and shuts the store down, committing what it
/// wrote: the database, or the store file (created first when `create`), failing with what
/// to do if the server holds it.
fn with_store<T, F, Fut>(args: &StoreArgs, create: bool, work: F) -> anyhow::Result<T>
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = memlayer_store::Result<T>>,
{
    // Multi-threaded: a store in PostgreSQL answers a synchronous read by waiting for it
    // on the runtime's blocking pool.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = match args.database_url()? {
        Some(url) => crate::open_database(&url, &runtime, "memlayer keys", None)?.0,
        None => open_file(args, create)?,
    };
    let outcome = runtime.block_on(work(store.clone()));
    store.shutdown();
    Ok(outcome?)
}

fn open_file(args: &StoreArgs, create: bool) -> anyhow::Result<Store> {
    let dir = args.data.data_dir()?;
    let path = dir.join(crate::STORE_FILE);
    if create {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    } else {
        anyhow::ensure!(path.is_file(), "no store at {}", path.display());
    }
    Store::open(&path).with_context(|| {
        format!(
            "cannot open the store {} (if `memlayer serve` is running, it holds the file: stop \
             it, or manage keys over HTTP at /v1/keys)",
            path.display()
        )
    })
}

fn create(args: CreateArgs) -> anyhow::Result<()> {
    let expires_at = match args.expires_in_days {
        Some(days @ 1..=MAX_EXPIRY_DAYS) => Some(Timestamp::from_micros(
            Timestamp::now().as_micros() + u64::from(days) * MICROS_PER_DAY,
        )),
        Some(_) => anyhow::bail!("--expires-in-days must be between 1 and {MAX_EXPIRY_DAYS}"),
        None => None,
    };
    let tenant = match (args.role, args.tenant) {
        (KeyRole::Operator, None) => OPERATOR_TENANT.to_owned(),
        (KeyRole::Operator, Some(_)) => {
            anyhow::bail!("an operator key belongs to no tenant: leave out --tenant")
        }
        (_, Some(tenant)) => tenant,
        (role, None) => anyhow::bail!("a {role} key needs --tenant, the tenant it acts for"),
    };
    let new = NewKey {
        tenant,
        role: args.role,
        user_id: args.user_id,
        name: args.name,
        expires_at,
    };
    let issued = with_store(&args.store, true, |store| async move {
        store.keys().create_key(new).await
    })?;
    eprintln!(
        "created {} (shown only now: memlayer keeps only its hash)",
        describe(&issued.key)
    );
    println!("{}", issued.secret);
    Ok(())
}

fn list(args: &ListArgs) -> anyhow::Result<()> {
    let tenant = args.tenant.clone();
    let keys = with_store(&args.store, false, |store| async move {
        store
            .read(move |store| store.keys().list_keys(tenant.as_deref()))
            .await
    })?;
    let now = Timestamp::now();
    let rows: Vec<[String; 8]> = keys
        .iter()
        .map(|key| {
            [
                key.prefix.clone(),
                key.tenant.clone(),
                key.role.to_string(),
                key.user_id.clone().unwrap_or_else(|| "-".into()),
                state(key, now).to_owned(),
                date(key.created_at),
                key.expires_at.map_or_else(|| "never".into(), date),
                key.name.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let header = [
        "PREFIX", "TENANT", "ROLE", "USER", "STATE", "CREATED", "EXPIRES", "NAME",
    ]
    .map(str::to_owned);
    let mut widths = [0; 8];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    Ok(())
}

fn revoke(args: &RevokeArgs) -> anyhow::Result<()> {
    let revoked = with_store(&args.store, false, |store| async move {
        store.keys().revoke_key(None, &args.prefix).await
    })?;
    let key = revoked.with_context(|| format!("no key with prefix {:?}", args.prefix))?;
    println!("revoked {}", describe(&key));
    Ok(())
}

fn describe(key: &ApiKey) -> String {
    if key.role == KeyRole::Operator {
        return format!(
            "key {} (role operator: the whole store, no tenant)",
            key.prefix
        );
    }
    let user = key
        .user_id
        .as_ref()
        .map_or_else(String::new, |user| format!(", user {user:?}"));
    format!(
        "key {} (tenant {:?}, role {}{user})",
        key.prefix, key.tenant, key.role
    )
}

fn state(key: &ApiKey, now: Timestamp) -> &'static str {
    if key.revoked_at.is_some() {
        "revoked"
    } else if key.is_active(now) {
        "active"
    } else {
        "expired"
    }
}

/// RFC 3339 to the second, UTC.
fn date(at: Timestamp) -> String {
    let seconds = i64::try_from(at.as_micros() / 1_000_000).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(seconds)
        .ok()
        .and_then(|time| {
            time.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "?".into())
}

/// At each start of `memlayer serve`: stores the configured admin key, or on a store without
/// any key generates one and prints it, once, on stdout.
pub(crate) async fn bootstrap(store: &Store, configured: Option<&str>) -> anyhow::Result<()> {
    let outcome = store
        .keys()
        .bootstrap_keys(configured)
        .await
        .context("cannot set up the admin key")?;
    match outcome {
        Bootstrap::Configured => {
            tracing::info!("the configured admin key is a tenant_admin key of tenant \"default\"");
        }
        Bootstrap::ConfiguredRevoked => tracing::warn!(
            "the configured admin key was revoked and stays revoked: configure another \
             (admin_key or MEMLAYER_ADMIN_KEY) or create one with `memlayer keys create`"
        ),
        Bootstrap::Existing => {}
        Bootstrap::Generated(issued) => {
            // The one place a generated admin key is ever shown. Scripts read this line.
            println!(
                "{BOOTSTRAP_LINE}{} (tenant \"default\", role tenant_admin; shown only this \
                 once, memlayer keeps only its hash)",
                issued.secret
            );
            tracing::warn!(
                key = %issued.key.prefix,
                "generated the first admin key and printed it on stdout; store it now, or \
                 configure your own with admin_key / MEMLAYER_ADMIN_KEY"
            );
        }
    }
    Ok(())
}

/// Starts the stdout line that shows a generated admin key.
pub(crate) const BOOTSTRAP_LINE: &str = "memlayer admin key: ";
