//! Tests of the `memlayer` binary as a process: help text, `serve` printing where it listens
//! and answering over HTTP, a clean exit on SIGTERM with the data kept for the next start,
//! refusing a data directory another server holds or a damaged store file, `memlayer check`
//! on a damaged vector snapshot, naming a bad key
//! in a config file, the admin key (configured, or generated and printed once),
//! `memlayer keys`, and `memlayer mcp` driven by an MCP client over stdio.
//! Every child process sits in a guard that kills it if the test fails.

mod process;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use process::*;

fn store_file(data_dir: &Path) -> PathBuf {
    data_dir.join("memlayer.redb")
}

#[test]
fn help_describes_the_commands_and_their_flags() {
    let output = memlayer(&["--help"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("serve"), "{help}");
    // Every command's --help shows how it is used, in examples.
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a Commands section")
        .lines()
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .collect();
    assert!(commands.len() >= 12, "{commands:?}");
    for command in commands {
        let output = memlayer(&[command, "--help"]).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let help = String::from_utf8(output.stdout).unwrap();
        assert!(
            help.contains("Example"),
            "`{command} --help` shows no example:\n{help}"
        );
    }

    let output = memlayer(&["serve", "--help"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--listen",
        "--data-dir",
        "--config",
        "--max-body-bytes",
        "--token-encoding",
        "MEMLAYER_LISTEN",
        "MEMLAYER_DATA_DIR",
    ] {
        assert!(
            help.contains(flag),
            "`serve --help` does not mention {flag}:\n{help}"
        );
    }

    let output = memlayer(&["--version"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let version = String::from_utf8(output.stdout).unwrap();
    // The commit of the checkout the tests run in (they run where they were built).
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map_or("unknown".to_owned(), |output| {
            String::from_utf8(output.stdout).unwrap().trim().to_owned()
        });
    assert_eq!(
        version.trim(),
        format!("memlayer {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );

    // Usage mistakes exit with clap's usage status, 2, and say what is wrong.
    let output = memlayer(&[]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = memlayer(&["serve", "--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let message = String::from_utf8(output.stderr).unwrap();
    assert!(message.contains("--listen"), "{message}");
}

#[test]
fn serve_answers_then_exits_cleanly_on_sigterm_and_keeps_its_data() {
    let temp = tempfile::tempdir().unwrap();
    // A directory that does not exist yet: serve creates it.
    let data_dir = temp.path().join("nested").join("data");
    let (mut server, url) = Process::serve(&data_dir);
    let data_line = server.wait_for_line("memlayer data in ");
    assert_eq!(
        data_line,
        format!("memlayer data in {}", store_file(&data_dir).display())
    );

    assert_eq!(
        get(&format!("{url}/healthz")),
        (200, json!({ "status": "ok" }))
    );
    // Ready; a `warning` comes besides when this machine's disk is low on space.
    let (status, ready) = get(&format!("{url}/readyz"));
    assert_eq!(
        (status, &ready["status"]),
        (200, &json!("ready")),
        "{ready}"
    );
    let (status, answer) = post(
        &format!("{url}/v1/sessions/cli-1/messages"),
        &json!({
            "role": "user",
            "content": "remember me",
            "user_id": "alice",
            "agent_id": "helper",
        }),
    );
    assert_eq!(
        (status, answer),
        (
            201,
            json!({
                "session_id": "cli-1",
                "indices": [0],
                "created_session": true,
                "replayed": false,
            })
        )
    );

    server.terminate();
    let (status, stdout) = server.wait_for_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "stdout: {stdout:?}; stderr: {}",
        server.stderr()
    );
    assert!(
        stdout
            .iter()
            .any(|line| line.starts_with("memlayer stopped")),
        "{stdout:?}"
    );
    assert!(store_file(&data_dir).is_file());
    assert!(
        data_dir.join("memlayer.redb.closed").is_file(),
        "a clean stop stamps the file"
    );

    // Started again on the same directory, it has the message, and the file it closed
    // cleanly opened without a walk of every page.
    let (mut server, url) = Process::serve(&data_dir);
    let (status, session) = get(&format!("{url}/v1/sessions/cli-1"));
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["message_count"], 1);
    assert_eq!(session["state"], "incomplete_turn");
    assert_eq!(
        (
            &session["messages"][0]["index"],
            &session["messages"][0]["role"],
            &session["messages"][0]["content"]
        ),
        (&json!(0), &json!("user"), &json!("remember me"))
    );
    server.terminate();
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0), "stderr: {stderr}");
    assert!(
        stderr.contains("unchanged since its clean close"),
        "{stderr}"
    );
}

#[test]
fn a_second_server_on_the_same_data_dir_fails_fast_naming_the_store() {
    let temp = tempfile::tempdir().unwrap();
    let (mut first, url) = Process::serve(temp.path());

    let started = Instant::now();
    let mut second = Process::spawn(memlayer(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        temp.path().to_str().unwrap(),
    ]));
    let (status, stderr) = second.wait_for_failure();
    assert!(
        !status.success(),
        "the second server must not start: {status}"
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?} to fail",
        started.elapsed()
    );
    let store = store_file(temp.path());
    assert!(
        stderr.contains(&store.display().to_string()),
        "the error does not name {}: {stderr}",
        store.display()
    );
    assert!(
        !second
            .stdout_seen
            .iter()
            .any(|line| line.starts_with(LISTENING)),
        "{:?}",
        second.stdout_seen
    );

    // The first server is unaffected.
    let (status, ready) = get(&format!("{url}/readyz"));
    assert_eq!(
        (status, &ready["status"]),
        (200, &json!("ready")),
        "{ready}"
    );
    first.terminate();
    let (status, _) = first.wait_for_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", first.stderr());
}

/// A store file after a crash opens; a truncated or altered one: `serve` refuses to start (exit 1, nothing listening),
/// names the file and says what to do, and leaves the file as it found it.
#[test]
fn a_damaged_store_file_stops_the_start_naming_the_file() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve(temp.path());
    let body = json!({
        "role": "user",
        "content": "canary-store-bytes",
        "user_id": "canary-user-bytes",
        "agent_id": "a",
    });
    assert_eq!(post(&format!("{url}/v1/sessions/s/messages"), &body).0, 201);
    // A crash is not damage: after SIGKILL the file opens, every page verified (a crash
    // leaves no stamp of a clean close), and the acknowledged append is there.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let (mut server, url) = Process::serve(temp.path());
    let (status, session) = get(&format!("{url}/v1/sessions/s"));
    assert_eq!(
        (status, &session["messages"][0]["content"]),
        (200, &json!("canary-store-bytes"))
    );
    server.terminate();
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0));
    assert!(stderr.contains("every page verified"), "{stderr}");

    let store = store_file(temp.path());
    let intact = std::fs::read(&store).unwrap();
    // The content is stored sealed; the owner's id is plain.
    let marker = intact
        .windows(b"canary-user-bytes".len())
        .position(|window| window == b"canary-user-bytes")
        .expect("the session's owner is in the file");
    let mut altered = intact.clone();
    altered[marker] ^= 0x20;
    for (damage, bytes) in [
        ("truncated", intact[..intact.len() / 2].to_vec()),
        ("altered", altered),
    ] {
        std::fs::write(&store, &bytes).unwrap();
        let mut process = Process::spawn(memlayer(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            temp.path().to_str().unwrap(),
        ]));
        let (status, stderr) = process.wait_for_failure();
        assert_eq!(status.code(), Some(1), "{damage}: {stderr}");
        for expected in [store.display().to_string().as_str(), "damaged", "backup"] {
            assert!(
                stderr.contains(expected),
                "{damage}: no {expected:?} in {stderr}"
            );
        }
        assert!(
            !process
                .stdout_seen
                .iter()
                .any(|line| line.starts_with(LISTENING)),
            "{damage}: {:?}",
            process.stdout_seen
        );
        assert!(
            std::fs::read(&store).unwrap() == bytes,
            "{damage}: the file was changed"
        );
    }
}

