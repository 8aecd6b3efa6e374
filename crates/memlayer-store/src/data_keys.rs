//! The key file: the data keys that a store file's sealed values open under, kept apart from
//! them so that an erasure can destroy a key without rewriting the store file.
//!
//! redb never overwrites a value in place: a removed or changed value stays in a freed page
//! until the page is written again, so removing text from the store file took a compaction of
//! the whole file (30–90 s at a million messages, with every read and write held meanwhile;
//! docs/benchmarks.md). A value sealed under a data key (`seal.rs`) needs no such rewrite: once
//! its key is gone, the ciphertext left in a freed page is noise. The keys therefore live here,
//! in a file memlayer writes itself, where destroying one is overwriting its slot with zeros
//! and syncing: a fraction of a millisecond whatever the number of keys (a second redb file
//! would need a compaction of its own per erasure: 17–24 ms at a million keys, measured, under
//! an exclusive lock).
//!
//! Layout: a 64-byte header (magic and version), then slots of 64 bytes, each a whole key or
//! all zeros (free): the key, the session's surrogate key and the key's generation (a session
//! is re-keyed when one of its messages is erased), reserved bytes, and a CRC-32 of the rest.
//! A slot never spans two 512-byte sectors, so a crash tears a write into a mix of the old and
//! the new slot at worst; the CRC tells such a slot, which is then free (a torn new key was
//! never committed anywhere: keys are written and synced before the store file commits what
//! they seal; a torn destruction was a destruction). The owner recorded in the slot is checked
//! at every read, so a record naming a slot that was freed and reused fails to open instead of
//! opening under a stranger's key.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::seal::{DataKey, KEY_LEN};
use crate::store::sync_parent;
use crate::{Result, StoreError};

const MAGIC: &[u8; 16] = b"memlayer-keys\0\0\x01";
/// Bytes of the header and of each slot.
const SLOT_LEN: u64 = 64;
const FREE: [u8; SLOT_LEN as usize] = [0; SLOT_LEN as usize];
const OWNER_AT: usize = KEY_LEN;
const GENERATION_AT: usize = OWNER_AT + 8;
const CRC_AT: usize = SLOT_LEN as usize - 4;

/// Whose key a slot holds: a session's surrogate key and the key's generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct KeyOwner {
    pub(crate) sid: u64,
    pub(crate) generation: u32,
}

/// The key file, open for reading and writing.
pub(crate) struct DataKeys {
    file: File,
    path: PathBuf,
    /// Free slots, lowest first, and the number of slots the file has. Under the lock, every
    /// slot below the count and not listed holds a key.
    slots: Mutex<Slots>,
    /// Whether a key was written since the last sync.
    unsynced: AtomicBool,
}

struct Slots {
    free: std::collections::BTreeSet<u64>,
    count: u64,
}

