//! BM25 rankings on a tiny chat corpus, checked against rendered expectations.

use std::collections::HashMap;

use expect_test::{Expect, expect};
use proptest::prelude::*;

use super::{KeywordPartitions, remembered_stem};
use crate::KeywordPostings;
use crate::{Analyzer, KeywordIndex};

const CORPUS: &[(u64, &str)] = &[
    (1, "I booked a table at the Italian restaurant for Friday."),
    (2, "Can you check the booking for my flight to Lisbon?"),
    (
        3,
        "The flight to Lisbon leaves at 7am; order ORD-2291 is confirmed.",
    ),
    (4, "Remind me to water the plants."),
    (5, "My email is jane.doe@example.com and my ticket is 4711."),
    (6, "The restaurant was fully booked, so we cooked at home."),
];

fn corpus() -> KeywordIndex {
    let mut index = KeywordIndex::default();
    for (id, text) in CORPUS {
        index.add(*id, text);
    }
    index
}

fn render(hits: &[(u64, f32)]) -> String {
    hits.iter()
        .map(|(id, score)| format!("{id} {score:.4}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(index: &KeywordIndex, query: &str, expected: Expect) {
    expected.assert_eq(&render(&index.search(query, 10, None)));
}

#[test]
fn ranks_a_small_corpus() {
    let index = corpus();
    check(
        &index,
        "flight to Lisbon",
        expect![[r#"
            2 2.0389
            3 1.8228"#]],
    );
    check(
        &index,
        "restaurant booking",
        expect![[r#"
        1 1.8132
        6 1.7057
        2 0.6863"#]],
    );
    check(&index, "ORD-2291", expect!["3 4.0907"]);
    check(&index, "2291", expect!["3 1.3636"]);
    check(&index, "ticket 4711", expect!["5 2.8798"]);
    check(&index, "jane.doe@example.com", expect!["5 4.3196"]);
}

#[test]
fn score_matches_a_hand_computation() {
    let mut index = KeywordIndex::default();
    index.add(1, "apple banana");
    index.add(2, "apple apple cherry dates");
    index.add(3, "cherry");
    // N = 3, average length 7/3. "banana": df 1, idf = ln(1 + 2.5/1.5) = 0.980829.
    // Document 1: tf 1, length 2: 0.980829 × 2.2 / (1 + 1.2 × (0.25 + 0.75 × 2 / (7/3))).
    let idf = (1.0f32 + 2.5 / 1.5).ln();
    let expected = idf * 2.2 / (1.0 + 1.2 * (0.25 + 0.75 * 2.0 / (7.0 / 3.0)));
    let hits = index.search("banana", 10, None);
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0, 1);
    assert!(
        (hits[0].1 - expected).abs() < 1e-6,
        "{} vs {expected}",
        hits[0].1
    );
}

#[test]
fn stop_words_are_ignored() {
    let index = corpus();
    assert!(index.search("the is at to", 10, None).is_empty());
    assert_eq!(
        index.search("the plants", 10, None),
        index.search("plants", 10, None)
    );
}

#[test]
fn stemming_matches_other_word_forms() {
    let index = corpus();
    let ids = |query| {
        let mut ids: Vec<u64> = index.search(query, 10, None).iter().map(|h| h.0).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids("booking"), vec![1, 2, 6]);
    assert_eq!(ids("booked"), vec![1, 2, 6]);

    let mut unstemmed = KeywordIndex::new(Analyzer::english_unstemmed());
    for (id, text) in CORPUS {
        unstemmed.add(*id, text);
    }
    let hits: Vec<u64> = unstemmed
        .search("booking", 10, None)
        .iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(hits, vec![2]);
}

#[test]
fn filter_and_k_limit_the_result() {
    let index = corpus();
    let even = |id: u64| id.is_multiple_of(2);
    let hits = index.search("booked restaurant flight", 10, Some(&even));
    assert!(hits.iter().all(|(id, _)| id % 2 == 0));
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![2, 6]);
    assert_eq!(index.search("booked restaurant flight", 1, None).len(), 1);
    assert!(index.search("booked", 0, None).is_empty());
}

#[test]
fn removal_deletes_postings_and_vocabulary() {
    let mut index = corpus();
    let vocabulary = index.vocabulary_len();
    assert!(index.analysis.stems.contains_key("plants"));
    assert!(index.remove(4));
    assert!(
        index.analysis.stems.is_empty(),
        "no word of a removed text stays remembered"
    );
    assert!(!index.remove(4));
    assert!(!index.contains(4));
    assert_eq!(index.len(), CORPUS.len() - 1);
    assert!(index.search("plants", 10, None).is_empty());
    // "remind", "water" and "plant" occurred only in document 4 ("me" is no stop word but
    // occurs nowhere else either).
    assert_eq!(index.vocabulary_len(), vocabulary - 4);

    // The statistics are those of an index that never saw the document.
    let mut fresh = KeywordIndex::default();
    for (id, text) in CORPUS.iter().filter(|(id, _)| *id != 4) {
        fresh.add(*id, text);
    }
    assert_eq!(
        index.search("booked flight", 10, None),
        fresh.search("booked flight", 10, None)
    );

    // Removing everything leaves nothing behind; freed term ids are reused.
    for (id, _) in CORPUS {
        index.remove(*id);
    }
    assert!(index.is_empty());
    assert_eq!(index.vocabulary_len(), 0);
    index.add(9, "water");
    assert_eq!(index.search("water", 10, None).len(), 1);
}

#[test]
fn adding_an_existing_id_replaces_its_text() {
    let mut index = corpus();
    index.add(4, "Lisbon hotel");
    assert!(index.search("plants", 10, None).is_empty());
    assert!(index.search("hotel", 10, None).iter().any(|h| h.0 == 4));
    assert_eq!(index.len(), CORPUS.len());
}

#[test]
fn empty_index_and_unknown_terms_find_nothing() {
    assert!(
        KeywordIndex::default()
            .search("anything", 10, None)
            .is_empty()
    );
    assert!(corpus().search("zeppelin", 10, None).is_empty());
    assert!(corpus().search("", 10, None).is_empty());
}

/// The corpus in partition "a", and `others` documents in partition "b" full of the
/// corpus's words.
fn partitioned(others: u64) -> KeywordPartitions<&'static str> {
    let mut partitions = KeywordPartitions::default();
    for (id, text) in CORPUS {
        partitions.add(&"a", *id, text);
    }
    for id in 100..100 + others {
        partitions.add(
            &"b",
            id,
            "The booked flight to Lisbon: restaurant booking ORD-2291.",
        );
    }
    partitions
}

#[test]
fn a_partition_ranks_as_an_index_of_its_own() {
    let alone = corpus();
    let beside_others = partitioned(50);
    let offered = std::cell::RefCell::new(Vec::new());
    let offer = |id: u64| {
        offered.borrow_mut().push(id);
        true
    };
    for query in [
        "flight to Lisbon",
        "restaurant booking",
        "ORD-2291",
        "plants",
    ] {
        assert_eq!(
            beside_others.search(&"a", query, 10, Some(&offer)),
            alone.search(query, 10, None),
            "{query}"
        );
    }
    assert!(
        offered.borrow().iter().all(|id| *id < 100),
        "another partition's documents were scored: {:?}",
        offered.borrow()
    );
    assert_eq!(beside_others.search(&"b", "plants", 10, None), []);
    assert_eq!(beside_others.search(&"c", "flight", 10, None), []);
}

#[test]
fn a_partition_goes_with_its_last_document() {
    let mut partitions = partitioned(2);
    assert!(partitions.contains(&"b", 100));
    assert!(
        !partitions.contains(&"a", 100),
        "an id is found in its partition only"
    );
    assert!(!partitions.remove(&"a", 100));
    assert!(partitions.remove(&"b", 100));
    assert!(!partitions.remove(&"b", 100));
    assert!(partitions.partitions.contains_key("b"));
    assert!(partitions.remove(&"b", 101));
    assert!(!partitions.partitions.contains_key("b"));
    assert!(partitions.search(&"b", "flight", 10, None).is_empty());
    // The other partition is as it was.
    assert_eq!(
        partitions.search(&"a", "flight to Lisbon", 10, None),
        corpus().search("flight to Lisbon", 10, None)
    );
}

#[test]
fn removal_in_any_partition_forgets_every_stem() {
    let mut partitions = partitioned(1);
    assert!(partitions.analysis.stems.contains_key("plants"));
    assert!(partitions.remove(&"b", 100));
    assert!(
        partitions.analysis.stems.is_empty(),
        "the memo cannot tell which text a word came from"
    );
    // Stems are remembered again, and still match the query's.
    partitions.add(&"b", 100, "booking");
    assert!(!partitions.analysis.stems.is_empty());
    assert_eq!(partitions.search(&"b", "booked", 10, None).len(), 1);
}

proptest! {
    /// Remembered stems change nothing: texts analysed one after another with one memo get
    /// the analyzer's own terms, whether the memo is cold or warm.
    #[test]
    fn remembered_stems_are_the_analyzers_stems(
        texts in prop::collection::vec(
            prop::collection::vec(
                prop::sample::select(vec![
                    "booked", "booking", "Books", "user\u{2019}s", "user's", "ORD-2291", "4711",
                    "flights", "flying", "the", "Lisbon", "running", "ran", "généralement",
                    "jane.doe@example.com", "v2", "caf\u{e9}s",
                ]),
                0..30,
            ).prop_map(|words| words.join(" ")),
            1..6,
        )
    ) {
        for analyzer in [Analyzer::english(), Analyzer::english_unstemmed()] {
            let mut stems = HashMap::new();
            for text in &texts {
                let remembered = analyzer
                    .tokens_stemmed_by(text, |word| remembered_stem(&analyzer, &mut stems, word));
                prop_assert_eq!(remembered, analyzer.tokens(text));
            }
        }
    }
}