#[test]
fn check_loads_the_vector_snapshot_and_fails_on_one_that_does_not_load() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve(temp.path());
    let body = json!({
        "role": "user",
        "content": "My bicycle is a blue one with a basket.",
        "user_id": "u",
        "agent_id": "a",
    });
    assert_eq!(post(&format!("{url}/v1/sessions/s/messages"), &body).0, 201);
    // A clean stop saves the snapshot.
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));
    let snapshot = temp.path().join("vectors.idx");
    let check = || {
        memlayer(&["check", "--data-dir", temp.path().to_str().unwrap()])
            .output()
            .unwrap()
    };
    let output = check();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout.contains(&format!(
            "vector snapshot {}: loaded as saved (its graph too, if it has one), every check passed",
            snapshot.display()
        )),
        "{stdout}"
    );

    let mut damaged = std::fs::read(&snapshot).unwrap();
    *damaged.last_mut().unwrap() ^= 1;
    std::fs::write(&snapshot, &damaged).unwrap();
    let output = check();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("unusable"), "{stdout}");
    assert!(
        stderr.contains("does not load") && stderr.contains("the store is intact"),
        "{stderr}"
    );
    // The index the check rebuilt matched the store all the same (the stop may have come
    // before the message was embedded).
    assert!(
        stdout.contains("0 missing, 0 orphaned, 0 unreachable"),
        "{stdout}"
    );
}

#[test]
fn a_config_file_with_an_unknown_key_fails_naming_the_key() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("memlayer.toml");
    std::fs::write(&config, "listne = \"127.0.0.1:0\"\n").unwrap();
    let data_dir = temp.path().join("data");
    let mut process = Process::spawn(memlayer(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]));
    let (status, stderr) = process.wait_for_failure();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("listne"),
        "the error does not name the key: {stderr}"
    );
    assert!(
        stderr.contains(&config.display().to_string()),
        "the error does not name the file: {stderr}"
    );
    assert!(
        !data_dir.exists(),
        "nothing is created before the settings are valid"
    );
}

