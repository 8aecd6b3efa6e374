//! `cargo xtask clients`: memlayer from the clients people use, against the real server: the
//! official OpenAI SDKs, Python's and JavaScript's, on its OpenAI-compatible endpoint (`POST
//! /v1/openai/chat/completions`), the official MCP Python SDK on its MCP server (streamable
//! HTTP, and stdio through `memlayer mcp`), and memlayer's own Python package,
//! `clients/python`, with its LangChain and LangGraph adapters. It installs the OpenAI and
//! MCP SDKs with every dependency pinned by hash (`xtask/clients/requirements.txt`) into a
//! virtual environment under the target directory,
//! the JavaScript one with `npm ci` from the committed lock file, and, into a second virtual
//! environment, the package's test dependencies pinned by hash
//! (`clients/python/requirements-test.txt`: httpx, langchain-core, langgraph-checkpoint and
//! the hatchling build backend) and then the package itself, built offline from the working tree (`--no-index
//! --no-build-isolation`), as its users install it. It starts the fake model as a process
//! (`fake-upstream`, from the tests package) and the real server (debug build, empty data
//! directory) with the fake as its `[agent_model]`, and runs `xtask/clients/test_openai.py`
//! and `test_openai.mjs`, which drive the SDKs as their users do and script the fake's
//! answers over its control endpoint, `test_mcp.py`, then the package's `unittest` suite
//! (`clients/python/tests`), which calls the server through the installed package, and last
//! memlayer's TypeScript package, `clients/typescript`: its dev dependencies (TypeScript and
//! openapi-typescript) with `npm ci` from its lock file, then a drift check: the types
//! openapi-typescript generates from the running server's `/openapi.json` (`npm run generate`,
//! into the target directory) must be byte for byte the committed
//! `src/generated/openapi.ts`, or the step fails saying how to regenerate them (`cargo xtask
//! clients --regenerate-ts` rewrites the committed file instead, and goes on); then `npm run
//! build` (tsc, ESM and CommonJS) and its `node --test` suites, which import the built
//! package (`test/esm.test.mjs`) and require it (`test/cjs.test.cjs`), and type-check and run
//! the README's TypeScript snippet (`test/readme.test.mjs`). Last come the README's Python
//! snippets of its "Use it from your stack" sections (`xtask/clients/test_readme.py`), each
//! with the Python its readers install. The server's log lands in
//! `target/clients-artifacts/`.
//!
//! It needs `python3` with `venv` and pip, Node.js with npm (installed with `apt-get` when
//! missing, as for the browser test), and access to PyPI and the npm registry the first
//! time; the embedding assets must be in place (`cargo xtask setup`, which `cargo xtask test`
//! runs first).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::cmd;
use crate::helper::Helper;
use crate::metadata;
use crate::server::{ADMIN_KEY, Server};

/// Where the fake model is, as `fake-upstream` prints it.
#[derive(Deserialize)]
struct Fake {
    base_url: String,
    control: String,
}

/// What to do with `clients/typescript`'s generated types when the server's document gives
/// other ones.
#[derive(Clone, Copy)]
pub(crate) enum Types {
    /// Fail: the committed file is stale (CI).
    Check,
    /// Rewrite the committed file (`--regenerate-ts`).
    Regenerate,
}

/// The committed types, relative to `clients/typescript`.
const GENERATED_TS: &str = "src/generated/openapi.ts";

