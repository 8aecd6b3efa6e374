//! `cargo xtask contract`: the API contract test. schemathesis and openapi-spec-validator,
//! installed from PyPI with every file pinned by hash (`xtask/contract/requirements.txt`) into
//! a virtual environment under the target directory, run against the real server (debug
//! build, empty data directory). First the served `/openapi.json` must validate as OpenAPI
//! 3.1; then schemathesis runs with `--checks all` for each role's key: every request the OpenAPI document allows must be
//! accepted, every one it rules out refused, every answer must match the document, and no
//! answer may be a server error. Any finding fails the step. Every run's settings start from
//! `xtask/contract/shared.toml` (413 counts as refusing an invalid request).
//!
//! The server is configured with `xtask/contract/upstream.py` as its `[agent_model]`, a
//! stand-in for the chat model an operator configures, so agent runs complete instead of
//! answering `503 model_not_configured`.
//!
//! The roles run in turn on one server: the user key (of user `alice`, with
//! `xtask/contract/user.toml` making the user ids of its paths, queries and chat header hers,
//! so its creations succeed and the stateful phase has links to follow), the service key, the
//! tenant admin key without `DELETE /v1/keys/{prefix}` (schemathesis would revoke the keys
//! under test, its own among them, as the API allows), then that operation alone with an
//! admin key of its own.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cmd;
use crate::metadata;
use crate::server::{Server, admin_client};

/// One schemathesis run: the role whose key it sends, which operations it covers, and the
/// settings file (in `xtask/contract`) it adds to the shared one, if any.
struct Run {
    role: &'static str,
    filter: &'static [&'static str],
    config: Option<&'static str>,
}

/// schemathesis's option that selects operations by id.
const INCLUDE: &str = "--include-operation-id";

const RUNS: [Run; 4] = [
    Run {
        role: "user",
        filter: &[],
        config: Some("user.toml"),
    },
    Run {
        role: "service",
        filter: &[],
        config: None,
    },
    Run {
        role: "tenant_admin",
        filter: &["--exclude-operation-id", "revoke_key"],
        config: None,
    },
    Run {
        role: "revoking tenant_admin",
        filter: &[INCLUDE, "revoke_key"],
        config: None,
    },
];

/// What to run: how many examples per operation and phase, and optionally one operation
/// alone (for working on it; CI runs them all).
pub(crate) struct Scope<'a> {
    pub(crate) examples: u32,
    pub(crate) operation: Option<&'a str>,
}

pub(crate) fn run(root: &Path, scope: &Scope) -> anyhow::Result<()> {
    let target = metadata::read(root)?.target_directory;
    let work = target.join("contract");
    std::fs::create_dir_all(&work)?;
    let dir = root.join("xtask").join("contract");
    let schemathesis = Schemathesis {
        python: crate::python::venv_with(&work.join("venv"), &dir.join("requirements.txt"))?,
        dir,
    };

    cmd::cargo(root, &["build", "-p", "memlayer"])?;
    let binary = target.join("debug").join("memlayer");
    let data = tempfile::Builder::new()
        .prefix("memlayer-contract-")
        .tempdir()
        .context("could not create the data directory")?;
    let upstream = Upstream::start(root)?;
    let config = data.path().join("memlayer.toml");
    std::fs::write(
        &config,
        format!(
            "[agent_model]\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"stand-in\"\n",
            upstream.port
        ),
    )?;
    let store = data.path().join("store");
    let config_path = config.to_str().context("the temporary path is not UTF-8")?;
    let server = Server::start_with(
        &binary,
        &store,
        &work.join("server.log"),
        Duration::from_secs(60),
        &[("MEMLAYER_CONFIG", config_path)],
    )?;
    let outcome = run_all(&schemathesis, &work, &server, scope);
    let stopped = server.stop();
    drop(upstream);
    outcome?;
    stopped
}

/// The installed schemathesis, run through `schemathesis_cli.py` (which says why), and
/// `xtask/contract`, which holds that script and the runs' settings files.
struct Schemathesis {
    python: PathBuf,
    dir: PathBuf,
}

/// The settings every run starts from, in `xtask/contract`.
const SHARED_SETTINGS: &str = "shared.toml";

impl Schemathesis {
    /// schemathesis with one run's settings: the shared ones and the run's own, merged into
    /// `work/<role>.toml` (schemathesis reads one settings file).
    fn command(&self, work: &Path, run: &Run) -> anyhow::Result<Command> {
        let read = |name: &str| -> anyhow::Result<toml::Table> {
            let path = self.dir.join(name);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("could not read {}", path.display()))?;
            text.parse()
                .with_context(|| format!("{} is not valid TOML", path.display()))
        };
        let mut settings = read(SHARED_SETTINGS)?;
        if let Some(own) = run.config {
            for (key, value) in read(own)? {
                if settings.contains_key(&key) {
                    bail!("{own} and {SHARED_SETTINGS} both set `{key}`");
                }
                settings.insert(key, value);
            }
        }
        let merged = work.join(format!("{}.toml", run.role.replace(' ', "_")));
        std::fs::write(&merged, toml::to_string(&settings)?)?;
        let mut command = Command::new(&self.python);
        command
            .arg(self.dir.join("schemathesis_cli.py"))
            .arg("--config-file")
            .arg(merged);
        Ok(command)
    }
}