#[test]
fn a_valid_config_file_is_used_and_flags_override_it() {
    let temp = tempfile::tempdir().unwrap();
    let from_file = temp.path().join("from-file");
    let from_flag = temp.path().join("from-flag");
    let config = temp.path().join("memlayer.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\nmax_body_bytes = 200\n",
            from_file.to_str().unwrap()
        ),
    )
    .unwrap();

    let mut server = Process::spawn(memlayer(&["serve", "--config", config.to_str().unwrap()]));
    let url = server.wait_for_listening();
    assert_eq!(
        server.wait_for_line("memlayer data in "),
        format!("memlayer data in {}", store_file(&from_file).display())
    );
    // The file's body limit applies.
    let (status, answer) = post(
        &format!("{url}/v1/sessions/cfg/messages"),
        &json!({ "role": "user", "content": "x".repeat(300), "user_id": "u", "agent_id": "a" }),
    );
    assert_eq!(
        (status, &answer["error"]["code"]),
        (413, &json!("payload_too_large"))
    );
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));

    let mut server = Process::spawn(memlayer(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        from_flag.to_str().unwrap(),
    ]));
    let url = server.wait_for_listening();
    assert_eq!(
        server.wait_for_line("memlayer data in "),
        format!("memlayer data in {}", store_file(&from_flag).display())
    );
    // Answering a request also means the signal handler is in place.
    assert_eq!(get(&format!("{url}/healthz")).0, 200);
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));
}

#[test]
fn without_a_configured_key_the_first_start_prints_an_admin_key_once() {
    let temp = tempfile::tempdir().unwrap();
    let unconfigured = |command: &mut Command| {
        command.env_remove("MEMLAYER_ADMIN_KEY");
    };
    let (mut server, url) = Process::serve_with(temp.path(), unconfigured);
    server.wait_for_line("memlayer data in ");
    let line = server.wait_for_line(ADMIN_KEY_LINE);
    let key = line[ADMIN_KEY_LINE.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert!(key.starts_with("mlk_"), "{line}");
    let sessions = format!("{url}/v1/sessions");
    let anonymous = reqwest::blocking::Client::new()
        .get(&sessions)
        .send()
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let answer = client_with_key(&key).get(&sessions).send().unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    server.terminate();
    let (status, stdout) = server.wait_for_exit();
    assert_eq!(status.code(), Some(0), "stderr: {}", server.stderr());
    assert_eq!(
        stdout
            .iter()
            .filter(|l| l.starts_with(ADMIN_KEY_LINE))
            .count(),
        1
    );

    // Not again: the key exists, and it still works.
    let (mut server, url) = Process::serve_with(temp.path(), unconfigured);
    let answer = client_with_key(&key)
        .get(format!("{url}/v1/sessions"))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    server.terminate();
    let (status, stdout) = server.wait_for_exit();
    assert_eq!(status.code(), Some(0));
    assert!(
        !stdout.iter().any(|l| l.starts_with(ADMIN_KEY_LINE)),
        "{stdout:?}"
    );
    assert!(
        !server.stderr().contains(&key),
        "the key is never logged: {}",
        server.stderr()
    );
}

#[test]
fn keys_are_managed_in_the_data_directory_while_the_server_is_stopped() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_str().unwrap();
    let output = memlayer(&["keys", "--help"]).output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(
        help.contains("memlayer serve") && help.contains("/v1/keys"),
        "{help}"
    );

    // Keys made before the first start; the configured admin key is added at the start.
    let output = memlayer(&[
        "keys",
        "create",
        "--data-dir",
        dir,
        "--tenant",
        "acme",
        "--role",
        "service",
        "--name",
        "bot",
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let service = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    assert!(service.starts_with("mlk_"), "{service}");
    let prefix = service.split('_').nth(1).unwrap().to_owned();

    let (mut server, url) = Process::serve(temp.path());
    let created = client_with_key(&service)
        .post(format!("{url}/v1/sessions/k1/messages"))
        .json(&json!({ "role": "user", "content": "hi", "user_id": "u", "agent_id": "a" }))
        .send()
        .unwrap();
    assert_eq!(created.status().as_u16(), 201);
    // While it runs, the store is the server's.
    let output = memlayer(&["keys", "list", "--data-dir", dir])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("memlayer serve"), "{stderr}");
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));

    let output = memlayer(&["keys", "list", "--data-dir", dir, "--tenant", "acme"])
        .output()
        .unwrap();
    let listing = String::from_utf8(output.stdout).unwrap();
    assert!(listing.starts_with("PREFIX"), "{listing}");
    assert!(
        listing.contains(&prefix) && listing.contains("active"),
        "{listing}"
    );
    assert!(
        !listing.contains(&service),
        "no secret in a listing: {listing}"
    );
    assert!(!listing.contains("config"), "only acme's keys: {listing}");

    let output = memlayer(&["keys", "revoke", "--data-dir", dir, &prefix])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let (mut server, url) = Process::serve(temp.path());
    let refused = client_with_key(&service)
        .get(format!("{url}/v1/sessions/k1"))
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert_eq!(
        get(&format!("{url}/v1/sessions/k1")).0,
        404,
        "the admin key acts in tenant default, where k1 is not"
    );
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));

    let output = memlayer(&["keys", "revoke", "--data-dir", dir, "nope"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let output = memlayer(&[
        "keys",
        "create",
        "--data-dir",
        dir,
        "--tenant",
        "acme",
        "--role",
        "user",
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(1), "a user key needs --user-id");
    // A tenant's key needs its tenant; the operator's has none.
    for (args, why) in [
        (&["--role", "service"][..], "--tenant"),
        (&["--role", "operator", "--tenant", "acme"][..], "no tenant"),
    ] {
        let output = memlayer(&[&["keys", "create", "--data-dir", dir][..], args].concat())
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains(why), "{args:?}: {stderr}");
    }
}

/// On PostgreSQL `memlayer keys` works beside running servers: an operator key made before
/// the first start, a tenant's key made while the server runs works at once, and its
/// revocation holds at the next request, without a restart.
#[test]
fn keys_on_postgres_work_beside_a_running_server() {
    let database = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(memlayer_postgres::test_cluster::database())
        .expect("a test database");
    let database_url = database.url();
    let keys = |args: &[&str]| {
        let output = memlayer(&[&["keys"][..], args].concat())
            .env("MEMLAYER_DATABASE_URL", &database_url)
            .output()
            .unwrap();
        assert!(output.status.success(), "keys {args:?}: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    };
    let operator = keys(&["create", "--role", "operator", "--name", "ops"]);
    assert!(operator.starts_with("mlk_"), "{operator}");

    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve_with(temp.path(), |command| {
        command.env("MEMLAYER_DATABASE_URL", &database_url);
    });
    let service = keys(&["create", "--tenant", "acme", "--role", "service"]);
    let prefix = service.split('_').nth(1).unwrap().to_owned();
    let appended = client_with_key(&service)
        .post(format!("{url}/v1/sessions/k1/messages"))
        .json(&json!({ "role": "user", "content": "hi", "user_id": "u", "agent_id": "a" }))
        .send()
        .unwrap();
    assert_eq!(appended.status().as_u16(), 201);
    let listing = keys(&["list", "--tenant", "acme"]);
    assert!(
        listing.contains(&prefix) && listing.contains("active") && !listing.contains(&service),
        "{listing}"
    );
    // The operator's key is the operator's: the backup route takes it (and answers that a
    // database is backed up by its own tools), where the admin key is forbidden.
    let backup = |key: &str| {
        client_with_key(key)
            .post(format!("{url}/v1/admin/backup"))
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!((backup(&operator), backup(ADMIN_KEY)), (501, 403));

    keys(&["revoke", &prefix]);
    let refused = client_with_key(&service)
        .get(format!("{url}/v1/sessions/k1"))
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    assert!(keys(&["list", "--tenant", "acme"]).contains("revoked"));
    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));
    assert!(
        !temp.path().join("memlayer.redb").exists(),
        "the keys are in the database, not in a store file"
    );
}

/// With `MEMLAYER_LOG_FORMAT=json` every log line is one JSON object a collector can parse,
/// with its level and message, and a message's content appears in none of them.
#[test]
fn json_logs_are_one_object_per_line_without_message_content() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve_with(temp.path(), |command| {
        command.env("MEMLAYER_LOG_FORMAT", "json");
    });
    let secret = "log-canary-7d41c2 my card is 4111 1111 1111 1111";
    let (status, answer) = post(
        &format!("{url}/v1/sessions/logs-1/messages"),
        &json!({ "role": "user", "content": secret, "user_id": "alice", "agent_id": "helper" }),
    );
    assert_eq!(status, 201, "{answer}");
    server.terminate();
    // Waits for the exit and for all of stderr, whatever the status.
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0), "{stderr}");

    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}"))
        })
        .collect();
    assert!(
        lines
            .iter()
            .any(|line| line["level"] == "INFO" && line["fields"]["message"] == "serving"),
        "{stderr}"
    );
    assert!(!stderr.contains("log-canary-7d41c2"), "{stderr}");
}

