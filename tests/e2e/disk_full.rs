//! A full disk as an operator meets it: the server's data directory on a small tmpfs, filled
//! by appends until the disk refuses them, `/readyz` warning before it is full. Appends then
//! answer `507 storage_full` with `Retry-After`, reads, contexts (their summary unsaved) and
//! recall go on, an erasure is refused with the same clear error; once the tmpfs is grown,
//! writes resume without a restart, and every acknowledged append is stored exactly once. An
//! erasure the full disk interrupts after it was recorded finishes by itself once space is
//! freed; a store that cannot be reopened stops the server with an error. Mounting needs
//! root (CI runs the tests as root); where it is not allowed, or the records are in PostgreSQL
//! (`MEMLAYER_E2E_BACKEND=postgres`), each test says so on stderr and passes without checking
//! anything.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use memlayer_server::ServerConfig;
use memlayer_tests::{TestServer, assert_error, config, json, send_with_headers};
use reqwest::Method;
use serde_json::Value;

/// Large enough for a fresh store and some megabytes of messages, small enough to fill in
/// seconds.
const SMALL: &str = "8m";
/// What the tmpfs grows to once it is "freed".
const LARGER: &str = "64m";
/// Content of each append: large, so that the disk fills after some hundred appends.
const FILLER_BYTES: usize = 32 * 1024;
/// Longest the store may take to notice that the disk takes writes again.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A tmpfs mounted on a temporary directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size`; `None` (with the reason on stderr) where that is not allowed.
    fn mount(size: &str) -> Option<Self> {
        if memlayer_tests::on_postgres() {
            // The records are the database server's to keep, on its disk; its failures are
            // `memlayer-server tests::a_failing_database_and_a_file_only_operation_answer_typed_errors`.
            eprintln!("SKIPPED: the store is in PostgreSQL, not in the data directory");
            return None;
        }
        let dir = tempfile::tempdir().expect("create a mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Self { dir }),
            Ok(output) => {
                eprintln!(
                    "SKIPPED: cannot mount a tmpfs here (it needs root): {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                None
            }
            Err(err) => {
                eprintln!("SKIPPED: cannot run mount(8): {err}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Grows (or shrinks) the file system to `size`: how space is freed here.
    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .expect("run mount(8)");
        assert!(status.success(), "remounting the tmpfs failed: {status}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// The content of the `n`-th append, found again by its prefix.
fn content(n: usize) -> String {
    let prefix = format!("fill-{n:05} ");
    let filler = "lorem ipsum dolor sit amet ".repeat(FILLER_BYTES / 27);
    prefix + &filler
}

/// Appends the `n`-th message with its own idempotency key; answers the status, body and
/// `Retry-After`.
fn append(server: &TestServer, n: usize) -> (u16, Value, Option<String>) {
    let (status, headers, body) = send_with_headers(
        server
            .request(Method::POST, "/v1/sessions/fill/messages")
            .header("Idempotency-Key", format!("fill-{n}"))
            .json(
                &json!({ "user_id": "alice", "agent_id": "filler", "role": "user",
                "content": content(n) }),
            ),
    );
    let retry_after = headers
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    (status, body, retry_after)
}

/// The number at the start of every stored message of the session, in index order.
fn stored(server: &TestServer) -> Vec<usize> {
    let mut numbers = Vec::new();
    let mut from = 0;
    loop {
        let (status, page) = server.get(&format!(
            "/v1/sessions/fill/messages?from={from}&limit=1000"
        ));
        assert_eq!(status, 200, "{page}");
        for message in page["messages"].as_array().unwrap() {
            assert_eq!(message["index"], json!(numbers.len()), "gapless, in order");
            let text = message["content"].as_str().unwrap();
            let number = text[5..10].parse().unwrap();
            numbers.push(number);
        }
        match page["next_from"].as_u64() {
            Some(next) => from = usize::try_from(next).unwrap(),
            None => return numbers,
        }
    }
}

/// Appends until the disk is full; answers how many appends were acknowledged, after
/// checking that `/readyz` warned of low space (still ready) before the disk was full and
/// that the append refused answered `507 storage_full` with `Retry-After`.
fn fill(server: &TestServer) -> usize {
    let mut acknowledged = 0;
    let mut warned = false;
    let (refused, retry_after) = loop {
        assert!(acknowledged < 10_000, "the tmpfs never filled up");
        if acknowledged % 8 == 0 {
            let (status, ready) = server.get("/readyz");
            assert_eq!(status, 200, "{ready}");
            warned |= ready["warning"].is_string();
        }
        let (status, body, retry_after) = append(server, acknowledged);
        if status != 201 {
            break ((status, body), retry_after);
        }
        acknowledged += 1;
    };
    assert!(acknowledged > 0, "not one append fitted");
    assert!(
        warned,
        "no warning of low disk space before the disk was full"
    );
    assert_error(&refused, 507, "storage_full");
    assert_eq!(retry_after.as_deref(), Some("5"));
    acknowledged
}

/// The server on a data directory inside `tmpfs`, warning when less than half of it is free.
fn serve_on(tmpfs: &Tmpfs) -> TestServer {
    let config = ServerConfig {
        disk_warning_free_percent: 50,
        ..config()
    };
    TestServer::with_config_in(config, tmpfs.path())
}

/// The `/metrics` line of the gauge `name`.
fn gauge(server: &TestServer, name: &str) -> String {
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200, "{metrics}");
    let text = metrics.as_str().expect("the metrics are text");
    text.lines()
        .find(|line| line.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .to_owned()
}

#[test]
fn a_full_disk_refuses_writes_clearly_and_writes_resume_once_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount(SMALL) else {
        return;
    };
    let server = serve_on(&tmpfs);
    // A conversation of a few turns, whose context will overflow into a summary.
    for turn in 0..6 {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        let (status, body) = server.post(
            "/v1/sessions/talk/messages",
            &json!({ "user_id": "alice", "agent_id": "filler", "role": role,
                "content": format!("turn {turn}: {}", "plans for the weekend trip ".repeat(60)) }),
        );
        assert_eq!(status, 201, "{body}");
    }
    let acknowledged = fill(&server);
    assert_eq!(
        gauge(&server, "memlayer_store_writes_refused"),
        "memlayer_store_writes_refused 1"
    );
    // Later writes are refused the same way, before they begin.
    let (status, body, retry_after) = append(&server, acknowledged + 1);
    assert_error(&(status, body), 507, "storage_full");
    assert_eq!(retry_after.as_deref(), Some("5"));
    assert_error(&server.get("/readyz"), 507, "storage_full");
    // An erasure cannot even be recorded: refused with the same clear error, not dropped.
    assert_error(
        &server.delete("/v1/sessions/fill/messages/0"),
        507,
        "storage_full",
    );

    // Reads go on from what is stored: the session, a context, a recall.
    let (status, session) = server.get("/v1/sessions/fill");
    assert_eq!(status, 200, "{session}");
    let count = session["message_count"].as_u64().unwrap();
    // The refused append may have been stored if the disk filled during its commit.
    assert!(
        count == acknowledged as u64 || count == acknowledged as u64 + 1,
        "{count} stored, {acknowledged} acknowledged"
    );
    // Older turns overflow into a summary, which serves this context unsaved.
    let (status, context) = server.post(
        "/v1/sessions/talk/context",
        &json!({ "query": "the trip",
            "settings": { "context_window": 1024, "overflow": "summarize" } }),
    );
    assert_eq!(status, 200, "{context}");
    assert_eq!(
        context["summary_written"]["written"],
        json!(false),
        "{context}"
    );
    let (status, recall) = server.post(
        "/v1/recall",
        &json!({ "user_id": "alice", "query": "lorem ipsum" }),
    );
    assert_eq!(status, 200, "{recall}");

    // Space is freed: writes resume by themselves, without a restart.
    tmpfs.resize(LARGER);
    let deadline = Instant::now() + RECOVERY_TIMEOUT;
    while server.get("/readyz").0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready {RECOVERY_TIMEOUT:?} after space was freed: {:?}",
            server.get("/readyz")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        gauge(&server, "memlayer_store_writes_refused"),
        "memlayer_store_writes_refused 0"
    );
    let free = gauge(&server, "memlayer_disk_free_bytes");
    let free: u64 = free.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(free > 32 << 20, "{free} bytes free after growing the tmpfs");
    // The refused append, retried with its key, is stored once (replayed if its commit made
    // it after all); then new ones.
    let (status, body, _) = append(&server, acknowledged);
    assert!(status == 201 || status == 200, "{status} {body}");
    for n in acknowledged + 1..acknowledged + 4 {
        let (status, body, _) = append(&server, n);
        assert_eq!(status, 201, "{body}");
    }
    let expected: Vec<usize> = (0..acknowledged + 4).collect();
    assert_eq!(stored(&server), expected);
    // The erasure refused while the disk was full goes through now.
    let (status, receipt) = server.delete("/v1/sessions/fill/messages/0");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["messages"], json!(1), "{receipt}");
    let (status, page) = server.get("/v1/sessions/fill/messages?from=0&limit=1");
    assert_eq!(status, 200, "{page}");
    assert_ne!(page["messages"][0]["index"], json!(0), "{page}");
}

/// When the disk takes writes again but the store cannot be reopened (here its file was
/// removed meanwhile), waiting would not help: the server stops by itself with an error,
/// which makes the binary exit non-zero for a supervisor to restart it.
#[test]
fn a_store_that_cannot_be_reopened_stops_the_server_with_an_error() {
    let Some(tmpfs) = Tmpfs::mount(SMALL) else {
        return;
    };
    let mut server = serve_on(&tmpfs);
    fill(&server);
    std::fs::remove_file(server.store_path()).expect("remove the store file");
    tmpfs.resize(LARGER);
    let stopped = server
        .wait_for_stop(RECOVERY_TIMEOUT)
        .expect_err("the server stops with an error");
    assert!(
        stopped.to_string().contains("could not be reopened"),
        "{stopped}"
    );
}

/// Fills what is left of `dir`'s file system with a file, as another program would; answers
/// its path, whose removal frees the space.
fn ballast(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut file = std::fs::File::create(&path).expect("create the ballast");
    let chunk = vec![0xa5; 64 * 1024];
    while file.write_all(&chunk).is_ok() {}
    // The last partial chunk, byte by byte, so that nothing is left.
    while file.write_all(&[0xa5]).is_ok() {}
    path
}

/// An erasure asked for once the disk is full, before the store has met a failed write:
/// whatever step the disk stops, it is refused before it is recorded (`507` without an id:
/// asking again works once space is freed), or recorded and interrupted (`507` with its
/// `erasure_id`), and then it finishes by itself once space is freed. Nothing is silently
/// dropped, and the erased text is gone from the store file in the end.
#[test]
fn an_erasure_the_full_disk_interrupts_finishes_once_space_is_freed() {
    let Some(tmpfs) = Tmpfs::mount(SMALL) else {
        return;
    };
    let server = serve_on(&tmpfs);
    for n in 0..3 {
        let (status, body, _) = append(&server, n);
        assert_eq!(status, 201, "{body}");
    }
    let ballast = ballast(tmpfs.path());
    let (status, answer) = server.delete("/v1/sessions/fill/messages/1");
    let pending = match status {
        // Done before the disk was needed (pages the store had free sufficed).
        200 => None,
        507 => {
            assert_eq!(answer["error"]["code"], "storage_full", "{answer}");
            answer["error"]["erasure_id"].as_u64()
        }
        _ => panic!("the erasure answered {status}: {answer}"),
    };
    std::fs::remove_file(ballast).expect("free the space");
    let deadline = Instant::now() + RECOVERY_TIMEOUT;
    if let Some(id) = pending {
        // Finished by itself once writes resume: its receipt appears.
        loop {
            let (status, receipt) = server.get(&format!("/v1/admin/erasures/{id}"));
            if status == 200 {
                assert_eq!(receipt["counts"]["messages"], json!(1), "{receipt}");
                break;
            }
            assert_eq!(status, 202, "{receipt}");
            assert!(Instant::now() < deadline, "erasure {id} never finished");
            std::thread::sleep(Duration::from_millis(100));
        }
    } else if status == 507 {
        // Refused before it was recorded: asked again once writes resume, it is done.
        while server.get("/readyz").0 != 200 {
            assert!(Instant::now() < deadline, "not ready after space was freed");
            std::thread::sleep(Duration::from_millis(100));
        }
        let (status, receipt) = server.delete("/v1/sessions/fill/messages/1");
        assert_eq!(status, 200, "{receipt}");
    }
    let (status, page) = server.get("/v1/sessions/fill/messages");
    assert_eq!(status, 200, "{page}");
    let indices: Vec<&Value> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| &message["index"])
        .collect();
    assert_eq!(indices, [&json!(0), &json!(2)], "{page}");
    let found = memlayer_erasure::scan_files(&[&server.store_path()], b"fill-00001")
        .expect("read the store file");
    assert!(found.is_empty(), "the erased message is still in the file");
}
