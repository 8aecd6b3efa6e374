//! Proof that erased text is gone: a byte scan of the store and index files for a canary.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Where a canary was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occurrence {
    /// The file.
    pub file: PathBuf,
    /// The byte offset.
    pub offset: u64,
}

/// Every occurrence of `needle` in the given files (a missing file has none). The files are
/// streamed, so a large store needs no more memory than a buffer.
pub fn scan_files(files: &[&Path], needle: &[u8]) -> std::io::Result<Vec<Occurrence>> {
    let mut found = Vec::new();
    if needle.is_empty() {
        return Ok(found);
    }
    for file in files {
        let Some(mut reader) = unless_missing(std::fs::File::open(file))? else {
            continue;
        };
        // A window of one buffer plus the needle's length less one, so a match across two
        // reads is seen once.
        let mut window: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut buffer = vec![0u8; 1 << 20];
        let mut window_start = 0u64;
        loop {
            let read = reader.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            window.extend_from_slice(&buffer[..read]);
            for (at, candidate) in window.windows(needle.len()).enumerate() {
                if candidate == needle {
                    found.push(Occurrence {
                        file: file.to_path_buf(),
                        offset: window_start + at as u64,
                    });
                }
            }
            let keep = needle.len() - 1;
            if window.len() > keep {
                let drop = window.len() - keep;
                window.drain(..drop);
                window_start += drop as u64;
            }
        }
    }
    Ok(found)
}

/// The files under `dir`, however deep, for [`scan_files`]: every file a store keeps in a
/// directory (a database cluster's data directory, WAL included). Entries that vanish during
/// the walk (a running server's temporary files) are left out, as a missing file has no
/// occurrence.
pub fn files_under(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Some(entries) = unless_missing(std::fs::read_dir(&dir))? else {
            continue;
        };
        for entry in entries {
            let Some(entry) = unless_missing(entry)? else {
                continue;
            };
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    Ok(files)
}

/// `result`, with a file or directory that is not there (any more) as `None`.
fn unless_missing<T>(result: std::io::Result<T>) -> std::io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_occurrence_including_across_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        let mut bytes = vec![b'x'; (1 << 20) - 3];
        bytes.extend_from_slice(b"CANARY");
        bytes.extend_from_slice(&[b'y'; 100]);
        bytes.extend_from_slice(b"CANARY");
        std::fs::write(&path, &bytes).unwrap();
        let found = scan_files(&[&path, &dir.path().join("missing")], b"CANARY").unwrap();
        let offsets: Vec<u64> = found.iter().map(|o| o.offset).collect();
        assert_eq!(offsets, [(1 << 20) - 3, (1 << 20) + 103]);
        assert!(scan_files(&[&path], b"ABSENT").unwrap().is_empty());
    }

    #[test]
    fn files_under_a_directory_are_found_however_deep() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("base/16384");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        for file in [dir.path().join("top"), deep.join("2619")] {
            std::fs::write(file, b"").unwrap();
        }
        let mut found = files_under(dir.path()).unwrap();
        found.sort();
        assert_eq!(found, [deep.join("2619"), dir.path().join("top")]);
        assert!(files_under(&dir.path().join("missing")).unwrap().is_empty());
    }
}