fn run_all(
    schemathesis: &Schemathesis,
    work: &Path,
    server: &Server,
    scope: &Scope,
) -> anyhow::Result<()> {
    let base = format!("http://{}", server.addr());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = admin_client(Duration::from_secs(30))?;
    let document = runtime.block_on(async {
        let answer = client.get(format!("{base}/openapi.json")).send().await?;
        answer.error_for_status()?.bytes().await
    })?;
    validate_document(schemathesis, work, &document)?;
    let keys = runtime.block_on(create_keys(&client, &base))?;
    let mut failed = Vec::new();
    for (run, key) in RUNS.iter().zip(&keys) {
        // One operation runs with every key whose run covers it.
        let filter = match (scope.operation, run.filter) {
            (None, filter) => filter,
            (Some(operation), [INCLUDE, only]) if operation == *only => run.filter,
            (Some(_), [INCLUDE, _]) => continue,
            (Some(operation), [_, excluded]) if operation == *excluded => continue,
            (Some(operation), _) => &[INCLUDE, operation][..],
        };
        // The stateful phase follows links between operations, which one operation alone
        // does not have (schemathesis calls that an error).
        let phases: &[&str] = if filter.first() == Some(&INCLUDE) {
            &["--phases", "examples,coverage,fuzzing"]
        } else {
            &[]
        };
        let started = Instant::now();
        eprintln!("xtask: schemathesis with the {} key", run.role);
        let mut command = schemathesis.command(work, run)?;
        // schemathesis keeps its example database and reports in the working directory.
        command
            .current_dir(work)
            .arg("run")
            .arg(format!("{base}/openapi.json"))
            .args(["-H", &format!("Authorization: Bearer {key}")])
            .args(["--checks", "all", "--workers", "2"])
            .args(["--max-examples", &scope.examples.to_string()])
            .args(filter)
            .args(phases)
            .env("NO_COLOR", "1");
        let passed = command
            .status()
            .with_context(|| format!("could not start {}", schemathesis.python.display()))?
            .success();
        eprintln!(
            "xtask: schemathesis with the {} key {} in {:.0} s",
            run.role,
            if passed { "found nothing" } else { "FAILED" },
            started.elapsed().as_secs_f64()
        );
        if !passed {
            failed.push(run.role);
        }
    }
    if !failed.is_empty() {
        bail!(
            "schemathesis found failures with the {} keys (see above; the server log is {})",
            failed.join(", "),
            work.join("server.log").display()
        );
    }
    Ok(())
}

/// The served document must be valid OpenAPI 3.1, as openapi-spec-validator checks it (the
/// 3.1 schema, every `$ref` resolved, operation ids unique, path parameters declared), before
/// schemathesis trusts it.
fn validate_document(
    schemathesis: &Schemathesis,
    work: &Path,
    document: &[u8],
) -> anyhow::Result<()> {
    let saved = work.join("openapi.json");
    std::fs::write(&saved, document)?;
    let mut command = Command::new(&schemathesis.python);
    command
        .args(["-m", "openapi_spec_validator", "--schema", "3.1"])
        .args(["--validation-errors", "all"])
        .arg(&saved);
    cmd::run(command).context("/openapi.json is not valid OpenAPI 3.1")?;
    eprintln!("xtask: /openapi.json is valid OpenAPI 3.1");
    Ok(())
}

/// A key for each run, made with the configured admin key: a user key of user `alice`, a
/// service key, the admin key itself, and a second admin key to be revoked.
async fn create_keys(client: &reqwest::Client, base: &str) -> anyhow::Result<[String; 4]> {
    let create = |body: serde_json::Value| {
        let client = client.clone();
        let url = format!("{base}/v1/keys");
        async move {
            let answer: serde_json::Value = client
                .post(url)
                .json(&body)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            answer["key"]
                .as_str()
                .map(str::to_owned)
                .context("the created key's answer has no `key`")
        }
    };
    Ok([
        create(serde_json::json!({ "role": "user", "user_id": "alice" })).await?,
        create(serde_json::json!({ "role": "service" })).await?,
        crate::server::ADMIN_KEY.to_owned(),
        create(serde_json::json!({ "role": "tenant_admin" })).await?,
    ])
}

/// The chat model stand-in, on an ephemeral port of 127.0.0.1.
struct Upstream {
    child: Child,
    port: u16,
}

impl Upstream {
    fn start(root: &Path) -> anyhow::Result<Self> {
        let script = root.join("xtask").join("contract").join("upstream.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("could not start {}", script.display()))?;
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout is piped");
        BufReader::new(stdout).read_line(&mut line)?;
        match line.trim().parse() {
            Ok(port) => Ok(Self { child, port }),
            Err(_) => {
                let _ = child.kill();
                bail!("{} printed {line:?}, not its port", script.display())
            }
        }
    }
}

impl Drop for Upstream {
    /// It serves until killed.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
