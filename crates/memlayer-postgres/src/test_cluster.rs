//! A PostgreSQL database for each test: this crate's, and later the workspace's end-to-end
//! tests (feature `test-cluster`).
//!
//! With `MEMLAYER_TEST_DATABASE_URL` set, the tests use that server (its user must be allowed
//! to create databases). Otherwise the first test of a process starts a throwaway cluster of
//! its own, shared by the process's tests: `initdb` into a temporary directory, listening only
//! on a unix socket there (`listen_addresses = ''`: nothing on the network, no port to
//! collide with a parallel test process), with fsync on like production and the settings
//! erasure needs (`wal_recycle = off`, `wal_keep_size = 0`; a server given by URL must have
//! them for the erasure tests to pass). Every test gets a
//! fresh database with a random name, so tests run in parallel without seeing each other's
//! rows.
//!
//! Rust test binaries never run the destructors of statics, so the cluster cannot stop itself
//! when the process ends; a detached watchdog shell waits for the test process to vanish, then
//! stops the cluster (`pg_ctl stop -m immediate`) and removes its directory.
//!
//! Missing PostgreSQL binaries fail the test with what to install: a test that silently skips
//! would pass on a machine where it tested nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::OnceLock;

use tokio_postgres::config::Host;
use tokio_postgres::{Config, NoTls};

use crate::{PgStore, PostgresError, Result};

/// The variable naming an existing server to test against instead of a throwaway cluster.
pub const DATABASE_URL_VARIABLE: &str = "MEMLAYER_TEST_DATABASE_URL";

/// Connections each test's store may open: enough for the concurrency tests, few enough for
/// many tests in parallel under the cluster's `max_connections`.
const POOL_SIZE: usize = 8;

/// A fresh, empty database for one test. It is left behind when the test ends: the throwaway
/// cluster goes with the process, and on a server of the developer's they help debugging.
#[derive(Debug, Clone)]
pub struct TestDatabase {
    config: Config,
}

impl TestDatabase {
    /// Where to connect.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A connection string (`host=… user=… dbname=…`) naming this database, for a memlayer
    /// process's `MEMLAYER_DATABASE_URL`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|host| match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let mut url = format!("host={}", hosts.join(","));
        if let Some(user) = self.config.get_user() {
            url.push_str(&format!(" user={user}"));
        }
        if let Some(dbname) = self.config.get_dbname() {
            url.push_str(&format!(" dbname={dbname}"));
        }
        url
    }

    /// A migrated store on this database, with a pool of a few connections.
    pub async fn store(&self) -> Result<PgStore> {
        PgStore::connect_config(self.config.clone(), POOL_SIZE).await
    }

    /// A plain connection to this database, for what a test does behind the store's back.
    pub async fn connect(&self) -> Result<tokio_postgres::Client> {
        connect(&self.config).await
    }
}

/// A new database on the test server.
pub async fn database() -> Result<TestDatabase> {
    match std::env::var(DATABASE_URL_VARIABLE) {
        Ok(url) => {
            create_database(Config::from_str(&url).map_err(|source| PostgresError::Url { source })?)
                .await
        }
        Err(_) => TestCluster::shared()?.database().await,
    }
}

/// A database of a new name on the server `admin` connects to (as a user that may create
/// databases).
async fn create_database(admin: Config) -> Result<TestDatabase> {
    let name = format!("memlayer_test_{}", uuid::Uuid::new_v4().simple());
    connect(&admin)
        .await?
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let mut config = admin;
    config.dbname(&name);
    Ok(TestDatabase { config })
}