/// Text logs sent anywhere but a terminal (a pipe here, a file or a journal in production)
/// carry no colour codes, which would fill a log file with escape sequences.
#[test]
fn text_logs_off_a_terminal_carry_no_colour_codes() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, _) = Process::serve_with(temp.path(), |command| {
        command.env("MEMLAYER_LOG_FORMAT", "text");
    });
    server.terminate();
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("serving"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in {stderr:?}");
}

/// Below the configured share of free disk space the log warns, while the server is still
/// ready: here every disk is below 100%.
#[test]
fn low_free_disk_space_is_a_warning_in_the_log() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve_with(temp.path(), |command| {
        command.env("MEMLAYER_DISK_WARNING_FREE_PERCENT", "100");
    });
    let deadline = Instant::now() + TIMEOUT;
    while !server.stderr().contains("free disk space is low") {
        assert!(
            Instant::now() < deadline,
            "no warning in {}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, ready) = get(&format!("{url}/readyz"));
    assert_eq!(
        (status, &ready["status"]),
        (200, &json!("ready")),
        "{ready}"
    );
    assert!(ready["warning"].is_string(), "{ready}");
    server.terminate();
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

/// Every value a client chose or wrote in this test starts with this: ids, search queries,
/// message and memory texts. None may reach the log.
const CANARY: &str = "cnry";

/// Logs carry route templates and opaque ids, never what a client chose or wrote: the binary
/// runs with JSON logs at trace level through appends, a search, memories, a tool call over
/// MCP, answers of 4xx and
/// 5xx (a failed model whose error echoes the message, an overloaded search), OpenAI-style
/// chat completions named by headers, the end of a conversation and the erasure of the user;
/// no canary value is anywhere on its stderr.
#[test]
fn logs_carry_no_ids_queries_or_texts_of_clients() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(memlayer_llm::FakeUpstream::start());
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("memlayer.toml");
    std::fs::write(
        &config,
        format!(
            "max_in_flight = 1\n[agent_model]\nbase_url = {:?}\nmodel = \"fake-model\"\n",
            upstream.base_url()
        ),
    )
    .unwrap();
    let (mut server, url) = Process::serve_with(&temp.path().join("data"), |command| {
        command
            .args(["--config", config.to_str().unwrap()])
            .env("MEMLAYER_LOG_FORMAT", "json")
            .env("RUST_LOG", "trace");
    });
    let (user, session, agent) = ("cnry-user-51", "cnry-sess-72", "cnry-agent-33");
    let say = json!({ "user_id": user, "agent_id": agent, "role": "user",
        "content": "cnry message: my card is 4111 1111 1111 1111" });
    assert_eq!(
        post(&format!("{url}/v1/sessions/{session}/messages"), &say).0,
        201
    );
    assert_eq!(
        get(&format!("{url}/v1/sessions/{session}/search?q=cnryquery94")).0,
        200
    );
    let memory = json!({ "text": "cnry memory: allergic to peanuts", "type": "fact" });
    assert_eq!(
        post(&format!("{url}/v1/users/{user}/memories"), &memory).0,
        201
    );
    // The memory tools over MCP: the SDK behind the route logs the messages at debug level.
    let recall = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "memory_recall", "arguments": { "query": "cnry tool query" } } });
    let mcp = client()
        .post(format!("{url}/v1/sessions/{session}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .json(&recall)
        .send()
        .unwrap();
    assert_eq!(mcp.status().as_u16(), 200);
    // 4xx: an unknown session, an invalid memory, another tenant named in the header.
    assert_eq!(get(&format!("{url}/v1/sessions/cnry-missing-8")).0, 404);
    let invalid = json!({ "text": "cnry memory two", "type": "cnry-kind" });
    assert!(post(&format!("{url}/v1/users/{user}/memories"), &invalid).0 >= 400);
    let other_tenant = client()
        .get(format!("{url}/v1/sessions"))
        .header("x-memlayer-tenant", "cnry-tenant")
        .send()
        .unwrap();
    assert_eq!(other_tenant.status().as_u16(), 404);
    // 5xx: the model fails, and its error echoes what it was sent.
    upstream.push(memlayer_llm::Reply::error(
        500,
        "cannot answer 'cnry question for the model'",
        "server_error",
        None,
    ));
    let question = json!({ "user_id": user, "session_id": session,
        "message": "cnry question for the model" });
    assert_eq!(
        post(&format!("{url}/v1/agents/{agent}/runs"), &question).0,
        502
    );
    // 5xx: a search over the in-flight limit of one, while a run waits for the model.
    upstream.push(memlayer_llm::Reply::text("cnry answer").after(Duration::from_secs(2)));
    let waiting = std::thread::spawn({
        let url = url.clone();
        move || post(&format!("{url}/v1/agents/{agent}/runs"), &question).0
    });
    let deadline = Instant::now() + TIMEOUT;
    while upstream.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the run did not reach the model");
        std::thread::sleep(Duration::from_millis(20));
    }
    let overloaded = client()
        .get(format!("{url}/v1/sessions/{session}/search?q=cnryquery95"))
        .send()
        .unwrap();
    assert_eq!(overloaded.status().as_u16(), 503);
    assert_eq!(waiting.join().unwrap(), 200);
    // The OpenAI-compatible endpoint: the conversation named in headers, a streamed answer,
    // and a failed model whose error echoes the question.
    let chat = |body: Value| {
        client()
            .post(format!("{url}/v1/openai/chat/completions"))
            .header("x-memlayer-user", user)
            .header("x-memlayer-agent", agent)
            .header("x-memlayer-session", session)
            .json(&body)
            .send()
            .unwrap()
    };
    upstream.push(memlayer_llm::Reply::text("cnry streamed answer"));
    let streamed = chat(json!({ "model": "cnry-model", "stream": true, "messages": [
        { "role": "system", "content": "cnry instructions" },
        { "role": "user", "content": "cnry chat question" }] }));
    assert_eq!(streamed.status().as_u16(), 200);
    assert!(streamed.text().unwrap().ends_with("data: [DONE]\n\n"));
    upstream.push(memlayer_llm::Reply::error(
        500,
        "cannot answer 'cnry chat question two'",
        "server_error",
        None,
    ));
    let failed = chat(json!({ "model": "cnry-model",
        "messages": [{ "role": "user", "content": "cnry chat question two" }] }));
    assert_eq!(failed.status().as_u16(), 502);
    assert_eq!(
        post(&format!("{url}/v1/sessions/{session}/end"), &json!({})).0,
        202
    );
    let erased = client()
        .delete(format!("{url}/v1/users/{user}"))
        .send()
        .unwrap();
    assert!(erased.status().is_success(), "{erased:?}");
    server.terminate();
    let (status, stderr) = server.wait_for_failure();
    assert_eq!(status.code(), Some(0), "{stderr}");

    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}"))
        })
        .collect();
    let leaks: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(CANARY))
        .collect();
    assert!(
        leaks.is_empty(),
        "client values in the log:\n{}",
        leaks.join("\n")
    );
    assert!(
        !server.stdout_seen.iter().any(|line| line.contains(CANARY)),
        "{:?}",
        server.stdout_seen
    );
    // What the log does say: the route template and the method of each request.
    assert!(
        lines
            .iter()
            .any(|line| line["span"]["route"] == "/v1/users/{user_id}"
                && line["span"]["method"] == "DELETE"),
        "no line names the erasure's route:\n{stderr}"
    );
}

