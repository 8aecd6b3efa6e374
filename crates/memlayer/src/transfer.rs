//! `memlayer export` and `memlayer import`: a tenant's or one user's data as JSON Lines, read
//! from and written to a running server through its API.
//!
//! One line per record, each an object with a `kind`:
//! - `session`: the session (`session`, as `GET /v1/sessions/{id}` shows it), all its
//!   `messages` (cleared ones too) and its `runs`;
//! - `memories`: one user's long-term memories (`user_id`, `memories`);
//! - `episodes`: one user's episodes (`user_id`, `episodes`).
//!
//! Sessions come first, so that an import creates them before the memories and episodes that
//! point at them. An import can be run again: messages are appended in chunks with
//! idempotency keys, runs keep their ids (one already there is skipped), remembering a memory
//! again updates it instead of copying it, and an episode already there is not recorded
//! twice. A cleared session is cleared again at the same message. Messages keep their
//! timestamps; when a session, a run, a memory or an episode was stored is the time of the
//! import. Derived data (vectors,
//! summaries, entities, session memory) is not exported: the importing server derives it.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::Method;
use serde_json::{Value, json};

use crate::remote::{ApiFailure, Endpoint, ServerArgs};

/// Sessions listed per request (the API's largest page).
const PAGE_SIZE: u64 = 100;
/// Messages per append request of an import.
const CHUNK: usize = 200;

/// Flags of `memlayer export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Only this user's sessions, memories and episodes; without it, the key's whole tenant.
    #[arg(long)]
    user: Option<String>,
    /// The file to write (must not exist); without it, standard output.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Flags of `memlayer import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// The JSON Lines file `memlayer export` wrote.
    #[arg(long = "in")]
    input: PathBuf,
}

fn progress(total: u64, what: &str) -> ProgressBar {
    // Drawn on stderr, and only when it is a terminal: scripts and CI logs stay clean.
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise}")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_owned());
    bar
}

