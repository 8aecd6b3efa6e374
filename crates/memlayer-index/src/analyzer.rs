//! Text analysis for the keyword index: lower-casing, Unicode word segmentation, identifiers
//! kept whole, English stop words and Snowball stemming.

use std::fmt;

use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

/// Lucene's English stop words (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`, 33 words).
///
/// Chosen over NLTK's 179-word list, which also drops pronouns and auxiliaries ("i", "my",
/// "you", "did"): in chat, "my flight" and "your flight" are different memories, and BM25's
/// idf already discounts words that occur everywhere. Sorted, for binary search.
const STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// Characters that join the parts of an identifier such as `ORD-2291`, `a.b@example.com` or
/// `build_42`. Unicode word segmentation splits at most of them.
const JOINERS: &[char] = &['-', '_', '@', '.', '/', ':', '#', '+'];

/// Turns text into index terms, for documents and queries alike.
///
/// Text is split at white space into chunks, and leading and trailing punctuation is trimmed.
/// A chunk that looks like an identifier — parts joined by `-_@./:#+` with a digit or an `@`
/// somewhere, like `ORD-2291` or `jane.doe@example.com` — becomes one term, lower-cased and
/// never stemmed. Every chunk is also segmented into Unicode words (UAX #29), so the parts of
/// an identifier (`ord`, `2291`) match as well. Words are lower-cased, Lucene's English stop
/// words are dropped, and words without digits are stemmed with Snowball's English stemmer
/// unless the analyzer was built without stemming. Numbers such as `4711` or `3.14` stay as
/// they are.
pub struct Analyzer {
    stemmer: Option<Stemmer>,
}

impl Analyzer {
    /// The default analyzer: stop words and Snowball English stemming ("booked", "booking"
    /// and "books" all become "book").
    pub fn english() -> Self {
        Self {
            stemmer: Some(Stemmer::create(Algorithm::English)),
        }
    }

    /// Like [`english`](Self::english) but without stemming: only exact word forms match.
    pub fn english_unstemmed() -> Self {
        Self { stemmer: None }
    }

    /// The terms of `text`, in order, with repetitions.
    pub fn tokens(&self, text: &str) -> Vec<String> {
        self.tokens_stemmed_by(text, |word| self.stem(word))
    }

    /// The terms of `text` with every word that may be stemmed going through `stem`, which
    /// must answer what [`Analyzer::stem`] would: the keyword index passes a cache of it,
    /// since Snowball stemming is most of the analysis time and a conversation repeats its
    /// words.
    pub(crate) fn tokens_stemmed_by(
        &self,
        text: &str,
        mut stem: impl FnMut(String) -> String,
    ) -> Vec<String> {
        let mut tokens = Vec::new();
        for chunk in text.split_whitespace() {
            let core = chunk.trim_matches(|c: char| !c.is_alphanumeric());
            if core.is_empty() {
                continue;
            }
            let whole = is_identifier(core).then(|| core.to_lowercase());
            for word in core.unicode_words() {
                let word = word.to_lowercase();
                if whole.as_deref() == Some(word.as_str()) || is_stop_word(&word) {
                    continue;
                }
                tokens.push(stem(word));
            }
            tokens.extend(whole);
        }
        tokens
    }

    /// The stem of a lower-cased `word`; words with digits, and every word without a
    /// stemmer, stay as they are.
    pub(crate) fn stem(&self, word: String) -> String {
        match &self.stemmer {
            Some(stemmer) if !word.chars().any(|c| c.is_numeric()) => {
                // Snowball's English rules know the ASCII apostrophe only ("user's").
                let word = word.replace('\u{2019}', "'");
                stemmer.stem(&word).into_owned()
            }
            _ => word,
        }
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Self::english()
    }
}

impl Clone for Analyzer {
    fn clone(&self) -> Self {
        if self.stemmer.is_some() {
            Self::english()
        } else {
            Self::english_unstemmed()
        }
    }
}

impl fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Analyzer")
            .field("stemming", &self.stemmer.is_some())
            .finish()
    }
}

fn is_stop_word(word: &str) -> bool {
    STOP_WORDS.binary_search(&word).is_ok()
}

fn is_identifier(core: &str) -> bool {
    core.contains(JOINERS)
        && (core.contains('@') || core.chars().any(|c| c.is_ascii_digit()))
        && core
            .chars()
            .all(|c| c.is_alphanumeric() || JOINERS.contains(&c))
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check(analyzer: &Analyzer, text: &str, expected: Expect) {
        expected.assert_eq(&analyzer.tokens(text).join(" "));
    }

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.is_sorted());
    }

    #[test]
    fn lower_cases_drops_stop_words_and_stems() {
        check(
            &Analyzer::english(),
            "The Hotel was BOOKED for the booking of their flights, isn't it?",
            expect!["hotel book book flight isn't"],
        );
    }

    #[test]
    fn without_stemming_keeps_word_forms() {
        check(
            &Analyzer::english_unstemmed(),
            "The Hotel was BOOKED for the booking",
            expect!["hotel booked booking"],
        );
    }

    #[test]
    fn keeps_numbers_and_identifiers_whole_and_their_parts() {
        check(
            &Analyzer::english(),
            "Order ORD-2291 (ticket #4711) costs 3.14 EUR; mail jane.doe@example.com, build_42.",
            expect![
                "order ord 2291 ord-2291 ticket 4711 cost 3.14 eur mail jane.do example.com jane.doe@example.com build_42"
            ],
        );
    }

    #[test]
    fn segments_unicode_words_and_normalises_apostrophes() {
        check(
            &Analyzer::english(),
            "Zürich’s café — naïve résumés 東京",
            expect!["zürich café naïv résumé 東 京"],
        );
    }
}