impl DataKeys {
    /// Opens the key file at `path`, creating it if there is none; a torn slot is freed.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let io = |source: std::io::Error| StoreError::KeyFile {
            path: path.to_owned(),
            source: source.into(),
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let mut length = file.metadata().map_err(io)?.len();
        if length < SLOT_LEN {
            // New, or a creation a crash cut short (nothing can refer to a slot before the
            // header is synced).
            let mut header = FREE;
            header[..MAGIC.len()].copy_from_slice(MAGIC);
            file.set_len(0).map_err(io)?;
            file.write_all_at(&header, 0).map_err(io)?;
            file.sync_all().map_err(io)?;
            sync_parent(path).map_err(io)?;
            length = SLOT_LEN;
        }
        let mut bytes = vec![0; usize::try_from(length).expect("a key file fits in memory")];
        file.read_exact_at(&mut bytes, 0).map_err(io)?;
        let Scan { free, torn, count } = scan(&bytes).map_err(|detail| damaged(path, detail))?;
        clear(&file, &torn).map_err(io)?;
        Ok(Self {
            file,
            path: path.to_owned(),
            slots: Mutex::new(Slots { free, count }),
            unsynced: AtomicBool::new(false),
        })
    }

    /// A new key for each of `owners`, with its slot. Written, not synced: the writer syncs
    /// the keys of a group ([`Self::sync`]) before the commit that names them.
    pub(crate) fn create(&self, owners: &[KeyOwner]) -> Result<Vec<(u64, DataKey)>> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut created = Vec::with_capacity(owners.len());
        for owner in owners {
            let slot = match slots.free.pop_first() {
                Some(slot) => slot,
                None => {
                    slots.count += 1;
                    slots.count - 1
                }
            };
            // Marked before the write: whatever of it reaches the file is synced or cleared.
            self.unsynced.store(true, Ordering::SeqCst);
            let key = DataKey::generate()?;
            let written = self
                .file
                .write_all_at(&encode(&key, *owner), offset(slot))
                .map_err(|source| self.io(source));
            if let Err(err) = written {
                // Whatever reached the file is no key of anyone's: a reopening frees it.
                slots.free.insert(slot);
                slots.free.extend(created.iter().map(|(slot, _)| *slot));
                return Err(err);
            }
            created.push((slot, key));
        }
        Ok(created)
    }

    /// Syncs the keys created since the last sync, if any.
    pub(crate) fn sync(&self) -> Result<()> {
        if !self.unsynced.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        self.file.sync_data().map_err(|source| {
            self.unsynced.store(true, Ordering::SeqCst);
            self.io(source)
        })
    }

    /// The key in `slot`, which must be `owner`'s. A slot holding none, or another's, is
    /// [`StoreError::KeyDestroyed`]: the key was destroyed (and the slot perhaps reused) after
    /// the snapshot naming it was taken.
    pub(crate) fn key(&self, slot: u64, owner: KeyOwner) -> Result<DataKey> {
        let mut content = FREE;
        self.file
            .read_exact_at(&mut content, offset(slot))
            .map_err(|source| self.io(source))?;
        match decode(&content) {
            Slot::Key(key, found) if found == owner => Ok(key),
            Slot::Key(..) | Slot::Free | Slot::Torn => Err(StoreError::KeyDestroyed { slot }),
        }
    }

    /// Destroys the keys of `owners` in their slots: their bytes are overwritten with zeros and
    /// synced before this returns, and the slots are free for new keys. A slot that no longer
    /// holds its owner's key (destroyed before, and perhaps reused) is left as it is.
    pub(crate) fn destroy(&self, owners: &[(u64, KeyOwner)]) -> Result<()> {
        // Under the lock, so that no slot is taken for a new key between its check and its
        // clearing.
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut doomed = Vec::with_capacity(owners.len());
        for &(slot, owner) in owners {
            let mut content = FREE;
            self.file
                .read_exact_at(&mut content, offset(slot))
                .map_err(|source| self.io(source))?;
            if matches!(decode(&content), Slot::Key(_, found) if found == owner) {
                doomed.push(slot);
            }
        }
        clear(&self.file, &doomed).map_err(|source| self.io(source))?;
        slots.free.extend(doomed);
        Ok(())
    }

    /// Every key's slot and owner, for checks and sweeps.
    pub(crate) fn owners(&self) -> Result<Vec<(u64, KeyOwner)>> {
        let count = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .count;
        let mut bytes = vec![0; (count * SLOT_LEN) as usize];
        self.file
            .read_exact_at(&mut bytes, SLOT_LEN)
            .map_err(|source| self.io(source))?;
        Ok((0..count)
            .zip(bytes.chunks_exact(SLOT_LEN as usize))
            .filter_map(|(slot, content)| match decode(content) {
                Slot::Key(_, owner) => Some((slot, owner)),
                Slot::Free | Slot::Torn => None,
            })
            .collect())
    }

    fn io(&self, source: std::io::Error) -> StoreError {
        StoreError::KeyFile {
            path: self.path.clone(),
            source: source.into(),
        }
    }
}

/// What a key file's bytes hold, besides its keys.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Slots holding no key (zeros, or torn).
    pub(crate) free: std::collections::BTreeSet<u64>,
    /// Slots a crash tore, to clear.
    pub(crate) torn: Vec<u64>,
    /// Whole slots in the file; a slot a crash left half-appended is part of no key.
    pub(crate) count: u64,
}

/// Reads a whole key file: an error (why) unless it starts with the header.
pub(crate) fn scan(bytes: &[u8]) -> std::result::Result<Scan, String> {
    let slot_len = SLOT_LEN as usize;
    if bytes.len() < slot_len || &bytes[..MAGIC.len()] != MAGIC {
        return Err("not a memlayer key file".into());
    }
    let slots = bytes[slot_len..].chunks_exact(slot_len);
    let count = slots.len() as u64;
    let mut free = std::collections::BTreeSet::new();
    let mut torn = Vec::new();
    for (slot, content) in (0..count).zip(slots) {
        match decode(content) {
            Slot::Free => {
                free.insert(slot);
            }
            Slot::Torn => {
                torn.push(slot);
                free.insert(slot);
            }
            Slot::Key(..) => {}
        }
    }
    Ok(Scan { free, torn, count })
}