/// `memlayer` with `args` against the server at `url`, with `key` in `MEMLAYER_KEY`; answers
/// whether it succeeded, its stdout and its stderr.
fn remote(url: &str, key: &str, args: &[&str]) -> (bool, String, String) {
    let output = memlayer(args)
        .env("MEMLAYER_URL", url)
        .env("MEMLAYER_KEY", key)
        .output()
        .expect("run memlayer");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The operator commands against a running server: stats, a backup taken while it serves
/// (which a new server then serves from) with the operator's key — which no tenant's key,
/// not even the admin key, may take — and purge, which refuses to erase everything without
/// the typed confirmation.
#[test]
fn stats_backup_and_purge_work_against_a_running_server() {
    let temp = tempfile::tempdir().unwrap();
    let live = temp.path().join("live");
    // The operator's key is made on the data directory before the start (the server holds
    // the store file while it runs); no API creates one.
    let output = memlayer(&[
        "keys",
        "create",
        "--data-dir",
        live.to_str().unwrap(),
        "--role",
        "operator",
        "--name",
        "backups",
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    let operator = String::from_utf8(output.stdout).unwrap().trim().to_owned();
    let described = String::from_utf8(output.stderr).unwrap();
    assert!(described.contains("role operator"), "{described}");
    let (mut server, url) = Process::serve(&live);
    for session in ["ops-1", "ops-2"] {
        let (status, answer) = post(
            &format!("{url}/v1/sessions/{session}/messages"),
            &json!({ "role": "user", "content": "backed up text", "user_id": "u", "agent_id": "a" }),
        );
        assert_eq!(status, 201, "{answer}");
    }

    let (ok, stdout, stderr) = remote(&url, ADMIN_KEY, &["stats"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("project default: 2 conversation(s)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("MiB free of") && stdout.contains("the store takes"),
        "no disk figures in {stdout}"
    );
    let (ok, _, stderr) = remote(&url, "mlk_0000000000000000_wrong", &["stats"]);
    assert!(
        !ok && stderr.contains("401 Unauthorized unauthorized"),
        "{stderr}"
    );

    let backup = temp.path().join("backup.redb");
    let out = ["backup", "--out", backup.to_str().unwrap()];
    // The admin key is a tenant's key (tenant_admin of "default"): a backup holds every
    // tenant's data, and it is refused before anything is written.
    let (ok, _, stderr) = remote(&url, ADMIN_KEY, &out);
    assert!(
        !ok && stderr.contains("403 Forbidden forbidden"),
        "{stderr}"
    );
    assert!(stderr.contains("operator key"), "{stderr}");
    assert!(!backup.exists());
    // The operator's key takes the backup and nothing of a tenant.
    let (ok, _, stderr) = remote(&url, &operator, &["stats"]);
    assert!(
        !ok && stderr.contains("403 Forbidden forbidden"),
        "{stderr}"
    );
    let (ok, stdout, stderr) = remote(&url, &operator, &out);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("checksums verified"), "{stdout}");
    let (ok, _, stderr) = remote(&url, &operator, &out);
    assert!(!ok && stderr.contains("never overwrites"), "{stderr}");

    let (ok, _, stderr) = remote(&url, ADMIN_KEY, &["purge", "--older-than-days", "0"]);
    assert!(!ok && stderr.contains("DELETE ALL"), "{stderr}");
    assert_eq!(
        get(&format!("{url}/v1/sessions/ops-1")).0,
        200,
        "nothing erased"
    );
    let (ok, stdout, stderr) = remote(
        &url,
        ADMIN_KEY,
        &["purge", "--older-than-days", "0", "--confirm", "DELETE ALL"],
    );
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("erased 2 conversation(s), 2 message(s)"),
        "{stdout}"
    );
    assert_eq!(get(&format!("{url}/v1/sessions/ops-1")).0, 404);
    server.terminate();
    server.wait_for_exit();

    // Restored: the backup is the store of a new data directory.
    let restored = temp.path().join("restored");
    std::fs::create_dir(&restored).unwrap();
    std::fs::copy(&backup, store_file(&restored)).unwrap();
    let (mut server, url) = Process::serve(&restored);
    let (status, session) = get(&format!("{url}/v1/sessions/ops-2"));
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["messages"][0]["content"], "backed up text");
    server.terminate();
    server.wait_for_exit();
}

/// What a server holds for the export test's users, without what the importing server sets
/// itself: ids and times of memories and episodes, and when sessions and runs were stored.
fn holdings(url: &str) -> Value {
    let mut sessions = Vec::new();
    for id in ["move-1", "move-2"] {
        let (_, mut session) = get(&format!("{url}/v1/sessions/{id}"));
        let (_, mut runs) = get(&format!("{url}/v1/sessions/{id}/runs"));
        for run in runs.as_array_mut().unwrap() {
            run.as_object_mut().unwrap().remove("created_at");
        }
        session["runs"] = runs;
        // Set by the server that stores the session; message times travel.
        session.as_object_mut().unwrap().remove("updated_at");
        session.as_object_mut().unwrap().remove("created_at");
        sessions.push(session);
    }
    let (_, memories) = get(&format!("{url}/v1/users/ann/memories"));
    let memories: Vec<Value> = memories["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!([m["text"], m["type"], m["tags"], m["agent_id"], m["source"]]))
        .collect();
    let (_, episodes) = get(&format!("{url}/v1/users/ann/episodes"));
    let episodes: Vec<Value> = episodes["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            json!([
                e["task_type"],
                e["lesson"],
                e["outcome"],
                e["source_session_id"]
            ])
        })
        .collect();
    json!({ "sessions": sessions, "memories": memories, "episodes": episodes })
}

