//! The keyword section of the vector snapshot (format version 4): every partition's postings,
//! so that a start serves keyword recall from the file instead of analysing every stored
//! message again (15.5 s after ready at a million messages, docs/benchmarks.md).
//!
//! Layout, all integers little-endian, strings as a `u32` byte length then UTF-8:
//!
//! | field | size |
//! |---|---|
//! | partition count | 4 |
//! | per partition: its key's two strings | |
//! | document count `D` ≥ 1, then `D` × (id `u64`, length `u32`), ids strictly increasing | 4 + 12·D |
//! | term count `T`, then per term: its stem, posting count `P` ≥ 1, `P` × (document ordinal `u32`, frequency `u32` ≥ 1), ordinals strictly increasing and below `D` | |
//!
//! A document's length must be the sum of its frequencies (what the analyzer counted), and
//! a partition's stems are distinct. The section is a derived copy of text (the stems are
//! words of messages): it is written only where the store keeps text in plain, and only
//! what the index holds, so a stem no indexed message has is in no snapshot written after
//! the erasure.

use std::collections::HashMap;
use std::io::{self, Read, Take, Write};

use rustc_hash::FxHashMap;

use super::{Document, KeywordPartitions, Posting, Postings, Term};
use crate::error::{IndexError, Result};
use crate::snapshot::read_exact;

/// What names a keyword partition in a snapshot: two strings (message recall's tenant and
/// user).
pub(crate) trait PartitionKey: Sized {
    /// The key's two strings, as written.
    fn parts(&self) -> [&str; 2];
    /// The key the two strings read back name.
    fn from_parts(parts: [String; 2]) -> Self;
}

impl PartitionKey for [String; 2] {
    fn parts(&self) -> [&str; 2] {
        [&self[0], &self[1]]
    }

    fn from_parts(parts: [String; 2]) -> Self {
        parts
    }
}

/// The partitions a snapshot holds, verified, before their keys are given a type.
#[derive(Debug)]
pub(crate) struct KeywordSection {
    partitions: Vec<([String; 2], Postings)>,
}

impl KeywordSection {
    /// The partitions under keys of type `P`, with the default analyzer (the one every
    /// keyword index of message recall is built with).
    pub(crate) fn into_partitions<P: PartitionKey + Eq + std::hash::Hash>(
        self,
    ) -> KeywordPartitions<P> {
        let mut partitions = KeywordPartitions::default();
        partitions.partitions = self
            .partitions
            .into_iter()
            .map(|(key, postings)| (P::from_parts(key), postings))
            .collect();
        partitions
    }
}

impl<P: PartitionKey> KeywordPartitions<P> {
    /// Writes every partition's postings as the section above.
    pub(crate) fn write_section(&self, out: &mut dyn Write) -> io::Result<()> {
        write_u32(out, self.partitions.len())?;
        for (key, postings) in &self.partitions {
            for part in key.parts() {
                write_str(out, part)?;
            }
            write_postings(out, postings)?;
        }
        Ok(())
    }
}

fn write_postings(out: &mut dyn Write, postings: &Postings) -> io::Result<()> {
    let mut ids: Vec<(u64, u32)> = postings
        .documents
        .iter()
        .map(|(&id, document)| (id, document.length))
        .collect();
    ids.sort_unstable_by_key(|&(id, _)| id);
    let ordinal: FxHashMap<u64, u32> = ids
        .iter()
        .enumerate()
        .map(|(ordinal, &(id, _))| (id, ordinal as u32))
        .collect();
    write_u32(out, ids.len())?;
    let mut buffer = Vec::with_capacity(12 * ids.len());
    for (id, length) in &ids {
        buffer.extend_from_slice(&id.to_le_bytes());
        buffer.extend_from_slice(&length.to_le_bytes());
    }
    out.write_all(&buffer)?;
    write_u32(out, postings.vocabulary.len())?;
    for term in postings
        .terms
        .iter()
        .filter(|term| !term.postings.is_empty())
    {
        write_str(out, &term.text)?;
        write_u32(out, term.postings.len())?;
        buffer.clear();
        // Postings are sorted by document id, and so by ordinal.
        for posting in &term.postings {
            buffer.extend_from_slice(&ordinal[&posting.document].to_le_bytes());
            buffer.extend_from_slice(&posting.frequency.to_le_bytes());
        }
        out.write_all(&buffer)?;
    }
    Ok(())
}

fn write_u32(out: &mut dyn Write, value: usize) -> io::Result<()> {
    let value = u32::try_from(value)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "count over 2^32"))?;
    out.write_all(&value.to_le_bytes())
}

fn write_str(out: &mut dyn Write, text: &str) -> io::Result<()> {
    write_u32(out, text.len())?;
    out.write_all(text.as_bytes())
}

