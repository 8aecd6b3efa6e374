//! `cargo xtask dist`: the release bundle. It installs (or verifies) the embedding assets,
//! builds the release binary and writes `target/dist/memlayer-<version>-linux-x86_64.tar.gz`
//! holding one folder of the same name: `bin/memlayer`, `memlayer-assets/` with its manifest,
//! `README.md`, an example systemd unit (`systemd/memlayer.service`, from `xtask/dist/`), and
//! `SHA256SUMS` over every other file, which `sha256sum -c` checks after unpacking.
//!
//! The binary in the bundle has its debug information split off with `objcopy` (binutils):
//! the release profile keeps line tables for backtraces (about 200 MB), the bundle's binary
//! keeps only its symbols (under [`MAX_BINARY_BYTES`]), and the line tables go beside the
//! tarball as `<bundle>.debug`, which the binary names in its `.gnu_debuglink` for gdb.
//! `memlayer --version` names the commit it was built from (`crates/memlayer/build.rs`); a
//! bundle of an unknown commit is refused.
//!
//! Then it checks the bundle as an operator meets it: unpacked into a temporary folder,
//! every file against `SHA256SUMS`, the binary's size and version, the systemd unit with
//! `systemd-analyze verify` (pointed at the unpacked binary; skipped where systemd is not
//! installed), and `bin/memlayer serve` started from there, finding its assets beside
//! `bin/`, until it listens.
//!
//! The tarball is written with the `tar` and `flate2` crates rather than by running `tar`:
//! the entries, their order, modes and owner are decided here, the same on every machine,
//! instead of depending on which `tar` is installed and its flags. The task runs in xtask's
//! debug build: compressing there takes about 40 s, less than building xtask's dependencies
//! in release would on a fresh machine. The default compression level is kept: the fastest
//! one saved 15 s but made the bundle 28% larger (measured with the unstripped binary).

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use flate2::Compression;
use flate2::write::GzEncoder;

use crate::setup::{self, ASSETS, ASSETS_DIR, MANIFEST};
use crate::{cmd, metadata};

/// The platform the bundle is for; setup refuses any other.
const PLATFORM: &str = "linux-x86_64";

/// The most the bundle's binary may weigh once its debug information is split off.
const MAX_BINARY_BYTES: u64 = 60_000_000;

/// Where the example systemd unit expects the bundle.
const UNIT_INSTALL_DIR: &str = "/opt/memlayer";

/// A file of the bundle: where it goes inside the bundle's folder, where it comes from.
struct Entry {
    path: String,
    source: PathBuf,
    mode: u32,
}

pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    let assets = setup::run(root)?;
    cmd::cargo(root, &["build", "--release", "-p", "memlayer"])?;
    let target_dir = metadata::read(root)?.target_directory;
    let release = target_dir.join("release").join("memlayer");
    let (version, commit) = binary_version(&release)?;
    let name = format!("memlayer-{version}-{PLATFORM}");
    let dist_dir = target_dir.join("dist");
    fs::create_dir_all(&dist_dir)
        .with_context(|| format!("could not create {}", dist_dir.display()))?;
    let binary = dist_dir.join("memlayer");
    let debug = dist_dir.join(format!("{name}.debug"));
    split_debug_info(&release, &binary, &debug)?;

    let mut entries = vec![
        Entry {
            path: "bin/memlayer".to_owned(),
            source: binary,
            mode: 0o755,
        },
        Entry {
            path: "README.md".to_owned(),
            source: root.join("README.md"),
            mode: 0o644,
        },
        Entry {
            path: "systemd/memlayer.service".to_owned(),
            source: root.join("xtask").join("dist").join("memlayer.service"),
            mode: 0o644,
        },
        Entry {
            path: format!("{ASSETS_DIR}/{MANIFEST}"),
            source: assets.join(MANIFEST),
            mode: 0o644,
        },
    ];
    // Only the pinned files, never whatever else the directory holds (a leftover temporary
    // file of an interrupted setup, say).
    entries.extend(ASSETS.iter().map(|asset| Entry {
        path: format!("{ASSETS_DIR}/{}", asset.path),
        source: assets.join(asset.path),
        mode: 0o644,
    }));
    entries.sort_by(|a, b| a.path.cmp(&b.path));

    let tarball = dist_dir.join(format!("{name}.tar.gz"));
    eprintln!("xtask: writing {}", tarball.display());
    write_tarball(&tarball, &name, &entries)?;

    let size = fs::metadata(&tarball)
        .with_context(|| format!("could not read {}", tarball.display()))?
        .len();
    println!(
        "{} ({:.1} MB, {size} bytes), commit {commit}",
        tarball.display(),
        size as f64 / 1e6
    );
    println!("{} (the binary's debug information)", debug.display());
    check_bundle(&tarball, &name, &commit)
}

