//! The real embedding model for tests, in this crate and (with the `test-support` feature)
//! in the crates above it: the tests that claim recall and erasure work run the model users
//! run, never a stand-in.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::{Assets, Embedder, EmbedderOptions};

/// Where `cargo xtask setup` installed the assets: `MEMLAYER_ASSETS_DIR` (set by
/// .cargo/config.toml for every cargo command in the workspace), else the workspace's
/// `memlayer-assets`.
pub fn assets_dir() -> PathBuf {
    std::env::var_os("MEMLAYER_ASSETS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../memlayer-assets"),
        PathBuf::from,
    )
}

/// The installed assets, checked; a test without them fails saying how to get them.
pub fn assets() -> Assets {
    let assets = Assets::in_dir(assets_dir());
    if let Err(err) = assets.check() {
        panic!("this test needs the real model (run `cargo xtask setup`): {err}");
    }
    assets
}

/// One embedder for the whole test process, with the default options: loading the model
/// takes a second, and every test of a binary shares it (each tenant's cache is its own).
pub fn shared_embedder() -> Embedder {
    static SHARED: OnceLock<Embedder> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            Embedder::open(&assets(), EmbedderOptions::default()).expect("load the model")
        })
        .clone()
}

/// The scheduling policy of the thread whose `/proc/.../stat` reads `stat` (field 41: 0 is
/// `SCHED_OTHER`, 5 `SCHED_IDLE`), for the tests that background threads run at background
/// priority. `None` if the line does not parse.
pub fn scheduling_policy(stat: &str) -> Option<i32> {
    // After the name's closing parenthesis (a name may hold spaces and parentheses): state
    // is field 3, policy field 41.
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split(' ').nth(38)?.parse().ok()
}
