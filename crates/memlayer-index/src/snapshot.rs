//! The vector snapshot file: our own small format, written atomically, verified on load.
//!
//! Layout, all integers little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `MLVECIDX` |
//! | 8 | 4 | format version (4; 1 to 3 are still read) |
//! | 12 | 4 | dimension `d` |
//! | 16 | 8 | covered sequence: the store sequence the snapshot includes |
//! | 24 | 8 | record count `n` |
//! | 32 | 4 | CRC-32 (IEEE, `crc32fast`) of bytes 0..32 followed by every byte after 36 |
//! | 36 | `n × (12 + d)` | body: `n` records of id (`u64`), scale (`f32`), then `d` × `i8` codes ([`crate::arena`]) |
//! | … | 1 | 1 if the keyword section follows, else 0 |
//! | … | | the keyword partitions' postings (`crate::keyword::section`) |
//! | … | 1 | 1 if the HNSW graph follows, else 0 |
//! | … | rest | the graph's neighbour lists over the records ([`crate::graph::Graph::write`]) |
//!
//! Versions 1 and 2 held each vector as `d` × `f32` (`8 + 4d` bytes a record) and version 1
//! no graph flag nor graph; their vectors are quantized as they are read. Versions 1 to 3
//! have no keyword flag nor section.
//!
//! Only live vectors are written: an erased vector is never part of a snapshot, nor is a
//! link to it. The graph holds record numbers, no vector and no id.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::VectorConfig;
use crate::arena::{Arena, check_codes};
use crate::dot::check_unit;
use crate::error::{IndexError, Result};
use crate::graph::Graph;
use crate::keyword::{KeywordSection, read_section};

const MAGIC: [u8; 8] = *b"MLVECIDX";
/// The version written: quantized vectors, a keyword flag and a graph flag.
const VERSION: u32 = 4;
/// Quantized vectors and a graph flag; still read.
const QUANTIZED_VERSION: u32 = 3;
/// Vectors as `f32`, and a graph flag; still read.
const F32_VERSION: u32 = 2;
/// Vectors as `f32`, no graph; still read.
const FIRST_VERSION: u32 = 1;
const HEADER_LEN: usize = 36;
/// Read buffer of a snapshot load: large reads, few system calls.
const READ_BUFFER: usize = 1 << 20;
/// Offset of the checksum, which covers the header bytes before it.
const CHECKSUM_OFFSET: usize = 32;

/// What a snapshot holds.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) covered_sequence: u64,
    pub(crate) ids: Vec<u64>,
    /// The vectors, record by record.
    pub(crate) arena: Arena,
    /// The graph, when the file holds one built with the index's parameters.
    pub(crate) graph: Option<Graph>,
    /// The keyword partitions, when the file holds them.
    pub(crate) keywords: Option<KeywordSection>,
}

/// Writes a section (the keywords', the graph's) into the snapshot being written.
pub(crate) type SectionWriter<'a> = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()> + 'a>;

/// The sections after a snapshot's records, each written when present.
pub(crate) struct Sections<'a> {
    pub(crate) keywords: Option<SectionWriter<'a>>,
    pub(crate) graph: Option<SectionWriter<'a>>,
}

/// Writes `records` (id, then a quantized vector's scale and `dimension` codes) to `path`
/// atomically: into a
/// temporary file in the same directory, synced, renamed over `path`, then the directory
/// synced, so a crash leaves either the old snapshot or the new one, never a mix.
pub(crate) fn write<'a>(
    path: &Path,
    dimension: usize,
    covered_sequence: u64,
    count: usize,
    records: impl Iterator<Item = (u64, (f32, &'a [i8]))>,
    sections: Sections<'_>,
) -> Result<()> {
    let temp = temp_path(path)?;
    let result = write_file(&temp, dimension, covered_sequence, count, records, sections)
        .and_then(|()| fs::rename(&temp, path).map_err(IndexError::from))
        .and_then(|()| sync_parent(path));
    if result.is_err() {
        // Best effort: the temporary file holds nothing the caller relies on.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Removes what a save killed mid-write left beside `path`, and says whether there was
/// anything. Every save truncates the same temporary file, so it would go at the next save
/// anyway; until then it held vectors of that time, an erased one's included, outside every
/// erasure's reach.
pub(crate) fn remove_unfinished(path: &Path) -> Result<bool> {
    match fs::remove_file(temp_path(path)?) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err.into()),
    }
}

fn temp_path(path: &Path) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        IndexError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("snapshot path {} has no file name", path.display()),
        ))
    })?;
    let mut temp_name = name.to_os_string();
    temp_name.push(".tmp");
    Ok(path.with_file_name(temp_name))
}

