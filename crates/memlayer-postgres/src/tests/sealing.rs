use std::path::{Path, PathBuf};

use memlayer_store::{Access, Append, NewMessage, Role};

use super::owner;
use crate::test_cluster;

/// Which of `needles` occur in some file under `dir`.
fn found_in_files(dir: &Path, needles: &[&[u8]]) -> Vec<bool> {
    let mut found = vec![false; needles.len()];
    let mut pending: Vec<PathBuf> = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        // Files come and go under a running server (temporary files, recycled segments).
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if metadata.is_dir() {
            let entries = std::fs::read_dir(&path).unwrap();
            pending.extend(entries.flatten().map(|entry| entry.path()));
        } else if metadata.is_file() {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            for (needle, found) in needles.iter().zip(&mut found) {
                *found |= contains(&bytes, needle);
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

#[tokio::test]
async fn sealed_text_reaches_no_file_of_the_cluster_while_plain_text_does() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    // Random, so that no earlier run's bytes (on a reused server) can match.
    let content = format!("content-canary-{}", uuid::Uuid::new_v4().simple());
    let metadata = format!("metadata-canary-{}", uuid::Uuid::new_v4().simple());
    let control = format!("control-canary-{}", uuid::Uuid::new_v4().simple());
    let mut message = NewMessage::new(Role::User, content.clone(), 1);
    message
        .metadata
        .insert("note".into(), metadata.clone().into());
    let append = Append {
        messages: vec![message],
        create: Some(owner("alice")),
        idempotency_key: None,
    };
    store
        .append(&Access::tenant_wide("t"), "s", append)
        .await
        .unwrap();
    let read = store
        .messages(&Access::tenant_wide("t"), "s", 0, 1)
        .await
        .unwrap();
    assert_eq!(read.items[0].content, content, "stored, and readable");

    let client = db.connect().await.unwrap();
    // The control: the same scan finds text stored as plain text, so a miss above means the
    // text is not there, not that the scan cannot see it.
    client
        .execute("CREATE TABLE scratch (text text)", &[])
        .await
        .unwrap();
    client
        .execute("INSERT INTO scratch VALUES ($1)", &[&control])
        .await
        .unwrap();
    // Writes every dirty page to the data files; the WAL already holds the commits.
    client.batch_execute("CHECKPOINT").await.unwrap();
    let data_directory: String = client
        .query_one("SHOW data_directory", &[])
        .await
        .unwrap()
        .get(0);
    let data_directory = Path::new(&data_directory);
    assert!(
        data_directory.join("pg_wal").is_dir(),
        "the tests must run on the database server's machine, with read access to {}",
        data_directory.display()
    );
    let found = found_in_files(
        data_directory,
        &[content.as_bytes(), metadata.as_bytes(), control.as_bytes()],
    );
    assert_eq!(
        found,
        [false, false, true],
        "content, metadata, control found in {}",
        data_directory.display()
    );
}
