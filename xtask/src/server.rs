//! The server under test as a child process (for the benchmarks and the crash test): started
//! on an ephemeral port, found through the address it prints, and always stopped — by SIGTERM
//! when a run ends, by SIGKILL when a crash is wanted, or killed if a task fails part-way.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A release build with an empty data directory starts in well under a second; this bound
/// only keeps a broken server from hanging the benchmark.
pub(crate) const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a graceful shutdown may take before the server is killed. The server finishes
/// in-flight requests and waits for its indexing pipeline and maintenance tasks to stop:
/// after `bench`'s 64 clients, on the 2-core machine with other builds running, that took
/// over 10 s.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

const LISTENING: &str = "listening on http://";

/// The admin key the server under test is configured with, and the load generator sends.
pub(crate) const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef0123456789abcdef";

pub(crate) struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    pub(crate) fn start(binary: &Path, data_dir: &Path, log: &Path) -> anyhow::Result<Self> {
        Self::start_with(binary, data_dir, log, STARTUP_TIMEOUT, &[])
    }

    /// Like [`start`](Self::start), waiting up to `timeout` (a large store to verify and
    /// index to rebuild take longer), with `env` added to the server's environment.
    pub(crate) fn start_with(
        binary: &Path,
        data_dir: &Path,
        log: &Path,
        timeout: Duration,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let mut child = spawn(binary, data_dir, log, env)?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, receiver) = mpsc::channel();
        // The reader keeps draining stdout after the address is found: a full pipe would
        // block the server's next write and stall the benchmark.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = parse_listening(&line) {
                    // The receiver is gone after the first address; later ones don't matter.
                    let _ = sender.send(addr);
                }
            }
        });

        match receiver.recv_timeout(timeout) {
            Ok(addr) => Ok(Self { child, addr }),
            Err(error) => {
                let _ = child.kill();
                let status = child.wait()?;
                let why = match error {
                    mpsc::RecvTimeoutError::Timeout => format!(
                        "did not print `{LISTENING}ADDR` within {} s",
                        timeout.as_secs()
                    ),
                    mpsc::RecvTimeoutError::Disconnected => {
                        format!("exited ({status}) before printing `{LISTENING}ADDR`")
                    }
                };
                bail!("the server {why}; see {}", log.display())
            }
        }
    }

    /// Starts the server and kills it with SIGKILL `after` the spawn, wherever its start-up
    /// has got to by then (opening and repairing the store, loading the model and the index,
    /// finishing interrupted erasures, serving); `env` is added to its environment, as in
    /// [`start_with`](Self::start_with).
    pub(crate) fn kill_during_start(
        binary: &Path,
        data_dir: &Path,
        log: &Path,
        after: Duration,
        env: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let mut child = spawn(binary, data_dir, log, env)?;
        thread::sleep(after);
        // A start that already failed is reported by the next one, which must succeed.
        let _ = child.kill();
        child.wait()?;
        Ok(())
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The most memory the server has held so far (`VmHWM`, KiB), as Linux counts it.
    pub(crate) fn peak_rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmHWM")
    }

    /// The memory the server holds now (`VmRSS`, KiB).
    pub(crate) fn rss_kib(&self) -> anyhow::Result<u64> {
        self.status_kib("VmRSS")
    }

    /// A field of the server's `/proc/PID/status` counted in KiB.
    fn status_kib(&self, field: &str) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .context("could not read the server's /proc status")?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {field} in the server's /proc status"))
    }

    /// Asks the server to shut down as an operator would, then waits for it.
    pub(crate) fn stop(mut self) -> anyhow::Result<()> {
        let mut kill = Command::new("kill");
        kill.args(["-TERM", &self.child.id().to_string()]);
        crate::cmd::run(kill)?;
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    eprintln!("xtask: the server exited with {status} after SIGTERM");
                }
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "the server did not exit within {} s of SIGTERM; it was killed",
            SHUTDOWN_TIMEOUT.as_secs()
        )
    }

    /// Kills the server with SIGKILL, as a crash or the OOM killer would: nothing is flushed,
    /// no snapshot saved.
    pub(crate) fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("could not kill the server")?;
        self.child.wait()?;
        Ok(())
    }
}

/// An HTTP client that sends the admin key of the server under test with every request.
pub(crate) fn admin_client(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    client_with_key(ADMIN_KEY, timeout)
}

/// An HTTP client for 127.0.0.1 that sends `key` with every request.
pub(crate) fn client_with_key(key: &str, timeout: Duration) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse()?,
    );
    // `no_proxy`: a proxy from the environment must not intercept 127.0.0.1 traffic.
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .default_headers(headers)
        .build()?)
}

/// Starts `memlayer serve` on an ephemeral port of 127.0.0.1 with its stderr in `log`, with
/// keys not rate-limited: the load, crash and benchmark clients send thousands of requests a
/// second with one key, and measure the server, not its limit (`env` may set one again).
fn spawn(
    binary: &Path,
    data_dir: &Path,
    log: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let log_file =
        File::create(log).with_context(|| format!("could not create {}", log.display()))?;
    Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("MEMLAYER_ADMIN_KEY", ADMIN_KEY)
        .env("MEMLAYER_RATE_LIMIT_PER_SECOND", "0")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("could not start {}", binary.display()))
}

impl Drop for Server {
    /// Kills a server that is still running, so no error path leaves one behind; after a
    /// successful `stop` it has already exited and this does nothing.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address in a line like `INFO memlayer: listening on http://127.0.0.1:41234`.
fn parse_listening(line: &str) -> Option<SocketAddr> {
    let (_, rest) = line.split_once(LISTENING)?;
    let addr = rest.split_whitespace().next()?.trim_end_matches('/');
    addr.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_address() {
        let expected: SocketAddr = "127.0.0.1:41234".parse().unwrap();
        for line in [
            "listening on http://127.0.0.1:41234",
            "2025-01-01T00:00:00Z  INFO memlayer: listening on http://127.0.0.1:41234",
            "memlayer listening on http://127.0.0.1:41234/ (data: /tmp/x)",
        ] {
            assert_eq!(parse_listening(line), Some(expected), "{line}");
        }
        assert_eq!(
            parse_listening("listening on http://[::1]:8080"),
            Some("[::1]:8080".parse().unwrap())
        );
    }

    #[test]
    fn ignores_other_lines() {
        for line in [
            "",
            "memlayer starting",
            "listening on 127.0.0.1:41234",
            "listening on http://",
            "listening on http://localhost:41234",
            "listening on http://127.0.0.1",
        ] {
            assert_eq!(parse_listening(line), None, "{line}");
        }
    }
}
