//! `test-database`: a fresh database on a throwaway PostgreSQL cluster
//! (`memlayer_postgres::test_cluster`) as a process, for xtask's runs of the server as a
//! process on PostgreSQL (`cargo xtask bench appends --postgres`). It prints one line, the
//! database's connection string (`host=… user=… dbname=…`, for `MEMLAYER_DATABASE_URL`),
//! then answers each line `size` with the database's size in bytes, and keeps the cluster
//! until its standard input closes; the cluster's watchdog then stops it and removes its
//! directory.

use memlayer_postgres::test_cluster;

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
            other => println!("unknown request {other:?}; ask `size`"),
        }
    }
    Ok(())
}