pub(crate) fn run(root: &Path, types: Types) -> anyhow::Result<()> {
    let clients = root.join("xtask").join("clients");
    let target = metadata::read(root)?.target_directory;
    let python = crate::python::venv_with(
        &target.join("clients-venv"),
        &clients.join("requirements.txt"),
    )?;
    let package = root.join("clients").join("python");
    let package_python = install_package(&target.join("clients-python-venv"), &package)?;
    crate::browser::install_missing(false)?;
    // `npm ci` installs exactly the lock file's versions, and refuses a lock file that no
    // longer matches package.json.
    let mut npm = Command::new("npm");
    npm.current_dir(&clients)
        .args(["ci", "--no-audit", "--no-fund"]);
    cmd::run(npm).context("`npm ci` failed in xtask/clients")?;
    let typescript = root.join("clients").join("typescript");
    let mut npm = Command::new("npm");
    npm.current_dir(&typescript)
        .args(["ci", "--no-audit", "--no-fund"]);
    cmd::run(npm).context("`npm ci` failed in clients/typescript")?;

    cmd::cargo(
        root,
        &["build", "-p", "memlayer", "-p", "memlayer-tests", "--bins"],
    )?;
    let artifacts = target.join("clients-artifacts");
    std::fs::create_dir_all(&artifacts)?;
    let fake = FakeUpstream::start(&target.join("debug").join("fake-upstream"))?;
    let data = tempfile::Builder::new()
        .prefix("memlayer-clients-")
        .tempdir()
        .context("could not create the data directory")?;
    let config = data.path().join("memlayer.toml");
    let base_url = toml::Value::String(fake.address.base_url.clone());
    let table = format!(
        "[agent_model]\nbase_url = {base_url}\nmodel = \"fake-model\"\ntimeout_secs = 10\n"
    );
    std::fs::write(&config, table)?;
    let store = data.path().join("store");
    let binary = target.join("debug").join("memlayer");
    let server = Server::start_with(
        &binary,
        &store,
        &artifacts.join("server.log"),
        std::time::Duration::from_secs(30),
        &[("MEMLAYER_CONFIG", &*config.to_string_lossy())],
    )?;

    let client_test = |program: &Path, dir: &Path, args: &[&str]| {
        let mut test = Command::new(program);
        test.current_dir(dir)
            .args(args)
            .env("MEMLAYER_URL", format!("http://{}", server.addr()))
            .env("MEMLAYER_ADMIN_KEY", ADMIN_KEY)
            .env("FAKE_UPSTREAM_CONTROL", &fake.address.control)
            // `memlayer mcp`, the stdio bridge an MCP host starts.
            .env("MEMLAYER_BINARY", &binary)
            // A proxy from the environment must not intercept 127.0.0.1 traffic.
            .env("NO_PROXY", "127.0.0.1");
        cmd::run(test)
    };
    let sdk_test = |program: &Path, args: &[&str]| client_test(program, &clients, args);
    let outcome = sdk_test(&python, &["test_openai.py"])
        .and_then(|()| sdk_test(Path::new("node"), &["--test", "test_openai.mjs"]))
        .and_then(|()| sdk_test(&python, &["test_mcp.py"]))
        .and_then(|()| {
            client_test(
                &package_python,
                &package,
                &[
                    "-m",
                    "unittest",
                    "discover",
                    "--start-directory",
                    "tests",
                    "--verbose",
                ],
            )
        })
        // The TypeScript package: its types checked against the served document, built, run.
        .and_then(|()| {
            let document = format!("http://{}/openapi.json", server.addr());
            generated_types(&typescript, &document, &artifacts, types)
        })
        .and_then(|()| {
            let mut build = Command::new("npm");
            build.current_dir(&typescript).args(["run", "build"]);
            cmd::run(build).context("`npm run build` failed in clients/typescript")
        })
        .and_then(|()| {
            let suites = [
                "test/esm.test.mjs",
                "test/cjs.test.cjs",
                "test/readme.test.mjs",
            ];
            client_test(
                Path::new("node"),
                &typescript,
                &[&["--test"][..], &suites].concat(),
            )
        })
        // The README's snippets, each with the Python its readers install.
        .and_then(|()| {
            let replies = ["Sorry to hear that.", "It ships tomorrow."];
            let openai_section = ["test_readme.py", "Use it from your stack: OpenAI SDK"];
            sdk_test(&python, &[&openai_section[..], &replies[..]].concat())
        })
        .and_then(|()| {
            let section = ["test_readme.py", "Use it from your stack: Python client"];
            client_test(&package_python, &clients, &section)
        });
    // The test's failure says more than a failed shutdown after it, so it is reported first.
    let stopped = server.stop();
    drop(fake);
    outcome.with_context(|| {
        format!(
            "the clients' tests failed; the server's log is in {}",
            artifacts.display()
        )
    })?;
    stopped?;
    eprintln!(
        "xtask: the OpenAI and MCP SDKs', the Python and TypeScript packages' and the README's \
         tests passed"
    );
    Ok(())
}