pub(crate) fn export(args: &ExportArgs) -> anyhow::Result<()> {
    let server = &args.server;
    let mut out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(BufWriter::new(
            File::create_new(path).with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let listing = |page: u64| {
        let endpoint = Endpoint::new(&["v1", "sessions"])
            .query("page", page)
            .query("page_size", PAGE_SIZE);
        match &args.user {
            Some(user) => endpoint.query("user_id", user),
            None => endpoint,
        }
    };
    let first = server.json(Method::GET, &listing(0))?;
    let bar = progress(first["total_elements"].as_u64().unwrap_or(0), "sessions");
    let mut users: BTreeSet<String> = args.user.iter().cloned().collect();
    let mut page = first;
    let mut number = 0;
    loop {
        let sessions = page["content"]
            .as_array()
            .context("a page without content")?;
        for listed in sessions {
            let id = listed["session_id"]
                .as_str()
                .context("a session without id")?;
            let mut session = server.json(Method::GET, &Endpoint::new(&["v1", "sessions", id]))?;
            let messages = session["messages"].take();
            let runs = server.json(Method::GET, &Endpoint::new(&["v1", "sessions", id, "runs"]))?;
            if let Some(user) = session["user_id"].as_str() {
                users.insert(user.to_owned());
            }
            let line = json!({ "kind": "session", "session": session, "messages": messages,
                "runs": runs });
            writeln!(out, "{line}")?;
            bar.inc(1);
        }
        number += 1;
        if number >= page["total_pages"].as_u64().unwrap_or(0) {
            break;
        }
        page = server.json(Method::GET, &listing(number))?;
    }
    bar.finish_and_clear();
    for user in &users {
        let memories = server.json(
            Method::GET,
            &Endpoint::new(&["v1", "users", user, "memories"]),
        )?;
        writeln!(
            out,
            "{}",
            json!({ "kind": "memories", "user_id": user, "memories": memories["memories"] })
        )?;
        let episodes = server.json(
            Method::GET,
            &Endpoint::new(&["v1", "users", user, "episodes"]),
        )?;
        writeln!(
            out,
            "{}",
            json!({ "kind": "episodes", "user_id": user, "episodes": episodes["episodes"] })
        )?;
    }
    out.flush()?;
    eprintln!(
        "memlayer: exported {} session(s) and the memories and episodes of {} user(s)",
        bar.position(),
        users.len()
    );
    Ok(())
}

pub(crate) fn import(args: &ImportArgs) -> anyhow::Result<()> {
    let file =
        File::open(&args.input).with_context(|| format!("cannot open {}", args.input.display()))?;
    let lines: Vec<String> = BufReader::new(file).lines().collect::<Result<_, _>>()?;
    let bar = progress(lines.len() as u64, "records");
    for (number, line) in lines.iter().enumerate() {
        let record: Value =
            serde_json::from_str(line).with_context(|| format!("line {}: not JSON", number + 1))?;
        import_record(&args.server, &record)
            .with_context(|| format!("line {} ({})", number + 1, record["kind"]))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    eprintln!(
        "memlayer: imported {} record(s) from {}",
        lines.len(),
        args.input.display()
    );
    Ok(())
}

fn import_record(server: &ServerArgs, record: &Value) -> anyhow::Result<()> {
    match record["kind"].as_str() {
        Some("session") => import_session(server, record),
        Some("memories") => {
            let user = record["user_id"].as_str().context("no user_id")?;
            for memory in record["memories"].as_array().context("no memories")? {
                let body = json!({ "text": memory["text"], "type": memory["type"],
                    "tags": memory["tags"], "agent_id": memory["agent_id"],
                    "source": memory.get("source") });
                server.send_json(
                    Method::POST,
                    &Endpoint::new(&["v1", "users", user, "memories"]),
                    &body,
                )?;
            }
            Ok(())
        }
        Some("episodes") => {
            let user = record["user_id"].as_str().context("no user_id")?;
            let endpoint = Endpoint::new(&["v1", "users", user, "episodes"]);
            let existing = server.json(Method::GET, &endpoint)?;
            let same = |a: &Value, b: &Value| {
                ["task_type", "description", "lesson", "agent_id"]
                    .iter()
                    .all(|field| a[field] == b[field])
            };
            for episode in record["episodes"].as_array().context("no episodes")? {
                let known = existing["episodes"]
                    .as_array()
                    .is_some_and(|known| known.iter().any(|other| same(other, episode)));
                if known {
                    continue;
                }
                let body = json!({ "task_type": episode["task_type"],
                    "description": episode["description"], "outcome": episode["outcome"],
                    "reflection": episode["reflection"], "lesson": episode["lesson"],
                    "standing": episode["standing"], "agent_id": episode["agent_id"],
                    "source_session_id": episode.get("source_session_id") });
                server.send_json(Method::POST, &endpoint, &body)?;
            }
            Ok(())
        }
        other => anyhow::bail!("unknown kind {other:?}"),
    }
}

fn import_session(server: &ServerArgs, record: &Value) -> anyhow::Result<()> {
    let session = &record["session"];
    let id = session["session_id"].as_str().context("no session_id")?;
    let messages = record["messages"].as_array().context("no messages")?;
    let cleared_at = session["load_from"].as_u64().unwrap_or(0) as usize;
    let messages_endpoint = Endpoint::new(&["v1", "sessions", id, "messages"]);
    let owner = json!({ "user_id": session["user_id"], "agent_id": session["agent_id"],
        "flow_id": session.get("flow_id"), "session_metadata": session["metadata"] });
    // Split at the clear, so the clear happens again at the same message.
    let (before, after) = messages.split_at(cleared_at.min(messages.len()));
    for (part, offset) in [(before, 0), (after, before.len())] {
        for (chunk, batch) in part.chunks(CHUNK).enumerate() {
            let first = offset + chunk * CHUNK;
            let batch: Vec<Value> = batch
                .iter()
                .map(|message| {
                    json!({ "role": message["role"], "content": message["content"],
                        "token_count": message["token_count"], "timestamp": message["timestamp"],
                        "metadata": message["metadata"] })
                })
                .collect();
            let mut body = owner.clone();
            body["messages"] = json!(batch);
            body["idempotency_key"] = json!(format!("import-{first}"));
            server.send_json(Method::POST, &messages_endpoint, &body)?;
        }
        if offset == 0 && cleared_at > 0 {
            let current = server.json(Method::GET, &Endpoint::new(&["v1", "sessions", id]))?;
            if current["load_from"].as_u64() != Some(cleared_at as u64) {
                server.send_json(
                    Method::POST,
                    &Endpoint::new(&["v1", "sessions", id, "clear"]),
                    &json!({}),
                )?;
            }
        }
    }
    for run in record["runs"].as_array().into_iter().flatten() {
        let body = json!({ "run_id": run["run_id"], "status": run["status"],
            "content": run.get("content"), "tool_calls": run["tool_calls"],
            "error": run.get("error"), "metadata": run["metadata"] });
        let recorded = server.send_json(
            Method::POST,
            &Endpoint::new(&["v1", "sessions", id, "runs"]),
            &body,
        );
        match recorded {
            // A run with this id exists: an earlier import recorded it.
            Err(err)
                if err
                    .downcast_ref::<ApiFailure>()
                    .is_some_and(|failure| failure.status == reqwest::StatusCode::CONFLICT) => {}
            other => {
                other?;
            }
        }
    }
    Ok(())
}