/// The version and the commit the binary reports (`memlayer --version` prints `memlayer
/// X.Y.Z (commit C)`), so the bundle is named after what it really contains; running it also
/// shows the build works.
fn binary_version(binary: &Path) -> anyhow::Result<(String, String)> {
    let mut command = Command::new(binary);
    command.arg("--version");
    let output = cmd::output(command)?;
    let parsed = output
        .trim()
        .strip_prefix("memlayer ")
        .and_then(|rest| rest.strip_suffix(')')?.split_once(" (commit "));
    match parsed {
        Some((_, "unknown")) => bail!(
            "`{} --version` names no commit: build from a Git checkout, or set \
             MEMLAYER_COMMIT",
            binary.display()
        ),
        Some((version, commit))
            if !version.is_empty() && !version.contains(char::is_whitespace) =>
        {
            Ok((version.to_owned(), commit.to_owned()))
        }
        _ => bail!("`{} --version` printed {output:?}", binary.display()),
    }
}

/// Writes `release` without its debug information to `stripped` and that information to
/// `debug`, which `stripped` names (`.gnu_debuglink`). The symbols stay: a panic's backtrace
/// still names its functions.
fn split_debug_info(release: &Path, stripped: &Path, debug: &Path) -> anyhow::Result<()> {
    let mut keep = Command::new("objcopy");
    keep.arg("--only-keep-debug").arg(release).arg(debug);
    cmd::run(keep).context("objcopy (binutils) could not copy the debug information")?;
    let mut strip = Command::new("objcopy");
    strip
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(release)
        .arg(stripped);
    cmd::run(strip).context("objcopy (binutils) could not strip the binary")
}

