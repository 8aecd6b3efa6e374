//! The keyword index: BM25 over analysed documents, with postings that are really deleted
//! when a document is removed, alone ([`KeywordIndex`]) or in partitions that share the
//! analyzer but nothing a score depends on ([`KeywordPartitions`]).

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::hash::Hash;

use crate::analyzer::Analyzer;
use crate::hybrid::KeywordPostings;
use crate::topk::{IdFilter, TopK};

/// BM25 term-frequency saturation.
const K1: f32 = 1.2;
/// BM25 document-length normalisation.
const B: f32 = 0.75;
/// Most words whose stem the index remembers; past it the memo starts over. Chat uses far
/// fewer distinct words, so the bound only matters for unusual input.
const MAX_REMEMBERED_STEMS: usize = 100_000;

/// A document's occurrences of one term.
#[derive(Debug, Clone, Copy)]
struct Posting {
    document: u64,
    frequency: u32,
}

#[derive(Debug, Default)]
struct Term {
    /// Empty while the term id is on the free list.
    text: String,
    /// Sorted by document id. Never empty while the term is in the vocabulary.
    postings: Vec<Posting>,
}

#[derive(Debug)]
struct Document {
    /// Number of terms, repetitions included: BM25's document length.
    length: u32,
    /// The distinct terms, so removal can find every posting of the document.
    terms: Box<[u32]>,
}

/// A document's terms as the analyzer made them: what an index adds.
struct Analysed {
    /// Each distinct term with its number of occurrences.
    frequencies: HashMap<String, u32>,
    /// Number of terms, repetitions included.
    length: u32,
}

/// The analyzer, and its memo of the stem of each word it has stemmed.
#[derive(Debug)]
struct Analysis {
    analyzer: Analyzer,
    /// The analyzer's stem of each word seen. Indexing at start analyses every stored
    /// message, and stemming was most of that; the memo halved the time to index them
    /// (docs/benchmarks.md, "Index design decisions").
    /// Searches do not use it, so it changes neither what nor how fast a search answers.
    stems: HashMap<String, String>,
}

/// `analyzer`'s stem of `word`, from `stems` when it was stemmed before.
fn remembered_stem(
    analyzer: &Analyzer,
    stems: &mut HashMap<String, String>,
    word: String,
) -> String {
    if let Some(stem) = stems.get(&word) {
        return stem.clone();
    }
    let stem = analyzer.stem(word.clone());
    stems.insert(word, stem.clone());
    stem
}

impl Analysis {
    fn new(analyzer: Analyzer) -> Self {
        Self {
            analyzer,
            stems: HashMap::new(),
        }
    }

    /// The terms of a document's `text`, stemmed through the memo.
    fn document(&mut self, text: &str) -> Analysed {
        if self.stems.len() > MAX_REMEMBERED_STEMS {
            self.stems.clear();
        }
        let (analyzer, stems) = (&self.analyzer, &mut self.stems);
        let tokens =
            analyzer.tokens_stemmed_by(text, |word| remembered_stem(analyzer, stems, word));
        let mut frequencies: HashMap<String, u32> = HashMap::new();
        let mut length = 0u32;
        for token in tokens {
            *frequencies.entry(token).or_default() += 1;
            length = length.saturating_add(1);
        }
        Analysed {
            frequencies,
            length,
        }
    }

    /// Forgets every remembered stem: they are words of the indexed texts, and a removal may
    /// be an erasure, after which no word of the text may stay behind. The memo does not
    /// know which text a word came from, so it forgets them all.
    fn forget_stems(&mut self) {
        self.stems.clear();
    }
}