/// Overwrites `slots` with zeros and syncs them (nothing to do for none).
fn clear(file: &File, slots: &[u64]) -> std::io::Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    for slot in slots {
        file.write_all_at(&FREE, offset(*slot))?;
    }
    file.sync_data()
}

fn offset(slot: u64) -> u64 {
    SLOT_LEN * (slot + 1)
}

enum Slot {
    Free,
    Torn,
    Key(DataKey, KeyOwner),
}

fn encode(key: &DataKey, owner: KeyOwner) -> [u8; SLOT_LEN as usize] {
    let mut slot = FREE;
    slot[..KEY_LEN].copy_from_slice(key.bytes());
    slot[OWNER_AT..GENERATION_AT].copy_from_slice(&owner.sid.to_le_bytes());
    slot[GENERATION_AT..GENERATION_AT + 4].copy_from_slice(&owner.generation.to_le_bytes());
    let crc = crc32fast::hash(&slot[..CRC_AT]);
    slot[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    slot
}

fn decode(slot: &[u8]) -> Slot {
    if slot.iter().all(|&byte| byte == 0) {
        return Slot::Free;
    }
    let crc = u32::from_le_bytes(slot[CRC_AT..].try_into().expect("4 bytes"));
    if crc != crc32fast::hash(&slot[..CRC_AT]) {
        return Slot::Torn;
    }
    let Ok(key) = DataKey::from_stored(&slot[..KEY_LEN]) else {
        return Slot::Torn;
    };
    let sid = u64::from_le_bytes(slot[OWNER_AT..GENERATION_AT].try_into().expect("8 bytes"));
    let generation = u32::from_le_bytes(
        slot[GENERATION_AT..GENERATION_AT + 4]
            .try_into()
            .expect("4 bytes"),
    );
    Slot::Key(key, KeyOwner { sid, generation })
}

fn damaged(path: &Path, detail: String) -> StoreError {
    StoreError::DamagedFile {
        path: path.to_owned(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(sid: u64, generation: u32) -> KeyOwner {
        KeyOwner { sid, generation }
    }

    #[test]
    fn a_key_opens_for_its_owner_until_destroyed_and_its_bytes_leave_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let keys = DataKeys::open(&path).unwrap();
        let created = keys.create(&[owner(1, 0), owner(2, 0)]).unwrap();
        let (slot, key) = &created[0];
        assert_eq!(keys.key(*slot, owner(1, 0)).unwrap().bytes(), key.bytes());
        assert!(matches!(
            keys.key(*slot, owner(2, 0)),
            Err(StoreError::KeyDestroyed { .. })
        ));
        let in_file = |bytes: &[u8]| {
            std::fs::read(&path)
                .unwrap()
                .windows(bytes.len())
                .any(|w| w == bytes)
        };
        assert!(in_file(key.bytes()));

        keys.destroy(&[(*slot, owner(1, 0))]).unwrap();
        keys.destroy(&[(*slot, owner(1, 0))]).unwrap();
        assert!(!in_file(key.bytes()), "the destroyed key is overwritten");
        assert!(matches!(
            keys.key(*slot, owner(1, 0)),
            Err(StoreError::KeyDestroyed { .. })
        ));
        // The other key is untouched, also after a reopening; the freed slot is reused.
        drop(keys);
        let keys = DataKeys::open(&path).unwrap();
        let (other, other_key) = &created[1];
        assert_eq!(
            keys.key(*other, owner(2, 0)).unwrap().bytes(),
            other_key.bytes()
        );
        assert_eq!(keys.owners().unwrap(), vec![(*other, owner(2, 0))]);
        let again = keys.create(&[owner(3, 0)]).unwrap();
        assert_eq!(again[0].0, *slot);
    }

    #[test]
    fn a_torn_slot_is_free_after_a_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let keys = DataKeys::open(&path).unwrap();
        let created = keys.create(&[owner(7, 1), owner(8, 0)]).unwrap();
        drop(keys);
        // Half of the first slot overwritten, as a crash during its destruction leaves it.
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[0; 16], offset(created[0].0)).unwrap();
        drop(file);
        let keys = DataKeys::open(&path).unwrap();
        assert_eq!(keys.owners().unwrap(), vec![(created[1].0, owner(8, 0))]);
        let leftover = &created[0].1.bytes()[16..];
        assert!(
            !std::fs::read(&path)
                .unwrap()
                .windows(leftover.len())
                .any(|w| w == leftover),
            "what was left of the torn key is cleared"
        );
    }

    #[test]
    fn a_file_that_is_not_a_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, [7; 128]).unwrap();
        assert!(matches!(
            DataKeys::open(&path),
            Err(StoreError::DamagedFile { .. })
        ));
    }
}