fn write_file<'a>(
    temp: &Path,
    dimension: usize,
    covered_sequence: u64,
    count: usize,
    records: impl Iterator<Item = (u64, (f32, &'a [i8]))>,
    sections: Sections<'_>,
) -> Result<()> {
    let dimension_u32 = u32::try_from(dimension).map_err(|_| IndexError::InvalidConfig {
        field: "dimension",
        reason: "does not fit the snapshot format".into(),
    })?;
    let mut header = [0u8; HEADER_LEN];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&dimension_u32.to_le_bytes());
    header[16..24].copy_from_slice(&covered_sequence.to_le_bytes());
    header[24..32].copy_from_slice(&(count as u64).to_le_bytes());

    let mut file = BufWriter::new(File::create(temp)?);
    file.write_all(&header)?;
    // The checksum is patched in once the rest has streamed through the hasher, so the body
    // is converted to bytes only once and never held in memory as a whole.
    let mut out = Checksummed {
        inner: file,
        crc: crc32fast::Hasher::new(),
    };
    out.crc.update(&header[..CHECKSUM_OFFSET]);
    let mut record = Vec::with_capacity(12 + dimension);
    let mut written = 0usize;
    for (id, (scale, codes)) in records {
        debug_assert_eq!(codes.len(), dimension);
        record.clear();
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&scale.to_le_bytes());
        record.extend(codes.iter().map(|&code| code.to_le_bytes()[0]));
        out.write_all(&record)?;
        written += 1;
    }
    debug_assert_eq!(written, count);
    for section in [sections.keywords, sections.graph] {
        match section {
            Some(section) => {
                out.write_all(&[1])?;
                section(&mut out)?;
            }
            None => out.write_all(&[0])?,
        }
    }
    let crc = out.crc.finalize();
    let mut file = out
        .inner
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.seek(SeekFrom::Start(CHECKSUM_OFFSET as u64))?;
    file.write_all(&crc.to_le_bytes())?;
    file.sync_all()?;
    Ok(())
}