/// Documents with their postings and BM25 statistics (document count, document frequencies,
/// average length): the documents a search ranks, and the only ones its scores depend on.
#[derive(Debug, Default)]
struct Postings {
    vocabulary: HashMap<String, u32>,
    /// Indexed by term id.
    terms: Vec<Term>,
    /// Term ids whose term was dropped, for reuse.
    free_terms: Vec<u32>,
    /// Fx-hashed, as the scores a search adds up per posting (see [`KeywordIndex`]).
    documents: FxHashMap<u64, Document>,
    /// Sum of the lengths of all documents, for the average document length.
    total_length: u64,
}

impl Postings {
    /// Adds document `id` with its `analysed` terms, replacing the terms it had.
    fn add(&mut self, id: u64, analysed: Analysed) {
        self.remove(id);
        let mut terms = Vec::with_capacity(analysed.frequencies.len());
        for (text, frequency) in analysed.frequencies {
            let term = self.term_id(text);
            let postings = &mut self.terms[term as usize].postings;
            // Ids usually grow (messages are appended), so this is mostly a push.
            let at = postings.partition_point(|p| p.document < id);
            postings.insert(
                at,
                Posting {
                    document: id,
                    frequency,
                },
            );
            terms.push(term);
        }
        self.total_length += u64::from(analysed.length);
        self.documents.insert(
            id,
            Document {
                length: analysed.length,
                terms: terms.into_boxed_slice(),
            },
        );
    }

    /// Takes document `id` and its postings out, and every term left without postings;
    /// returns whether it was there.
    fn remove(&mut self, id: u64) -> bool {
        let Some(document) = self.documents.remove(&id) else {
            return false;
        };
        self.total_length -= u64::from(document.length);
        for &term_id in &document.terms {
            let term = &mut self.terms[term_id as usize];
            if let Ok(at) = term.postings.binary_search_by_key(&id, |p| p.document) {
                term.postings.remove(at);
            }
            if term.postings.is_empty() {
                self.vocabulary.remove(&term.text);
                *term = Term::default();
                self.free_terms.push(term_id);
            }
        }
        true
    }

