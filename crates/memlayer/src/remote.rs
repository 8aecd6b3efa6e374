//! Operator commands against a running server, over its HTTP API: `stats`, `purge` and
//! `backup`. They go through the API (not the data directory) because the server holds the
//! store file while it runs, and so that they are authorised and recorded like any request.
//! `stats` and `purge` act in the key's tenant (a `tenant_admin` key); `backup` copies the
//! whole store and needs an `operator` key.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Url;
use reqwest::blocking::{Client, RequestBuilder, Response};
use serde_json::Value;

/// Environment variable with the API key these commands send. Deliberately not a flag: a
/// flag's value is visible to every user of the host in the process list.
const KEY_ENV: &str = "MEMLAYER_KEY";
/// What `purge --older-than-days 0` must be confirmed with, as on the admin page.
const DELETE_ALL: &str = "DELETE ALL";
/// What a path segment keeps as it is: RFC 3986's unreserved characters. Everything else is
/// percent-encoded, so no character of a segment can end it (`/`), start a query or a
/// fragment (`?`, `#`), be decoded into one (`%`), or be dropped by the URL parser (tabs and
/// line breaks).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An API path, as its segments and query pairs. Each segment and value is percent-encoded
/// when the URL is built: ids may come from an untrusted file (an export being imported), and
/// one must stay one segment, or one value, of the route it was put in.
pub(crate) struct Endpoint {
    segments: Vec<String>,
    query: Vec<(&'static str, String)>,
}

impl Endpoint {
    /// `/` followed by `segments`, e.g. `["v1", "sessions", id]`.
    pub(crate) fn new<S: AsRef<str>>(segments: &[S]) -> Self {
        Self {
            segments: segments.iter().map(|s| s.as_ref().to_owned()).collect(),
            query: Vec::new(),
        }
    }

    /// Adds `name=value` to the query.
    pub(crate) fn query(mut self, name: &'static str, value: impl ToString) -> Self {
        self.query.push((name, value.to_string()));
        self
    }

    /// The endpoint on the server at `base`.
    fn url(&self, base: &str) -> anyhow::Result<Url> {
        let mut path = base.trim_end_matches('/').to_owned();
        for segment in &self.segments {
            // URL parsers resolve `.` and `..` (encoded or not) against the path before it
            // is sent, and an empty segment names another route: no id can be one.
            anyhow::ensure!(
                !matches!(segment.as_str(), "" | "." | ".."),
                "{segment:?} cannot be a segment of a URL path; no valid id is"
            );
            path.push('/');
            path.extend(utf8_percent_encode(segment, SEGMENT));
        }
        let mut url = Url::parse(&path).with_context(|| format!("invalid server URL {base}"))?;
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        Ok(url)
    }
}

/// Which server to ask, and with which key.
#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// The running server's address.
    #[arg(long, env = "MEMLAYER_URL", default_value = "http://127.0.0.1:7700")]
    url: String,
}

impl ServerArgs {
    fn request(
        &self,
        method: reqwest::Method,
        endpoint: &Endpoint,
    ) -> anyhow::Result<RequestBuilder> {
        let key = std::env::var(KEY_ENV)
            .ok()
            .filter(|key| !key.is_empty())
            .with_context(|| {
                format!(
                    "set {KEY_ENV} to an API key: a tenant_admin key, or an operator key for \
                     backup"
                )
            })?;
        let client = Client::builder()
            // Backups of large stores take a while; nothing else here is slow.
            .timeout(None)
            .build()?;
        Ok(client
            .request(method, endpoint.url(&self.url)?)
            .bearer_auth(key))
    }

