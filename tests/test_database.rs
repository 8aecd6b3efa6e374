//! `test-database`: a fresh database on a throwaway PostgreSQL cluster
//! (`memlayer_postgres::test_cluster`) as a process, for xtask's runs of the server as a
//! process on PostgreSQL (`cargo xtask bench appends --postgres`). It prints one line, the
//! database's connection string (`host=… user=… dbname=…`, for `MEMLAYER_DATABASE_URL`),
//! then answers each line `size` with the database's size in bytes, and keeps the cluster
//! until its standard input closes; the cluster's watchdog then stops it and removes its
//! directory.

use memlayer_postgres::test_cluster;
use tokio_postgres::config::Host;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let database = runtime.block_on(test_cluster::database())?;
    let config = database.config();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let mut url = format!("host={}", hosts.join(","));
    if let Some(user) = config.get_user() {
        url.push_str(&format!(" user={user}"));
    }
    if let Some(dbname) = config.get_dbname() {
        url.push_str(&format!(" dbname={dbname}"));
    }
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
            other => println!("unknown request {other:?}; ask `size`"),
        }
    }
    Ok(())
}
