//! A `memlayer` binary as a child process, for the tests that run it: the command with a
//! clean environment, a guard that collects its output and kills it if the test fails, and
//! blocking HTTP clients with a key. Each test file uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_memlayer");
/// Longest wait for anything a process should do promptly (start, answer, exit).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const LISTENING: &str = "memlayer listening on http://";
/// The admin key every server of these tests is configured with (`MEMLAYER_ADMIN_KEY`), and
/// that [`client`] sends.
pub(crate) const ADMIN_KEY: &str = "cli-test-admin-key-0123456789abcdef0123456789";
/// Starts the line that shows a generated admin key.
pub(crate) const ADMIN_KEY_LINE: &str = "memlayer admin key: ";

/// `memlayer` with `args` and [`ADMIN_KEY`], without any other `MEMLAYER_*` variable of the
/// surrounding environment except where the embedding assets are (`.cargo/config.toml` sets
/// it for every test).
pub(crate) fn memlayer(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args);
    for (name, value) in std::env::vars_os() {
        if name == "MEMLAYER_ASSETS_DIR" {
            command.env(name, value);
        } else if name.to_string_lossy().starts_with("MEMLAYER_") {
            command.env_remove(name);
        }
    }
    command.env("MEMLAYER_ADMIN_KEY", ADMIN_KEY);
    command
}

/// A running `memlayer` child with its output collected as it comes. Killed on drop if it
/// is still running, so a failing test leaves no process behind.
pub(crate) struct Process {
    pub(crate) child: Child,
    stdout: Receiver<String>,
    pub(crate) stdout_seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Process {
    pub(crate) fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start memlayer");
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let collected = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            while let Ok(read) = stderr_pipe.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..read]));
            }
        });
        Self {
            child,
            stdout: receiver,
            stdout_seen: Vec::new(),
            stderr,
        }
    }

    /// Starts `memlayer serve` on an ephemeral port and waits until it says where it listens.
    pub(crate) fn serve(data_dir: &Path) -> (Self, String) {
        Self::serve_with(data_dir, |_| {})
    }

    /// [`Process::serve`] with the command adjusted by `adjust` first.
    pub(crate) fn serve_with(data_dir: &Path, adjust: impl FnOnce(&mut Command)) -> (Self, String) {
        let mut command = memlayer(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ]);
        adjust(&mut command);
        let mut process = Self::spawn(command);
        let address = process.wait_for_listening();
        (process, address)
    }

    /// Waits for the listening line; answers `http://ADDR`.
    pub(crate) fn wait_for_listening(&mut self) -> String {
        let line = self.wait_for_line(LISTENING);
        let address = line.strip_prefix(LISTENING).unwrap();
        let port: u16 = address
            .strip_prefix("127.0.0.1:")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("not a 127.0.0.1 address: {line:?}"));
        assert_ne!(port, 0, "the real port is printed, not 0");
        format!("http://{address}")
    }

    /// Waits for the next stdout line starting with `prefix`.
    pub(crate) fn wait_for_line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    self.stdout_seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Err(err) => panic!(
                    "no line starting with {prefix:?} ({err}); stdout: {:?}; stderr: {}",
                    self.stdout_seen,
                    self.stderr()
                ),
            }
        }
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM through `kill(1)`.
    pub(crate) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed: {status}");
    }

    /// Waits for the process to exit; answers its status and everything it printed on stdout.
    pub(crate) fn wait_for_exit(&mut self) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "memlayer did not exit within {TIMEOUT:?}; stderr: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        // The pipe closes when the process exits, so the reader thread ends promptly.
        while let Ok(line) = self.stdout.recv_timeout(TIMEOUT) {
            self.stdout_seen.push(line);
        }
        (status, self.stdout_seen.clone())
    }

    /// Waits for the exit and for stderr to be fully collected.
    pub(crate) fn wait_for_failure(&mut self) -> (ExitStatus, String) {
        let (status, _) = self.wait_for_exit();
        // The stderr reader may still be copying the last bytes.
        let deadline = Instant::now() + TIMEOUT;
        while Arc::strong_count(&self.stderr) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        (status, self.stderr())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A client sending [`ADMIN_KEY`].
pub(crate) fn client() -> reqwest::blocking::Client {
    client_with_key(ADMIN_KEY)
}

pub(crate) fn client_with_key(key: &str) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    reqwest::blocking::Client::builder()
        .timeout(TIMEOUT)
        .default_headers(headers)
        .build()
        .unwrap()
}

pub(crate) fn get(url: &str) -> (u16, Value) {
    let response = client().get(url).send().expect("GET reaches memlayer");
    (
        response.status().as_u16(),
        response.json().expect("a JSON body"),
    )
}

pub(crate) fn post(url: &str, body: &Value) -> (u16, Value) {
    let response = client()
        .post(url)
        .json(body)
        .send()
        .expect("POST reaches memlayer");
    (
        response.status().as_u16(),
        response.json().expect("a JSON body"),
    )
}
