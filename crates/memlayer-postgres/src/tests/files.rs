//! Scanning the cluster's files for bytes: what an attacker with the disk would read.

use std::path::{Path, PathBuf};

/// The server's data directory, after a checkpoint wrote every dirty page to the data files
/// (the WAL already holds the commits).
pub(super) async fn data_directory(client: &tokio_postgres::Client) -> PathBuf {
    client.batch_execute("CHECKPOINT").await.unwrap();
    let data_directory: String = client
        .query_one("SHOW data_directory", &[])
        .await
        .unwrap()
        .get(0);
    let data_directory = PathBuf::from(data_directory);
    assert!(
        data_directory.join("pg_wal").is_dir(),
        "the tests must run on the database server's machine, with read access to {}",
        data_directory.display()
    );
    data_directory
}

/// Which of `needles` occur in some file under `dir`.
pub(super) fn found_in_files(dir: &Path, needles: &[&[u8]]) -> Vec<bool> {
    files_with(dir, needles)
        .iter()
        .map(|files| !files.is_empty())
        .collect()
}

/// For each of `needles`, the files under `dir` it occurs in.
pub(super) fn files_with(dir: &Path, needles: &[&[u8]]) -> Vec<Vec<PathBuf>> {
    let mut found = vec![Vec::new(); needles.len()];
    let mut pending: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        // Files and directories come and go under a running server (temporary files, removed
        // segments).
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            pending.extend(entries.flatten().map(|entry| entry.path()));
        } else if metadata.is_file() {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            for (needle, found) in needles.iter().zip(&mut found) {
                if contains(&bytes, needle) {
                    found.push(path.clone());
                }
            }
        }
    }
    found
}

/// Whether `needle` occurs in `haystack` (Boyer-Moore-Horspool: the scan reads the whole
/// cluster in an unoptimised test build, where a window-by-window comparison takes seconds).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let n = needle.len();
    assert!(n > 0);
    let mut shift = [n; 256];
    for (i, &byte) in needle[..n - 1].iter().enumerate() {
        shift[usize::from(byte)] = n - 1 - i;
    }
    let mut start = 0;
    while start + n <= haystack.len() {
        if &haystack[start..start + n] == needle {
            return true;
        }
        start += shift[usize::from(haystack[start + n - 1])];
    }
    false
}

#[test]
fn the_scan_finds_a_needle_anywhere() {
    let needle = b"canary-0123";
    for at in [0, 1, 500, 989] {
        let mut haystack = vec![b'x'; 1000];
        haystack[at..at + needle.len()].copy_from_slice(needle);
        assert!(contains(&haystack, needle), "at {at}");
        haystack[at + 3] = b'_';
        assert!(!contains(&haystack, needle), "altered at {at}");
    }
    assert!(!contains(b"canary", needle));
}