/// A writer that feeds what it writes, or a reader what it reads, to a CRC.
struct Checksummed<T> {
    inner: T,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(bytes)?;
        self.crc.update(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Checksummed<R> {
    fn read(&mut self, bytes: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(bytes)?;
        self.crc.update(&bytes[..read]);
        Ok(read)
    }
}

/// Makes the rename durable: on Unix a rename is recorded in the directory, which has to be
/// synced on its own.
fn sync_parent(path: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        File::open(parent)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Reads and verifies the snapshot at `path` written for an index of `config`.
///
/// Every check that can fail reports [`IndexError::Corrupted`]; nothing here panics, and
/// whatever the header or a count claims, what it allocates is bounded by the file's actual
/// size (twice it at most, for the keyword postings' in-memory form).
pub(crate) fn read(path: &Path, config: &VectorConfig) -> Result<Snapshot> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    parse(BufReader::with_capacity(READ_BUFFER, file), len, config)
}

/// Reads a snapshot of `len` bytes from `source` for an index of `config`. The records and
/// the graph stream into what they become (a file read whole first held every vector twice
/// while loading: 1.5 GB more at a million), and the checksum, which covers them, is verified
/// before anything is answered.
pub(crate) fn parse(source: impl Read, len: u64, config: &VectorConfig) -> Result<Snapshot> {
    let dimension = config.dimension;
    let corrupted = |detail: String| IndexError::Corrupted(detail);
    let mut source = Checksummed {
        inner: source,
        crc: crc32fast::Hasher::new(),
    };
    let mut header = [0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Err(corrupted(format!(
            "{len} bytes is shorter than the {HEADER_LEN}-byte header"
        )));
    }
    read_exact(&mut source.inner, &mut header)?;
    let field = |range: std::ops::Range<usize>| &header[range];
    if field(0..8) != MAGIC {
        return Err(corrupted(
            "not a memlayer vector snapshot (bad magic)".into(),
        ));
    }
    let version = u32::from_le_bytes(le(field(8..12)));
    if !(FIRST_VERSION..=VERSION).contains(&version) {
        return Err(corrupted(format!(
            "format version {version}, this build reads {FIRST_VERSION} to {VERSION}"
        )));
    }
    let quantized = version >= QUANTIZED_VERSION;
    let file_dimension = u32::from_le_bytes(le(field(12..16)));
    if usize::try_from(file_dimension).ok() != Some(dimension) {
        return Err(corrupted(format!(
            "dimension {file_dimension}, the index expects {dimension}"
        )));
    }
    let covered_sequence = u64::from_le_bytes(le(field(16..24)));
    let count = u64::from_le_bytes(le(field(24..32)));
    let stored_crc = u32::from_le_bytes(le(field(32..36)));
    source.crc.update(&header[..CHECKSUM_OFFSET]);

    // The count is checked against the real length before anything is allocated.
    let rest_len = len - HEADER_LEN as u64;
    let record_len = if quantized {
        12 + dimension
    } else {
        8 + 4 * dimension
    };
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| {
            count
                .checked_mul(record_len)
                .is_some_and(|body| body as u64 <= rest_len)
        })
        .ok_or_else(|| {
            corrupted(format!(
                "header announces {count} records of {record_len} bytes, the file has \
                 {rest_len} bytes after the header"
            ))
        })?;
    let mut ids = Vec::with_capacity(count);
    let mut arena = Arena::with_capacity(dimension, count);
    // One record's vector at a time, reused.
    let (mut codes, mut components) = (Vec::new(), Vec::new());
    // A matching checksum means we wrote this, but an index must never hold a vector it
    // would have refused on insert, so the invariant is checked rather than trusted; what
    // the checks find is reported after the checksum, which names damage first.
    let mut invalid = None;
    let mut record = vec![0u8; record_len];
    for _ in 0..count {
        read_exact(&mut source, &mut record)?;
        let (id, vector) = record.split_at(8);
        let id = u64::from_le_bytes(le(id));
        let checked = if quantized {
            let (scale, bytes) = vector.split_at(4);
            let scale = f32::from_le_bytes(le(scale));
            codes.clear();
            codes.extend(bytes.iter().map(|&byte| i8::from_le_bytes([byte])));
            arena.push_codes(scale, &codes);
            check_codes(scale, &codes)
        } else {
            let (vector, _) = vector.as_chunks::<4>();
            components.clear();
            components.extend(vector.iter().map(|c| f32::from_le_bytes(*c)));
            arena.push(&components);
            check_unit(&components)
        };
        if invalid.is_none()
            && let Err(reason) = checked
        {
            invalid = Some(format!("vector of id {id}: {reason}"));
        }
        ids.push(id);
    }
    let mut trailer_len = rest_len - (count * record_len) as u64;
    let keywords = if version == VERSION {
        read_keywords(&mut source, &mut trailer_len)
    } else {
        Ok(None)
    };
    let graph = match (version, trailer_len) {
        _ if keywords.is_err() => Ok(None),
        (FIRST_VERSION, 0) => Ok(None),
        (_, 0) => Err(corrupted("the graph flag is missing".into())),
        (F32_VERSION..=VERSION, _) => {
            let mut flag = [0u8];
            read_exact(&mut source, &mut flag)?;
            match flag {
                [0] if trailer_len == 1 => Ok(None),
                [1] => Graph::read(&mut source, trailer_len - 1, count, config.graph_params()),
                _ => Err(trailing(trailer_len)),
            }
        }
        _ => Err(trailing(trailer_len)),
    };
    // What a failed check left unread still counts towards the checksum.
    io::copy(&mut source, &mut io::sink())?;
    if source.crc.finalize() != stored_crc {
        return Err(corrupted("checksum mismatch".into()));
    }
    let keywords = keywords?;
    let graph = graph?;
    if let Some(invalid) = invalid {
        return Err(corrupted(invalid));
    }
    Ok(Snapshot {
        covered_sequence,
        ids,
        arena,
        graph,
        keywords,
    })
}

/// The keyword flag and section of a version 4 file, from the `trailer_len` bytes after its
/// records, less what they took.
fn read_keywords(source: &mut impl Read, trailer_len: &mut u64) -> Result<Option<KeywordSection>> {
    let mut flag = [0u8];
    if *trailer_len == 0 {
        return Err(IndexError::Corrupted("the keyword flag is missing".into()));
    }
    read_exact(source, &mut flag)?;
    *trailer_len -= 1;
    match flag {
        [0] => Ok(None),
        [1] => {
            let mut section = source.take(*trailer_len);
            let keywords = read_section(&mut section)?;
            *trailer_len = section.limit();
            Ok(Some(keywords))
        }
        _ => Err(IndexError::Corrupted(
            "the keyword flag is not 0 or 1".into(),
        )),
    }
}

fn trailing(len: u64) -> IndexError {
    IndexError::Corrupted(format!("{len} unexpected bytes after the records"))
}

/// `Read::read_exact`, with a source shorter than its announced length reported as damage.
pub(crate) fn read_exact(source: &mut impl Read, buffer: &mut [u8]) -> Result<()> {
    source.read_exact(buffer).map_err(|error| {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            IndexError::Corrupted("the file ended early".into())
        } else {
            IndexError::Io(error)
        }
    })
}

/// Copies a header field (always of the right length) into an array.
fn le<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}