async fn connect(config: &Config) -> Result<tokio_postgres::Client> {
    let (client, connection) = config.connect(NoTls).await?;
    // The connection's I/O runs on its own task until the client is dropped; its error, if
    // any, reaches the client's next call.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The process's shared throwaway cluster, or why it could not be started (kept, so that
/// every test reports it rather than starting another).
static CLUSTER: OnceLock<std::result::Result<TestCluster, String>> = OnceLock::new();

/// The cluster's superuser, also the operating system user it runs as when tests run as root.
const SUPERUSER: &str = "postgres";

/// A throwaway PostgreSQL cluster: the process's shared one ([`TestCluster::shared`]), or one
/// of a test's own ([`TestCluster::start`]) that the test may stop as a power cut would
/// without disturbing the tests that share the other.
#[derive(Debug)]
pub struct TestCluster {
    /// The directory holding the data directory, the log and the socket.
    dir: PathBuf,
    pg_ctl: PathBuf,
    /// Whether it runs as [`SUPERUSER`] because this process is root.
    as_root: bool,
    /// Whether dropping it stops it (a test's own; the shared one lives in a static).
    owned: bool,
}

impl TestCluster {
    /// The process's shared cluster, started by the first caller.
    pub fn shared() -> Result<&'static Self> {
        CLUSTER
            .get_or_init(|| Self::init(false))
            .as_ref()
            .map_err(|message| PostgresError::TestCluster(message.clone()))
    }

    /// A new cluster of the caller's own, stopped and removed when it is dropped (or, like
    /// the shared one, when the process ends).
    pub fn start() -> Result<Self> {
        Self::init(true).map_err(PostgresError::TestCluster)
    }

    /// A new database on this cluster.
    pub async fn database(&self) -> Result<TestDatabase> {
        create_database(self.admin_config()).await
    }

    /// Stops the cluster as a power cut would (`pg_ctl stop -m immediate`: no shutdown
    /// checkpoint; the next start recovers from the WAL).
    pub fn crash(&self) -> Result<()> {
        self.pg_ctl(&["--mode", "immediate", "--wait", "stop"])
            .map_err(PostgresError::TestCluster)
    }

    /// Starts the cluster again after [`TestCluster::crash`], once it accepts connections.
    pub fn restart(&self) -> Result<()> {
        self.pg_ctl(&["--wait", "start"])
            .map_err(PostgresError::TestCluster)
    }

    /// The cluster's directory: its data directory (`data`), log and socket.
    pub fn directory(&self) -> &Path {
        &self.dir
    }
    fn init(owned: bool) -> std::result::Result<Self, String> {
        let bin = find_binaries()?;
        // PostgreSQL refuses to run as root; as root (in CI) the cluster runs as `postgres`.
        let as_root = rustix::process::geteuid().is_root();
        // In /tmp whatever TMPDIR says: the socket's path must stay under the 107 bytes a
        // unix socket address holds, and the `postgres` user must be able to reach it.
        let dir = tempfile::Builder::new()
            .prefix("memlayer-pg-")
            .tempdir_in("/tmp")
            .map_err(|err| format!("cannot create a temporary directory: {err}"))?
            // The watchdog removes it, after the cluster stopped.
            .keep();
        let cluster = Self {
            dir,
            pg_ctl: bin.join("pg_ctl"),
            as_root,
            owned,
        };
        if as_root {
            let mut chown = Command::new("chown");
            chown.arg(format!("{SUPERUSER}:")).arg(&cluster.dir);
            run(chown)?;
        }
        let data = cluster.dir.join("data");
        // The watchdog first: from here on the directory is removed whatever happens.
        spawn_watchdog(&cluster.pg_ctl, &data, &cluster.dir, as_root)?;
        let mut initdb = command(as_root, &bin.join("initdb"));
        initdb
            .arg("--pgdata")
            .arg(&data)
            .args(["--username", SUPERUSER, "--auth", "trust"])
            .args(["--encoding", "UTF8", "--locale", "C"])
            // Only initdb's own syncing of the files it writes; the server keeps fsync on.
            .arg("--no-sync");
        run(initdb)?;
        let settings = format!(
            "\n# memlayer test cluster\nlisten_addresses = ''\nunix_socket_directories = '{}'\n\
             fsync = on\nmax_connections = 300\n\
             # What erasure needs (src/erasure.rs): removed WAL segments are unlinked, not\n\
             # renamed for reuse with their bytes; none is kept for standbys.\n\
             wal_recycle = off\nwal_keep_size = 0\n",
            cluster.dir.display()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .and_then(|mut file| std::io::Write::write_all(&mut file, settings.as_bytes()))
            .map_err(|err| format!("cannot write postgresql.conf: {err}"))?;
        cluster.pg_ctl(&["--wait", "start"])?;
        Ok(cluster)
    }

    /// Runs `pg_ctl` on the cluster with `args`; a failure names the server's log.
    fn pg_ctl(&self, args: &[&str]) -> std::result::Result<(), String> {
        let log = self.dir.join("postgres.log");
        let mut pg_ctl = command(self.as_root, &self.pg_ctl);
        pg_ctl
            .arg("--pgdata")
            .arg(self.dir.join("data"))
            .arg("--log")
            .arg(&log)
            .args(args);
        run(pg_ctl).map_err(|err| format!("{err}; the server's log is {}", log.display()))
    }

    fn admin_config(&self) -> Config {
        let mut config = Config::new();
        config
            .host_path(&self.dir)
            .user(SUPERUSER)
            .dbname("postgres");
        config
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.owned {
            // A throwaway cluster needs no clean shutdown; the watchdog would do the same
            // when the process ends.
            let _ = self.crash();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The directory of `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/<version>/bin`
/// (Debian installs versions side by side there), else the first on `PATH`.
fn find_binaries() -> std::result::Result<PathBuf, String> {
    find_binaries_in(
        Path::new("/usr/lib/postgresql"),
        std::env::var_os("PATH").as_deref(),
    )
}

/// [`find_binaries`] with the versions' directory and `PATH` given.
fn find_binaries_in(
    versions_dir: &Path,
    path: Option<&std::ffi::OsStr>,
) -> std::result::Result<PathBuf, String> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|program| dir.join(program).is_file())
    };
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(versions_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| complete(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    path.into_iter()
        .flat_map(std::env::split_paths)
        .find(|dir| complete(dir))
        .ok_or_else(|| {
            format!(
                "PostgreSQL's initdb, pg_ctl and postgres are neither under \
                 /usr/lib/postgresql/*/bin nor on PATH: run `apt-get install postgresql` (or \
                 set {DATABASE_URL_VARIABLE} to a server the tests may create databases on)"
            )
        })
}

fn command(as_root: bool, program: &Path) -> Command {
    if as_root {
        let mut command = Command::new("runuser");
        command.args(["-u", SUPERUSER, "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(mut command: Command) -> std::result::Result<(), String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("cannot run {command:?}: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Starts a shell that outlives this process: it polls for the process every second, then
/// stops the cluster at once (a throwaway cluster needs no clean shutdown) and removes `dir`.
/// It runs in a process group of its own, so a Ctrl-C that ends the tests does not end it.
fn spawn_watchdog(
    pg_ctl: &Path,
    data: &Path,
    dir: &Path,
    as_root: bool,
) -> std::result::Result<(), String> {
    use std::os::unix::process::CommandExt;
    const SCRIPT: &str = r#"
        while kill -0 "$1" 2>/dev/null; do sleep 1; done
        if [ "$5" = root ]; then
            runuser -u postgres -- "$2" --pgdata "$3" --mode immediate stop
        else
            "$2" --pgdata "$3" --mode immediate stop
        fi
        rm -rf "$4"
    "#;
    Command::new("sh")
        .args(["-c", SCRIPT, "memlayer-test-cluster-watchdog"])
        .arg(std::process::id().to_string())
        .arg(pg_ctl)
        .arg(data)
        .arg(dir)
        .arg(if as_root { "root" } else { "user" })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|err| format!("cannot start the watchdog shell: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(bin: &Path) {
        std::fs::create_dir_all(bin).unwrap();
        for program in ["initdb", "pg_ctl", "postgres"] {
            std::fs::write(bin.join(program), "").unwrap();
        }
    }

    #[test]
    fn the_newest_installed_version_wins_then_path() {
        let root = tempfile::tempdir().unwrap();
        let versions = root.path().join("postgresql");
        let elsewhere = root.path().join("elsewhere");
        install(&elsewhere);
        let path = std::env::join_paths([root.path().join("empty"), elsewhere.clone()]).unwrap();
        assert_eq!(find_binaries_in(&versions, Some(&path)), Ok(elsewhere));

        install(&versions.join("9").join("bin"));
        install(&versions.join("15").join("bin"));
        // Incomplete: no server program.
        install(&versions.join("16").join("bin"));
        std::fs::remove_file(versions.join("16").join("bin").join("postgres")).unwrap();
        assert_eq!(
            find_binaries_in(&versions, Some(&path)),
            Ok(versions.join("15").join("bin")),
            "numerically newest complete version"
        );
    }

    #[test]
    fn missing_binaries_say_what_to_install() {
        let root = tempfile::tempdir().unwrap();
        let err = find_binaries_in(&root.path().join("none"), None).unwrap_err();
        assert!(err.contains("apt-get install postgresql"), "{err}");
    }
}