/// A tenant exported from one server and imported into another holds the same sessions
/// (messages with their times, a clear at the same message, runs), memories and episodes;
/// importing the same file again changes nothing.
#[test]
fn export_then_import_moves_a_tenant_and_a_second_import_changes_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let (mut source, from) = Process::serve(&temp.path().join("source"));
    for (session, user) in [("move-1", "ann"), ("move-2", "bob")] {
        let body = json!({ "user_id": user, "agent_id": "helper", "flow_id": "checkout",
            "session_metadata": { "channel": "web" },
            "messages": [
                { "role": "user", "content": format!("{session}: first"), "timestamp": "2026-01-02T03:04:05.000006Z" },
                { "role": "assistant", "content": "noted", "metadata": { "model": "m" } },
                { "role": "user", "content": "and a second question" },
            ] });
        assert_eq!(
            post(&format!("{from}/v1/sessions/{session}/messages"), &body).0,
            201
        );
    }
    assert_eq!(
        post(&format!("{from}/v1/sessions/move-1/clear"), &json!({})).0,
        200
    );
    let after_clear = json!({ "role": "assistant", "content": "after the clear" });
    assert_eq!(
        post(&format!("{from}/v1/sessions/move-1/messages"), &after_clear).0,
        201
    );
    let run = json!({ "run_id": "run-1", "status": "COMPLETED", "content": "noted" });
    assert_eq!(
        post(&format!("{from}/v1/sessions/move-1/runs"), &run).0,
        201
    );
    let memory = json!({ "text": "Ann prefers tea", "type": "preference", "tags": ["drinks"],
        "source": { "session_id": "move-1", "index": 0 } });
    assert_eq!(
        post(&format!("{from}/v1/users/ann/memories"), &memory).0,
        201
    );
    let episode = json!({ "task_type": "refund", "description": "a refund", "outcome": "failure",
        "lesson": "ask for the order id first", "source_session_id": "move-1" });
    assert_eq!(
        post(&format!("{from}/v1/users/ann/episodes"), &episode).0,
        201
    );
    let expected = holdings(&from);

    let file = temp.path().join("tenant.jsonl");
    let (ok, _, stderr) = remote(
        &from,
        ADMIN_KEY,
        &["export", "--out", file.to_str().unwrap()],
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains("exported 2 session(s)"), "{stderr}");
    source.terminate();
    source.wait_for_exit();

    let (mut target, to) = Process::serve(&temp.path().join("target"));
    for round in ["first", "second"] {
        let (ok, _, stderr) = remote(&to, ADMIN_KEY, &["import", "--in", file.to_str().unwrap()]);
        assert!(ok, "{round} import: {stderr}");
        assert_eq!(holdings(&to), expected, "after the {round} import");
    }
    target.terminate();
    target.wait_for_exit();
}