    /// Sends `request`; an answer other than 2xx becomes an [`ApiFailure`].
    ///
    /// A `429` is waited out for as long as its `Retry-After` says and sent again: the key's
    /// rate limit refuses before anything is done, so any request may be repeated, and an
    /// export or import of a large tenant makes more requests a second than a key's default
    /// limit allows.
    fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let mut request = request;
        let mut refusals = 0;
        let response = loop {
            // Every request here has a body that can be cloned (JSON or none).
            let again = request.try_clone();
            let response = request
                .send()
                .with_context(|| format!("cannot reach the server at {}", self.url))?;
            match again {
                Some(again)
                    if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS
                        && refusals < MAX_RATE_LIMIT_WAITS =>
                {
                    refusals += 1;
                    std::thread::sleep(retry_after(&response));
                    request = again;
                }
                _ => break response,
            }
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body: Value = response.json().unwrap_or(Value::Null);
        let text = |field: &str| body["error"][field].as_str().unwrap_or_default().to_owned();
        Err(ApiFailure {
            status,
            code: text("code"),
            message: text("message"),
        }
        .into())
    }

    /// The JSON answer to a request without a body.
    pub(crate) fn json(
        &self,
        method: reqwest::Method,
        endpoint: &Endpoint,
    ) -> anyhow::Result<Value> {
        let response = self.send(self.request(method, endpoint)?)?;
        response.json().context("the server's answer is not JSON")
    }

    /// The JSON answer to a request with the JSON `body`.
    pub(crate) fn send_json(
        &self,
        method: reqwest::Method,
        endpoint: &Endpoint,
        body: &Value,
    ) -> anyhow::Result<Value> {
        let response = self.send(self.request(method, endpoint)?.json(body))?;
        response.json().context("the server's answer is not JSON")
    }
}

/// How many `429`s in a row a request waits out before the command gives up: a limit that
/// admits nothing for this long is not a rate limit.
const MAX_RATE_LIMIT_WAITS: u32 = 60;

/// How long a `429` asks to wait: its `Retry-After` in seconds (at most a minute), else one.
fn retry_after(response: &Response) -> std::time::Duration {
    let seconds = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(1);
    std::time::Duration::from_secs(seconds.clamp(1, 60))
}

/// A request the server refused, with its status and the API's error code and message.
#[derive(Debug)]
pub(crate) struct ApiFailure {
    pub(crate) status: reqwest::StatusCode,
    code: String,
    message: String,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server answered {} {}: {}",
            self.status, self.code, self.message
        )
    }
}

impl std::error::Error for ApiFailure {}

/// Flags of `memlayer stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn stats(args: &StatsArgs) -> anyhow::Result<()> {
    let stats = args.server.json(
        reqwest::Method::GET,
        &Endpoint::new(&["v1", "admin", "conversations", "stats"]),
    )?;
    println!(
        "project {}: {} conversation(s)",
        stats["project_id"].as_str().unwrap_or("?"),
        stats["total_conversations"]
    );
    if let Some(oldest) = stats["oldest_conversation"].as_object() {
        println!(
            "least recently active: {} (last activity {})",
            oldest["session_id"].as_str().unwrap_or("?"),
            oldest["last_activity"].as_str().unwrap_or("?")
        );
    }
    if let Some(line) = disk_line(&stats["disk"]) {
        println!("{line}");
    }
    Ok(())
}

/// The stats' disk figures in a line for people, `None` when the server sent none.
fn disk_line(disk: &serde_json::Value) -> Option<String> {
    let [free, size, store] =
        ["free_bytes", "size_bytes", "store_bytes"].map(|field| disk[field].as_u64());
    let (free, size, store) = (free?, size?, store?);
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let share = if size == 0 {
        100.0
    } else {
        free as f64 * 100.0 / size as f64
    };
    let low = if disk["low"] == true {
        " (below the warning threshold: free some before writes are refused)"
    } else {
        ""
    };
    Some(format!(
        "disk: {:.1} MiB free of {:.1} MiB ({share:.1}%){low}; the store takes {:.1} MiB",
        mib(free),
        mib(size),
        mib(store)
    ))
}

/// Flags of `memlayer purge`.
#[derive(Debug, Args)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Erase every conversation of the key's tenant inactive for more than this many days;
    /// 0 erases all of them and needs --confirm "DELETE ALL".
    #[arg(long)]
    older_than_days: u32,
    /// Must be exactly "DELETE ALL" when --older-than-days is 0.
    #[arg(long)]
    confirm: Option<String>,
}