/// Reads and verifies a section from `source`, whose limit is what the file has left.
/// Every count is checked against that limit before anything is allocated for it.
pub(crate) fn read_section(source: &mut Take<impl Read>) -> Result<KeywordSection> {
    // A partition takes at least its key's two lengths, one document and the term count.
    let count = read_count(source, 4 + 4 + 4 + 12 + 4)?;
    let mut partitions = Vec::with_capacity(count);
    let mut keys = std::collections::HashSet::with_capacity(count);
    for _ in 0..count {
        let key = [read_string(source)?, read_string(source)?];
        if !keys.insert(key.clone()) {
            return Err(corrupted("a keyword partition occurs twice"));
        }
        partitions.push((key, read_postings(source)?));
    }
    Ok(KeywordSection { partitions })
}

fn read_postings(source: &mut Take<impl Read>) -> Result<Postings> {
    let document_count = read_count(source, 12)?;
    if document_count == 0 {
        return Err(corrupted("a keyword partition without documents"));
    }
    let mut bytes = vec![0u8; 12 * document_count];
    read_exact(source, &mut bytes)?;
    let mut ids = Vec::with_capacity(document_count);
    let mut lengths = Vec::with_capacity(document_count);
    for record in bytes.chunks_exact(12) {
        let (id, length) = record.split_at(8);
        let id = u64::from_le_bytes(id.try_into().expect("8 bytes"));
        if ids.last().is_some_and(|&last| last >= id) {
            return Err(corrupted("keyword document ids out of order"));
        }
        ids.push(id);
        lengths.push(u32::from_le_bytes(length.try_into().expect("4 bytes")));
    }
    // A term takes at least a one-byte stem with its length, and one posting with its count.
    let term_count = read_count(source, 4 + 1 + 4 + 8)?;
    let mut vocabulary = HashMap::with_capacity(term_count);
    let mut terms = Vec::with_capacity(term_count);
    let mut document_terms: Vec<Vec<u32>> = vec![Vec::new(); document_count];
    let mut counted = vec![0u64; document_count];
    for term_id in 0..term_count {
        let text = read_string(source)?;
        if text.is_empty() {
            return Err(corrupted("an empty keyword term"));
        }
        let posting_count = read_count(source, 8)?;
        if posting_count == 0 {
            return Err(corrupted("a keyword term without postings"));
        }
        let mut bytes = vec![0u8; 8 * posting_count];
        read_exact(source, &mut bytes)?;
        let mut postings = Vec::with_capacity(posting_count);
        let mut previous = None;
        for record in bytes.chunks_exact(8) {
            let (ordinal, frequency) = record.split_at(4);
            let ordinal = u32::from_le_bytes(ordinal.try_into().expect("4 bytes")) as usize;
            let frequency = u32::from_le_bytes(frequency.try_into().expect("4 bytes"));
            if ordinal >= document_count || previous.is_some_and(|previous| previous >= ordinal) {
                return Err(corrupted("keyword postings out of order or range"));
            }
            if frequency == 0 {
                return Err(corrupted("a keyword posting of frequency 0"));
            }
            previous = Some(ordinal);
            document_terms[ordinal].push(term_id as u32);
            counted[ordinal] += u64::from(frequency);
            postings.push(Posting {
                document: ids[ordinal],
                frequency,
            });
        }
        if vocabulary.insert(text.clone(), term_id as u32).is_some() {
            return Err(corrupted("a keyword term occurs twice in a partition"));
        }
        terms.push(Term { text, postings });
    }
    if lengths
        .iter()
        .zip(&counted)
        .any(|(&length, &counted)| u64::from(length) != counted)
    {
        return Err(corrupted(
            "a keyword document's length is not the sum of its frequencies",
        ));
    }
    let total_length = lengths.iter().map(|&length| u64::from(length)).sum();
    let documents = ids
        .into_iter()
        .zip(lengths)
        .zip(document_terms)
        .map(|((id, length), terms)| {
            let document = Document {
                length,
                terms: terms.into_boxed_slice(),
            };
            (id, document)
        })
        .collect();
    Ok(Postings {
        vocabulary,
        terms,
        free_terms: Vec::new(),
        documents,
        total_length,
    })
}

/// A count of entries of at least `entry_len` bytes each, refused when the entries could
/// not fit in what `source` has left.
fn read_count(source: &mut Take<impl Read>, entry_len: u64) -> Result<usize> {
    let count = u64::from(read_u32(source)?);
    if count.saturating_mul(entry_len) > source.limit() {
        return Err(corrupted("a keyword count larger than the file"));
    }
    Ok(count as usize)
}

fn read_u32(source: &mut impl Read) -> Result<u32> {
    let mut bytes = [0u8; 4];
    read_exact(source, &mut bytes)?;
    Ok(u32::from_le_bytes(bytes))
}

fn read_string(source: &mut Take<impl Read>) -> Result<String> {
    let len = read_count(source, 1)?;
    let mut bytes = vec![0u8; len];
    read_exact(source, &mut bytes)?;
    String::from_utf8(bytes).map_err(|_| corrupted("a keyword string is not UTF-8"))
}