/// An export file is untrusted input: ids in it go into URLs percent-encoded, one path
/// segment or query value each, so a crafted id reaches the route it names an id of — where
/// the server refuses it — and never another route. The server's metrics show which routes
/// were asked.
#[test]
fn an_import_keeps_crafted_ids_inside_their_path_segment() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve(&temp.path().join("data"));
    let import = |name: &str, record: Value| {
        let file = temp.path().join(name);
        std::fs::write(&file, format!("{record}\n")).unwrap();
        let (ok, _, stderr) = remote(&url, ADMIN_KEY, &["import", "--in", file.to_str().unwrap()]);
        assert!(!ok, "the import of {record} succeeded");
        stderr
    };
    let session = |id: &str| {
        json!({ "kind": "session",
            "session": { "session_id": id, "user_id": "u", "agent_id": "a", "metadata": {} },
            "messages": [{ "role": "user", "content": "hi", "token_count": 1,
                "timestamp": "2026-01-02T03:04:05Z", "metadata": {} }], "runs": [] })
    };
    let stderr = import("up.jsonl", session("../../v1/keys"));
    assert!(
        stderr.contains("422") && stderr.contains("invalid_id"),
        "{stderr}"
    );
    let memories = json!({ "kind": "memories", "user_id": "eve?page=0#x%2F/../..",
        "memories": [{ "text": "t", "type": "fact", "tags": [], "agent_id": null }] });
    let stderr = import("query.jsonl", memories);
    assert!(
        stderr.contains("422") && stderr.contains("invalid_id"),
        "{stderr}"
    );
    // `.` and `..` cannot be a path segment at all (URL parsers remove them): refused here.
    let stderr = import("dots.jsonl", session(".."));
    assert!(stderr.contains("\"..\""), "{stderr}");

    let metrics = client()
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let mut requests: Vec<&str> = metrics
        .lines()
        .filter(|line| {
            line.starts_with("memlayer_http_requests_total{") && !line.contains("/metrics")
        })
        .collect();
    requests.sort_unstable();
    assert_eq!(
        requests,
        [
            "memlayer_http_requests_total{route=\"/v1/sessions/{session_id}/messages\",method=\"POST\",status=\"4xx\"} 1",
            "memlayer_http_requests_total{route=\"/v1/users/{user_id}/memories\",method=\"POST\",status=\"4xx\"} 1",
        ],
        "{metrics}"
    );
    server.terminate();
    server.wait_for_exit();
}