pub(crate) fn purge(args: &PurgeArgs) -> anyhow::Result<()> {
    if args.older_than_days == 0 {
        anyhow::ensure!(
            args.confirm.as_deref() == Some(DELETE_ALL),
            "--older-than-days 0 erases every conversation: confirm with --confirm {DELETE_ALL:?}"
        );
    }
    let mut receipt = args.server.json(
        reqwest::Method::DELETE,
        &Endpoint::new(&["v1", "admin", "conversations", "purge"])
            .query("older_than_days", args.older_than_days),
    )?;
    // A purge longer than half the server's request timeout answers 202 and goes on; its
    // receipt comes from the erasure's own URL once it is done.
    if receipt["status"] == "running" {
        let id = receipt["erasure_id"].to_string();
        eprintln!("the purge is still running as erasure {id}; waiting for its receipt");
        let endpoint = Endpoint::new(&["v1", "admin", "erasures", &id]);
        while receipt["status"] == "running" {
            std::thread::sleep(std::time::Duration::from_secs(1));
            receipt = args.server.json(reqwest::Method::GET, &endpoint)?;
        }
    }
    let counts = &receipt["counts"];
    println!(
        "erased {} conversation(s), {} message(s), {} vector(s) (receipt {})",
        counts["sessions"], counts["messages"], counts["vectors"], receipt["erasure_id"]
    );
    Ok(())
}

/// Flags of `memlayer backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The file to write (must not exist); `memlayer serve --data-dir DIR` serves it once
    /// copied to DIR/memlayer.redb.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.out.exists(),
        "{} exists; a backup never overwrites a file",
        args.out.display()
    );
    let mut response = args.server.send(args.server.request(
        reqwest::Method::POST,
        &Endpoint::new(&["v1", "admin", "backup"]),
    )?)?;
    let partial = partial_path(&args.out);
    let written = (|| -> anyhow::Result<u64> {
        let mut file = std::fs::File::create_new(&partial)
            .with_context(|| format!("cannot create {}", partial.display()))?;
        let bytes = response
            .copy_to(&mut file)
            .context("the download of the backup failed")?;
        file.flush()?;
        file.sync_all()?;
        Ok(bytes)
    })();
    let bytes = match written {
        Ok(bytes) => bytes,
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
    };
    // Checked before it takes the final name: a backup that does not open is no backup.
    let check = memlayer_store::Store::open(&partial)
        .with_context(|| format!("the downloaded backup {} does not open", partial.display()));
    match check {
        Ok(store) => store.shutdown(),
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
    }
    // A link, not a rename: a rename would replace a file created at `out` meanwhile.
    std::fs::hard_link(&partial, &args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    std::fs::remove_file(&partial)?;
    println!(
        "backup written to {} ({bytes} bytes, checksums verified)",
        args.out.display()
    );
    Ok(())
}

/// Where a download goes until it is complete and checked.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_owned();
    name.push(".partial");
    out.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_and_value_stays_one_segment_or_value() {
        let url = |segments: &[&str]| Endpoint::new(segments).url("http://127.0.0.1:7700/base/");
        assert_eq!(
            url(&["v1", "sessions", "../../v1/keys", "messages"])
                .unwrap()
                .as_str(),
            "http://127.0.0.1:7700/base/v1/sessions/..%2F..%2Fv1%2Fkeys/messages"
        );
        assert_eq!(
            url(&["v1", "users", "eve?page=0#x%2F\t.."]).unwrap().path(),
            "/base/v1/users/eve%3Fpage%3D0%23x%252F%09.."
        );
        for dots in ["", ".", ".."] {
            assert!(url(&["v1", "sessions", dots]).is_err(), "{dots:?}");
        }
        let query = Endpoint::new(&["v1", "sessions"])
            .query("user_id", "a&page_size=1#")
            .url("http://127.0.0.1:7700")
            .unwrap();
        assert_eq!(query.query(), Some("user_id=a%26page_size%3D1%23"));
    }
}