/// Unpacks the bundle into a temporary folder and checks it there (see the module's docs).
fn check_bundle(tarball: &Path, name: &str, commit: &str) -> anyhow::Result<()> {
    let unpacked = tempfile::Builder::new()
        .prefix("memlayer-dist-")
        .tempdir()
        .context("could not create a temporary folder")?;
    let file =
        File::open(tarball).with_context(|| format!("could not open {}", tarball.display()))?;
    tar::Archive::new(flate2::read::GzDecoder::new(file))
        .unpack(unpacked.path())
        .with_context(|| format!("could not unpack {}", tarball.display()))?;
    let bundle = unpacked.path().join(name);

    let sums = fs::read_to_string(bundle.join("SHA256SUMS"))?;
    for line in sums.lines() {
        let (sum, path) = line
            .split_once("  ")
            .context("a malformed SHA256SUMS line")?;
        let content = fs::read(bundle.join(path))?;
        if setup::sha256_hex(&content) != sum {
            bail!("{path} does not match SHA256SUMS in the unpacked bundle");
        }
    }

    let binary = bundle.join("bin").join("memlayer");
    let size = fs::metadata(&binary)?.len();
    if size > MAX_BINARY_BYTES {
        bail!("bin/memlayer weighs {size} bytes, more than {MAX_BINARY_BYTES}");
    }
    if binary_version(&binary)?.1 != commit {
        bail!("the bundle's binary names another commit than {commit}");
    }

    let unit = fs::read_to_string(bundle.join("systemd").join("memlayer.service"))?;
    let here = unit.replace(UNIT_INSTALL_DIR, &bundle.to_string_lossy());
    if here == unit {
        bail!("the systemd unit does not run {UNIT_INSTALL_DIR}/bin/memlayer");
    }
    let unit_copy = unpacked.path().join("memlayer.service");
    fs::write(&unit_copy, here)?;
    let mut verify = Command::new("systemd-analyze");
    verify.arg("verify").arg(&unit_copy);
    match verify.output() {
        Ok(output) if output.status.success() => eprintln!("xtask: systemd-analyze verify: ok"),
        Ok(output) => bail!(
            "systemd-analyze verify refused the unit: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(_) => eprintln!("xtask: no systemd-analyze here; the unit was not verified"),
    }

    let data = unpacked.path().join("data");
    let log = unpacked.path().join("server.log");
    let server = crate::server::Server::start(&binary, &data, &log)
        .context("the bundle's server did not start")?;
    eprintln!("xtask: the unpacked bundle serves on {}", server.addr());
    server.stop()?;
    eprintln!(
        "xtask: bundle checked: SHA256SUMS, bin/memlayer {:.1} MB (commit {commit}), the unit, \
         a start",
        size as f64 / 1e6
    );
    Ok(())
}

/// Writes the tarball under a temporary name and renames it, so a tarball at the final path
/// is always complete. `SHA256SUMS` is computed while the files are added.
fn write_tarball(tarball: &Path, name: &str, entries: &[Entry]) -> anyhow::Result<()> {
    let partial = tarball.with_extension("gz.partial");
    let file = File::create(&partial)
        .with_context(|| format!("could not create {}", partial.display()))?;
    let mut builder =
        tar::Builder::new(GzEncoder::new(BufWriter::new(file), Compression::default()));
    let mtime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_secs();

    append_directory(&mut builder, name, mtime)?;
    let mut directories = BTreeSet::new();
    let mut sums = String::new();
    for entry in entries {
        // Each folder once, before its files, so the archive unpacks with the same modes
        // whatever the umask.
        let parents: Vec<&Path> = Path::new(&entry.path)
            .ancestors()
            .skip(1)
            .filter(|parent| !parent.as_os_str().is_empty())
            .collect();
        for parent in parents.into_iter().rev() {
            if directories.insert(parent) {
                append_directory(&mut builder, &format!("{name}/{}", parent.display()), mtime)?;
            }
        }
        let content = fs::read(&entry.source)
            .with_context(|| format!("could not read {}", entry.source.display()))?;
        sums.push_str(&format!(
            "{}  {}\n",
            setup::sha256_hex(&content),
            entry.path
        ));
        let path = format!("{name}/{}", entry.path);
        append_file(&mut builder, &path, &content, entry.mode, mtime)?;
    }
    append_file(
        &mut builder,
        &format!("{name}/SHA256SUMS"),
        sums.as_bytes(),
        0o644,
        mtime,
    )?;

    let mut writer = builder
        .into_inner()
        .context("could not finish the tar stream")?
        .finish()
        .context("could not finish the gzip stream")?;
    writer.flush().context("could not write the tarball")?;
    writer
        .into_inner()
        .map_err(|err| err.into_error())
        .and_then(|file| file.sync_all())
        .with_context(|| format!("could not write {}", partial.display()))?;
    fs::rename(&partial, tarball).with_context(|| format!("could not rename {}", partial.display()))
}

fn header(kind: tar::EntryType, size: u64, mode: u32, mtime: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(mtime);
    // Owned by root, like a system package: unpacking as a user gives the files to that user.
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn append_directory<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    mtime: u64,
) -> anyhow::Result<()> {
    let mut header = header(tar::EntryType::Directory, 0, 0o755, mtime);
    builder
        .append_data(&mut header, path, std::io::empty())
        .with_context(|| format!("could not add {path}/ to the tarball"))
}

fn append_file<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    content: &[u8],
    mode: u32,
    mtime: u64,
) -> anyhow::Result<()> {
    let size = u64::try_from(content.len()).context("file too large")?;
    let mut header = header(tar::EntryType::Regular, size, mode, mtime);
    builder
        .append_data(&mut header, path, content)
        .with_context(|| format!("could not add {path} to the tarball"))
}