/// The operator's commands wait out a key's rate limit (`429` with `Retry-After`) instead of
/// failing: against a server that lets a key make three requests a second, an import and an
/// export of three sessions (a dozen requests) complete.
#[test]
fn import_and_export_wait_out_the_rate_limit() {
    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve_with(&temp.path().join("data"), |command| {
        command.args(["--rate-limit-per-second", "3", "--rate-limit-burst", "3"]);
    });
    let lines: Vec<String> = (1..=3)
        .map(|n| {
            json!({ "kind": "session",
                "session": { "session_id": format!("limited-{n}"), "user_id": "ann",
                    "agent_id": "a", "metadata": {} },
                "messages": [{ "role": "user", "content": "hi", "token_count": 1,
                    "timestamp": "2026-01-02T03:04:05Z", "metadata": {} }],
                "runs": [] })
            .to_string()
        })
        .collect();
    let file = temp.path().join("in.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (ok, _, stderr) = remote(&url, ADMIN_KEY, &["import", "--in", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let out = temp.path().join("out.jsonl");
    let (ok, _, stderr) = remote(&url, ADMIN_KEY, &["export", "--out", out.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("exported 3 session(s)"), "{stderr}");
    server.terminate();
    server.wait_for_exit();
}

/// `memlayer mcp` as an MCP host runs it: a child process speaking MCP on stdin and stdout,
/// driven by the official SDK's client, bridging to a running `memlayer serve`. Every tool
/// runs and its effect shows in the server's REST API.
#[test]
fn mcp_serves_the_agent_tools_on_stdio_through_the_running_server() {
    use rmcp::model::{CallToolRequestParams, CallToolResult};
    use rmcp::transport::TokioChildProcess;
    use rmcp::{RoleClient, ServiceExt, service::RunningService};

    let temp = tempfile::tempdir().unwrap();
    let (mut server, url) = Process::serve(temp.path());
    let (status, answer) = post(
        &format!("{url}/v1/sessions/desk-1/messages"),
        &json!({
            "user_id": "alice", "agent_id": "support", "role": "user",
            "content": "My parcel locker code is 4711",
        }),
    );
    assert_eq!(status, 201, "{answer}");
    let (_, rest) = get(&format!("{url}/v1/tools"));

    let bridge = |key: &str| {
        let mut command = memlayer(&["mcp", "--url", &url, "--session", "desk-1"]);
        command.env("MEMLAYER_KEY", key);
        TokioChildProcess::new(tokio::process::Command::from(command)).expect("start memlayer mcp")
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The child is spawned inside the runtime, which owns its pipes.
    let client: RunningService<RoleClient, ()> = runtime
        .block_on(async { ().serve(bridge(ADMIN_KEY)).await })
        .expect("the MCP handshake over stdio");
    assert_eq!(
        client.peer_info().unwrap().instructions.as_deref(),
        rest["system_instruction"].as_str()
    );
    let tools = runtime.block_on(client.list_all_tools()).unwrap();
    // What the bridge lists is what the server serves, schemas included.
    let served = rest["tools"].as_array().unwrap();
    assert_eq!(tools.len(), served.len());
    for (tool, served) in tools.iter().zip(served) {
        assert_eq!(served["function"]["name"], *tool.name);
        let schema = Value::Object(tool.input_schema.as_ref().clone());
        assert_eq!(served["function"]["parameters"], schema);
    }

    let call = |name: &'static str, arguments: Value| -> Value {
        let Value::Object(arguments) = arguments else {
            unreachable!("arguments are objects")
        };
        let result: CallToolResult = runtime
            .block_on(client.call_tool(CallToolRequestParams::new(name).with_arguments(arguments)))
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(result.is_error, Some(false), "{name}: {result:?}");
        result.structured_content.expect("a structured result")
    };
    let remembered = call(
        "memory_remember",
        json!({ "text": "Prefers green tea", "type": "preference" }),
    );
    let memory_id = remembered["memory"]["memory_id"].as_u64().unwrap();
    let recalled = call("memory_recall", json!({ "query": "green tea" }));
    assert_eq!(recalled["hits"][0]["memory_id"], memory_id, "{recalled}");
    let found = call("session_search", json!({ "query": "4711" }));
    assert_eq!(found["hits"][0]["index"], 0, "{found}");
    call("memory_forget", json!({ "memory_id": memory_id }));
    assert_eq!(get(&format!("{url}/v1/memories/{memory_id}")).0, 404);
    call("clear_session", json!({}));
    let (_, session) = get(&format!("{url}/v1/sessions/desk-1"));
    assert_eq!(session["load_from"], 1, "{session}");
    runtime.block_on(client.cancel()).unwrap();

    // A key the server refuses stops the bridge at once, saying why.
    let mut command = memlayer(&["mcp", "--url", &url, "--session", "desk-1"]);
    command.env(
        "MEMLAYER_KEY",
        format!("mlk_0123456789abcdef_{}", "0".repeat(64)),
    );
    let mut refused = Process::spawn(command);
    let (status, stderr) = refused.wait_for_failure();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot connect to"), "{stderr}");

    server.terminate();
    assert_eq!(server.wait_for_exit().0.code(), Some(0));
}