/// Generates `clients/typescript`'s types from the running server's document into
/// `artifacts`, and compares them with the committed file byte for byte (`Types::Check`) or
/// puts them in its place (`Types::Regenerate`). `npm run generate` holds the
/// openapi-typescript options, so this and a developer's regeneration agree.
fn generated_types(
    typescript: &Path,
    document: &str,
    artifacts: &Path,
    types: Types,
) -> anyhow::Result<()> {
    let fresh = artifacts.join("openapi.ts");
    let mut generate = Command::new("npm");
    generate
        .current_dir(typescript)
        .args(["run", "--silent", "generate", "--", document])
        .arg(&fresh)
        // A proxy from the environment must not intercept 127.0.0.1 traffic.
        .env("NO_PROXY", "127.0.0.1");
    cmd::run(generate).context("openapi-typescript could not generate the types")?;
    let generated = std::fs::read(&fresh)?;
    let committed_path = typescript.join(GENERATED_TS);
    let committed = std::fs::read(&committed_path).unwrap_or_default();
    if generated == committed {
        eprintln!("xtask: clients/typescript/{GENERATED_TS} matches the server's /openapi.json");
        return Ok(());
    }
    match types {
        Types::Regenerate => {
            std::fs::write(&committed_path, &generated)?;
            eprintln!(
                "xtask: rewrote clients/typescript/{GENERATED_TS} from the server's \
                 /openapi.json; commit it"
            );
            Ok(())
        }
        Types::Check => bail!(
            "clients/typescript/{GENERATED_TS} is not what the server's /openapi.json gives \
             ({}); regenerate it with `cargo xtask clients --regenerate-ts` (or `npm run \
             generate -- http://HOST:PORT/openapi.json` in clients/typescript against a server \
             built from this tree), and commit it with the API change",
            first_difference(&committed, &generated)
        ),
    }
}

/// Where two files first differ, for a drift message: the line number and both lines.
fn first_difference(committed: &[u8], generated: &[u8]) -> String {
    let committed = String::from_utf8_lossy(committed);
    let generated = String::from_utf8_lossy(generated);
    let mut old = committed.lines();
    let mut new = generated.lines();
    for number in 1.. {
        match (old.next(), new.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => {
                return format!(
                    "first difference at line {number}: committed {:?}, generated {:?}",
                    a.unwrap_or("<end of file>"),
                    b.unwrap_or("<end of file>")
                );
            }
        }
    }
    "they differ in line endings or the final newline only".to_owned()
}

/// Installs `clients/python` with its pinned test dependencies into `venv`: the package is
/// built from the working tree by the pinned hatchling, with no index (nothing unpinned can
/// come in) and no dependency resolution (its dependencies are the pinned ones), and
/// reinstalled on every run, so the tests import what a user's `pip install` would.
fn install_package(venv: &Path, package: &Path) -> anyhow::Result<std::path::PathBuf> {
    let python = crate::python::venv_with(venv, &package.join("requirements-test.txt"))?;
    let mut pip = crate::python::pip_install(&python);
    pip.args([
        "--no-index",
        "--no-deps",
        "--no-build-isolation",
        "--force-reinstall",
    ])
    .arg(package);
    cmd::run(pip).context("pip could not install clients/python")?;
    Ok(python)
}

/// The `fake-upstream` process, and the addresses it printed.
struct FakeUpstream {
    /// Stops it when dropped.
    _process: Helper,
    address: Fake,
}

impl FakeUpstream {
    fn start(binary: &Path) -> anyhow::Result<Self> {
        let process = Helper::start(binary)?;
        let address = serde_json::from_str(&process.line)
            .with_context(|| format!("fake-upstream printed {:?}", process.line))?;
        Ok(Self {
            _process: process,
            address,
        })
    }
}
