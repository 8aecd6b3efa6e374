//! `test-database`: a fresh database on a throwaway PostgreSQL cluster
//! (`memlayer_postgres::test_cluster`) as a process, for xtask's runs of the server as a
//! process on PostgreSQL (`cargo xtask bench appends --postgres`). It prints one line, the
//! database's connection string (`host=… user=… dbname=…`, for `MEMLAYER_DATABASE_URL`),
//! then answers one line to each request line, and keeps the cluster until its standard input
//! closes; the cluster's watchdog then stops it and removes its directory. Requests:
//!
//! - `size`: the database's size in bytes;
//! - `crash`: stops the cluster as a power cut would (`cargo xtask crash --postgres`), `ok`;
//! - `start`: starts it again, `ok` once it accepts connections;
//! - `directory`: the cluster's directory, its data directory (`data`) and log.

use memlayer_postgres::test_cluster::{self, TestCluster};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let database = runtime.block_on(test_cluster::database())?;
    let url = database.url();
    println!("{url}");
    // One request a line, until end of file (the parent closed the pipe or exited).
    for request in std::io::stdin().lines() {
        match request?.as_str() {
            "size" => {
                let bytes: i64 = runtime.block_on(async {
                    let client = database.connect().await?;
                    let row = client
                        .query_one("SELECT pg_database_size(current_database())", &[])
                        .await?;
                    Ok::<_, Box<dyn std::error::Error>>(row.get(0))
                })?;
                println!("{bytes}");
            }
            "crash" => println!("{}", done(throwaway().and_then(TestCluster::crash))),
            "start" => println!("{}", done(throwaway().and_then(TestCluster::restart))),
            "directory" => println!("{}", throwaway()?.directory().display()),
            other => println!("unknown request {other:?}; ask size, crash, start or directory"),
        }
    }
    Ok(())
}

/// `ok`, or what failed, on one line.
fn done(outcome: memlayer_postgres::Result<()>) -> String {
    match outcome {
        Ok(()) => "ok".into(),
        Err(err) => format!("failed: {}", err.to_string().replace('\n', " ")),
    }
}

/// The throwaway cluster the database is on; not a server given by URL, which is not this
/// helper's to stop.
fn throwaway() -> memlayer_postgres::Result<&'static TestCluster> {
    if std::env::var_os(test_cluster::DATABASE_URL_VARIABLE).is_some() {
        return Err(memlayer_postgres::PostgresError::TestCluster(format!(
            "the database is on the server {} names, which this helper does not stop",
            test_cluster::DATABASE_URL_VARIABLE
        )));
    }
    TestCluster::shared()
}