    /// See [`KeywordIndex::search`]; `query` is the analysed query. Visits the postings of
    /// the query's terms in these documents only, and offers `filter` each document scored.
    fn search(&self, query: &[String], k: usize, filter: Option<IdFilter<'_>>) -> Vec<(u64, f32)> {
        if self.documents.is_empty() || k == 0 {
            return Vec::new();
        }
        let mut query_terms: Vec<u32> = query
            .iter()
            .filter_map(|token| self.vocabulary.get(token).copied())
            .collect();
        query_terms.sort_unstable();
        query_terms.dedup();

        let documents = self.documents.len() as f32;
        let average_length = self.total_length as f32 / documents;
        let mut scores: FxHashMap<u64, f32> = FxHashMap::default();
        for term in query_terms {
            let postings = &self.terms[term as usize].postings;
            let df = postings.len() as f32;
            // Lucene's idf: the +1 keeps it positive for terms in more than half the
            // documents, where Robertson–Spärck Jones' original goes negative.
            let idf = (1.0 + (documents - df + 0.5) / (df + 0.5)).ln();
            for posting in postings {
                let length = self.documents[&posting.document].length as f32;
                let tf = posting.frequency as f32;
                let norm = K1 * (1.0 - B + B * length / average_length);
                *scores.entry(posting.document).or_default() += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        let mut top = TopK::new(k);
        for (id, score) in scores {
            if filter.is_none_or(|f| f(id)) {
                top.push(id, score);
            }
        }
        top.into_sorted()
    }

    fn term_id(&mut self, text: String) -> u32 {
        if let Some(&id) = self.vocabulary.get(&text) {
            return id;
        }
        let id = match self.free_terms.pop() {
            Some(id) => id,
            None => {
                self.terms.push(Term::default());
                u32::try_from(self.terms.len() - 1).expect("fewer than 2^32 distinct terms")
            }
        };
        self.terms[id as usize].text = text.clone();
        self.vocabulary.insert(text, id);
        id
    }
}

/// BM25 ranking (k1 = 1.2, b = 0.75) of documents `(u64 id, text)`.
///
/// Removing a document deletes its postings, and a term left without postings is dropped
/// from the vocabulary, so an erased text leaves no word behind in the index.
///
/// Document ids are hashed with the unkeyed Fx hash, as [`VectorIndex`](crate::VectorIndex)'s
/// are (the same rule: ids the program makes); terms, which are text, with SipHash.
#[derive(Debug)]
pub struct KeywordIndex {
    analysis: Analysis,
    postings: Postings,
}

impl Default for KeywordIndex {
    fn default() -> Self {
        Self::new(Analyzer::default())
    }
}

impl KeywordIndex {
    /// An empty index whose documents and queries go through `analyzer`.
    pub fn new(analyzer: Analyzer) -> Self {
        Self {
            analysis: Analysis::new(analyzer),
            postings: Postings::default(),
        }
    }

    /// The analyzer documents and queries go through.
    pub fn analyzer(&self) -> &Analyzer {
        &self.analysis.analyzer
    }

    /// How many documents the index holds.
    pub fn len(&self) -> usize {
        self.postings.documents.len()
    }

    /// Whether the index holds no document.
    pub fn is_empty(&self) -> bool {
        self.postings.documents.is_empty()
    }

    /// Whether a document `id` is indexed.
    pub fn contains(&self, id: u64) -> bool {
        self.postings.documents.contains_key(&id)
    }

    /// How many distinct terms the indexed documents contain.
    pub fn vocabulary_len(&self) -> usize {
        self.postings.vocabulary.len()
    }

    /// Indexes `text` as document `id`, replacing the text it had.
    pub fn add(&mut self, id: u64, text: &str) {
        let analysed = self.analysis.document(text);
        self.postings.add(id, analysed);
    }

    /// Removes document `id` and its postings; returns whether it was indexed. It also
    /// forgets every remembered stem: they are words of the indexed texts, and a removal may
    /// be an erasure, after which no word of the text may stay behind.
    pub fn remove(&mut self, id: u64) -> bool {
        let removed = self.postings.remove(id);
        if removed {
            self.analysis.forget_stems();
        }
        removed
    }

    /// The (at most) `k` documents that best match `query` by BM25 among those whose id
    /// passes `filter`, as `(id, score)`, best first; equal scores in id order. Documents
    /// that share no term with the query are not returned. A term repeated in the query
    /// counts once.
    pub fn search(&self, query: &str, k: usize, filter: Option<IdFilter<'_>>) -> Vec<(u64, f32)> {
        self.postings
            .search(&self.analysis.analyzer.tokens(query), k, filter)
    }
}

/// Keyword indexes of many partitions (say, one per user of each tenant) that share one
/// analyzer and its memo of stems.
///
/// Each partition is a [`KeywordIndex`] of its own as far as ranking goes: a search reads
/// one partition, visits only its postings, and scores with its statistics alone (its
/// document count, document frequencies and average length). In one index for everyone,
/// another partition's documents changed a partition's scores, so one tenant could tell
/// from its own scores how common a word was in another's texts, and every query paid for
/// everyone's postings of its words.
///
/// The memo of stems is shared rather than kept per partition: a word's stem is the same in
/// every partition, and thousands of partitions would each hold (and warm up) a copy of the
/// same words. It keeps [`KeywordIndex`]'s rule: any removal, in any partition, forgets
/// every remembered stem, since a removal may be an erasure and the memo cannot tell which
/// text a word came from. Searches do not consult the memo, so no partition's words change
/// another's answers or their speed.
///
/// A document id belongs to one partition: the caller names it on every call, and must
/// name the same one to add, find and remove a document.
#[derive(Debug)]
pub(crate) struct KeywordPartitions<P> {
    analysis: Analysis,
    /// No partition is empty: removing a partition's last document drops the partition, so
    /// neither a partition nor its key outlives the last text it held.
    partitions: HashMap<P, Postings>,
}

impl<P> Default for KeywordPartitions<P> {
    fn default() -> Self {
        Self::new(Analyzer::default())
    }
}

impl<P> KeywordPartitions<P> {
    /// No partition yet; documents and queries go through `analyzer`.
    pub(crate) fn new(analyzer: Analyzer) -> Self {
        Self {
            analysis: Analysis::new(analyzer),
            partitions: HashMap::new(),
        }
    }
}

impl<P: Eq + Hash> KeywordPartitions<P> {
    /// Keeps the documents `keep` accepts (asked with each one's partition and id) and drops
    /// the rest, and every partition left empty: a start takes out of a snapshot's postings
    /// what the store no longer holds before anything is served.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&P, u64) -> bool) {
        self.partitions.retain(|partition, postings| {
            let gone: Vec<u64> = postings
                .documents
                .keys()
                .copied()
                .filter(|&id| !keep(partition, id))
                .collect();
            for id in gone {
                postings.remove(id);
            }
            !postings.documents.is_empty()
        });
    }

    /// How many documents all partitions hold.
    pub(crate) fn documents(&self) -> usize {
        self.partitions
            .values()
            .map(|postings| postings.documents.len())
            .sum()
    }
}

#[cfg(feature = "fuzzing")]
impl<P: Eq + Hash + Clone> KeywordPartitions<P> {
    /// Each partition's key with its first term (the fuzz target searches them).
    pub(crate) fn first_terms(&self) -> Vec<(P, String)> {
        self.partitions
            .iter()
            .filter_map(|(key, postings)| {
                let term = postings.vocabulary.keys().next()?;
                Some((key.clone(), term.clone()))
            })
            .collect()
    }

