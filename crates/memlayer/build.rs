//! Names the commit the binary is built from, for `memlayer --version`: `MEMLAYER_COMMIT`
//! when set (a build from a source archive, which has no Git history), else what `git` says
//! of the checkout, else `unknown`. The build script runs again when the checkout's `HEAD`
//! or its branch moves, so the name never outlives the commit.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=MEMLAYER_COMMIT");
    let commit = std::env::var("MEMLAYER_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(checkout_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MEMLAYER_COMMIT={commit}");
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn checkout_commit() -> Option<String> {
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])?];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]));
        watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    // A path that does not exist would make every build run the script again.
    for path in watched
        .iter()
        .filter(|path| std::path::Path::new(path).exists())
    {
        println!("cargo:rerun-if-changed={path}");
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}