fn corrupted(detail: &str) -> IndexError {
    IndexError::Corrupted(detail.to_owned())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::hybrid::KeywordPostings;

    type Partitions = KeywordPartitions<[String; 2]>;

    fn key(user: &str) -> [String; 2] {
        ["t".to_owned(), user.to_owned()]
    }

    fn section_bytes(partitions: &Partitions) -> Vec<u8> {
        let mut bytes = Vec::new();
        partitions.write_section(&mut bytes).unwrap();
        bytes
    }

    fn read_back(bytes: &[u8]) -> Result<Partitions> {
        let mut source = bytes.take(bytes.len() as u64);
        let section = read_section(&mut source)?;
        assert_eq!(source.limit(), 0, "the section is every byte written");
        Ok(section.into_partitions())
    }

    /// Every query's hits, scores included, in every partition.
    fn answers(partitions: &Partitions, users: &[&str], queries: &[&str]) -> Vec<String> {
        users
            .iter()
            .flat_map(|user| {
                queries.iter().map(move |query| {
                    format!(
                        "{user} {query}: {:?}",
                        partitions.search(&key(user), query, 10, None)
                    )
                })
            })
            .collect()
    }

    const WORDS: &[&str] = &[
        "parcel", "parcels", "boat", "invoice", "the", "lisbon", "flight", "booked", "booking",
        "zanzibar",
    ];

    proptest! {
        /// Partitions read back from their section answer every search as they did, scores
        /// included, after removals left free term ids behind; and what is added or removed
        /// afterwards behaves as in the partitions written.
        #[test]
        fn a_section_reads_back_what_was_written(
            documents in prop::collection::vec(
                (0usize..3, prop::collection::vec(0..WORDS.len(), 0..8)),
                1..40,
            ),
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
        ) {
            let users = ["ann", "bob", "cy"];
            let mut written = Partitions::default();
            let mut placed = Vec::new();
            for (id, (user, words)) in documents.iter().enumerate() {
                let text: Vec<&str> = words.iter().map(|&word| WORDS[word]).collect();
                written.add(&key(users[*user]), id as u64, &text.join(" "));
                placed.push((users[*user], id as u64));
            }
            for index in removed {
                let (user, id) = placed[index.index(placed.len())];
                written.remove(&key(user), id);
            }
            let mut read = read_back(&section_bytes(&written)).unwrap();
            prop_assert_eq!(read.documents(), written.documents());
            prop_assert_eq!(answers(&read, &users, WORDS), answers(&written, &users, WORDS));
            for (user, id) in &placed {
                prop_assert_eq!(read.contains(&key(user), *id), written.contains(&key(user), *id));
                written.remove(&key(user), *id);
                read.remove(&key(user), *id);
            }
            read.add(&key("ann"), 1_000, "boat invoice");
            written.add(&key("ann"), 1_000, "boat invoice");
            prop_assert_eq!(answers(&read, &users, WORDS), answers(&written, &users, WORDS));
        }
    }

    fn sample() -> Partitions {
        let mut partitions = Partitions::default();
        partitions.add(&key("ann"), 7, "My parcel never arrived, the parcel");
        partitions.add(&key("ann"), 9, "the boat");
        partitions.add(&key("bob"), 3, "Invoice for the boat");
        partitions
    }

    /// A section cut short anywhere, or with any byte changed, is refused or reads back
    /// into partitions that hold together; nothing panics.
    #[test]
    fn a_damaged_section_is_refused_or_holds_together() {
        let bytes = section_bytes(&sample());
        for len in 0..bytes.len() {
            assert!(read_back(&bytes[..len]).is_err(), "cut at {len}");
        }
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] ^= flip;
                let mut source = damaged.as_slice().take(damaged.len() as u64);
                if let Ok(section) = read_section(&mut source) {
                    let mut read: Partitions = section.into_partitions();
                    read.retain(|_, _| false);
                    assert_eq!(read.documents(), 0);
                }
            }
        }
    }

    /// The checks a checksum cannot stand in for (the file is ours, but an index must not
    /// hold what it would not have built): each named refusal.
    #[test]
    fn sections_that_break_an_invariant_are_refused() {
        let mut partitions = Partitions::default();
        partitions.add(&key("ann"), 7, "parcel parcel boat");
        let bytes = section_bytes(&partitions);
        // partitions 4, "t" 5, "ann" 7, documents 4, (id 8, length 4), terms 4, then terms.
        let length_at = 4 + 5 + 7 + 4 + 8;
        let refused = |change: &dyn Fn(&mut Vec<u8>), why: &str| {
            let mut damaged = bytes.clone();
            change(&mut damaged);
            match read_back(&damaged) {
                Err(IndexError::Corrupted(detail)) => assert!(detail.contains(why), "{detail}"),
                other => panic!("{why}: {other:?}"),
            }
        };
        refused(
            &|bytes| bytes[length_at] = 4,
            "length is not the sum of its frequencies",
        );
        let first_term = length_at + 4 + 4;
        let term_len = u32::from_le_bytes(bytes[first_term..first_term + 4].try_into().unwrap());
        let frequency_at = first_term + 4 + term_len as usize + 4 + 4;
        refused(
            &|bytes| bytes[frequency_at..frequency_at + 4].fill(0),
            "frequency 0",
        );
        let ordinal_at = frequency_at - 4;
        refused(&|bytes| bytes[ordinal_at] = 1, "out of order or range");
        refused(&|bytes| bytes[0] = 200, "larger than the file");
    }
}