    /// [`KeywordPostings::search`] in `partition` for terms analysed already.
    pub(crate) fn search_terms(
        &self,
        partition: &P,
        terms: &[String],
        k: usize,
    ) -> Vec<(u64, f32)> {
        self.partitions
            .get(partition)
            .map_or_else(Vec::new, |postings| postings.search(terms, k, None))
    }
}

impl<P: Eq + Hash + Clone> KeywordPostings for KeywordPartitions<P> {
    type Partition = P;

    /// Whether document `id` is indexed in `partition`.
    fn contains(&self, partition: &P, id: u64) -> bool {
        self.partitions
            .get(partition)
            .is_some_and(|postings| postings.documents.contains_key(&id))
    }

    /// Indexes `text` as document `id` of `partition`, replacing the text it had there.
    fn add(&mut self, partition: &P, id: u64, text: &str) {
        let analysed = self.analysis.document(text);
        match self.partitions.get_mut(partition) {
            Some(postings) => postings.add(id, analysed),
            None => {
                let mut postings = Postings::default();
                postings.add(id, analysed);
                self.partitions.insert(partition.clone(), postings);
            }
        }
    }

    /// Removes document `id` from `partition`, and the partition with its last document;
    /// returns whether it was indexed there. Like [`KeywordIndex::remove`] it forgets every
    /// remembered stem, of every partition.
    fn remove(&mut self, partition: &P, id: u64) -> bool {
        let Some(postings) = self.partitions.get_mut(partition) else {
            return false;
        };
        if !postings.remove(id) {
            return false;
        }
        if postings.documents.is_empty() {
            self.partitions.remove(partition);
        }
        self.analysis.forget_stems();
        true
    }

    /// [`KeywordIndex::search`] over the documents of `partition`, scored with its
    /// statistics; `filter` is asked about the documents of `partition` only.
    fn search(
        &self,
        partition: &P,
        query: &str,
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Vec<(u64, f32)> {
        let Some(postings) = self.partitions.get(partition) else {
            return Vec::new();
        };
        postings.search(&self.analysis.analyzer.tokens(query), k, filter)
    }
}

mod section;

pub(crate) use section::{KeywordSection, PartitionKey, read_section};

#[cfg(test)]
mod tests;
