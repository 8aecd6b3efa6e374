//! Token counting with OpenAI's BPE encodings, via `bpe-openai`, which embeds the encoding
//! tables in the binary and so works offline. Its counts are tiktoken's (checked against
//! `tiktoken-rs` in the tests) at half the cost for cl100k: tiktoken-rs's pretokenizer, a
//! backtracking regex, was a tenth of an append's request-thread time.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::str::FromStr;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::MemoryError;

/// Texts at least this long (in bytes) have their counts remembered. Counting costs about
/// 0.25 µs a token (tiktoken-rs's figure; bpe-openai's is half), and every context counts
/// the same long texts again — its summary (1,400 tokens in docs/benchmarks.md, counted
/// twice per context), its rendered facts — while hashing a text costs a few nanoseconds a
/// byte; for short texts the two are alike.
const MEMO_MIN_LEN: usize = 512;
/// Counts remembered at most; when full, the memo starts afresh.
const MEMO_CAPACITY: usize = 4_096;

/// Token counts of long texts by encoding and a keyed 64-bit hash of the text. It holds no
/// text, so nothing in it needs erasing; a hash collision (a chance of about 2^-52 per
/// lookup at full capacity) would only misstate one piece's size in a budget.
static MEMO: LazyLock<Mutex<Memo>> = LazyLock::new(|| {
    Mutex::new(Memo {
        hasher: RandomState::new(),
        counts: HashMap::new(),
    })
});

struct Memo {
    hasher: RandomState,
    counts: HashMap<(TokenEncoding, u64), u32>,
}

/// A BPE encoding to count tokens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TokenEncoding {
    /// GPT-4 and GPT-3.5 models; the default.
    #[default]
    Cl100kBase,
    /// GPT-4o and newer models.
    O200kBase,
}

impl TokenEncoding {
    /// Tokens in `text`, with special-token markers counted as ordinary text (a user who types
    /// `<|endoftext|>` does not end the prompt).
    ///
    /// The first call for an encoding loads its tables (≈35 ms for cl100k, ≈65 ms for
    /// o200k); later calls share them.
    pub fn count(self, text: &str) -> u32 {
        if text.len() < MEMO_MIN_LEN {
            return self.count_uncached(text);
        }
        let key = {
            let memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (self, memo.hasher.hash_one(text));
            if let Some(&count) = memo.counts.get(&key) {
                return count;
            }
            key
        };
        // Counted outside the lock: a long text takes a while.
        let count = self.count_uncached(text);
        let mut memo = MEMO.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.counts.len() >= MEMO_CAPACITY {
            memo.counts.clear();
        }
        memo.counts.insert(key, count);
        count
    }

    fn count_uncached(self, text: &str) -> u32 {
        let tokenizer = match self {
            Self::Cl100kBase => bpe_openai::cl100k_base(),
            Self::O200kBase => bpe_openai::o200k_base(),
        };
        u32::try_from(tokenizer.count(text)).unwrap_or(u32::MAX)
    }

    /// The encoding's name as OpenAI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cl100kBase => "cl100k_base",
            Self::O200kBase => "o200k_base",
        }
    }
}

impl fmt::Display for TokenEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TokenEncoding {
    type Err = MemoryError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "cl100k_base" => Ok(Self::Cl100kBase),
            "o200k_base" => Ok(Self::O200kBase),
            other => Err(MemoryError::UnknownEncoding(other.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_reference_tokenizations() {
        // Reference counts from OpenAI's tiktoken for the same strings.
        assert_eq!(TokenEncoding::Cl100kBase.count("hello world"), 2);
        assert_eq!(TokenEncoding::Cl100kBase.count(""), 0);
        assert_eq!(TokenEncoding::O200kBase.count("hello world"), 2);
    }

    #[test]
    fn remembered_counts_are_the_counts() {
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(40);
        for encoding in [TokenEncoding::Cl100kBase, TokenEncoding::O200kBase] {
            let counted = encoding.count_uncached(&long);
            assert_eq!(encoding.count(&long), counted);
            // The second call is answered from the memo, per encoding.
            assert_eq!(encoding.count(&long), counted);
        }
        let other = format!("{long}!");
        assert_eq!(
            TokenEncoding::Cl100kBase.count(&other),
            TokenEncoding::Cl100kBase.count_uncached(&other)
        );
    }

    #[test]
    fn special_token_markers_count_as_text() {
        assert!(TokenEncoding::Cl100kBase.count("<|endoftext|>") > 1);
    }

    /// tiktoken's own count of `text` in `encoding`, special markers as text.
    fn tiktoken_count(encoding: TokenEncoding, text: &str) -> u32 {
        let reference = match encoding {
            TokenEncoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            TokenEncoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
        };
        u32::try_from(reference.count_ordinary(text)).unwrap()
    }

    #[test]
    fn counts_are_tiktokens_where_pretokenizers_differ() {
        // What the pretokenizer patterns treat specially: contractions in any case, runs of
        // digits (split in threes), whitespace before a word or at the end, newlines,
        // punctuation runs, letters of other scripts, marks and joined emoji.
        let texts = [
            "I'm sure you're right, WE'LL see; they'D know. O'Neil's 'tis",
            "1234567890 12 123 1234 ١٢٣٤ 𝟙𝟚𝟛 3.14159 1,000,000",
            "  leading   and  trailing   \n\n\n   x\t\ty\r\n  ",
            "!!! ... ??? --- ;;; :) (╯°□°)╯︵ ┻━┻",
            "日本語のテキスト、中文文本。한국어 텍스트 русский текст עברית العربية",
            "emoji 👩\u{200d}👩\u{200d}👧 ✈\u{fe0f} 🇵🇹 e\u{301}te\u{301}",
            "<|endoftext|><|fim_prefix|> text <|im_start|>",
            "CamelCaseWords snake_case_words kebab-case-words https://example.com/a?b=c",
        ];
        for encoding in [TokenEncoding::Cl100kBase, TokenEncoding::O200kBase] {
            for text in texts {
                assert_eq!(
                    encoding.count_uncached(text),
                    tiktoken_count(encoding, text),
                    "{encoding}: {text:?}"
                );
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn counts_are_tiktokens(
            // Words, digits, contractions, whitespace, punctuation and other scripts in any
            // order: the pieces the pretokenizers split on.
            text in r"([a-zA-Z]{1,8}|[0-9]{1,5}|'[sStTmMdD]|'(ll|ve|re|LL|VE|RE)|[ \t]{1,3}|\n{1,2}|[.,!?;:()-]{1,3}|[à-ÿ]{1,3}|[ぁ-ゔ]{1,4}|[一-龥]{1,3}|[😀-🙏])*",
            arbitrary in proptest::prelude::any::<String>(),
        ) {
            for encoding in [TokenEncoding::Cl100kBase, TokenEncoding::O200kBase] {
                proptest::prop_assert_eq!(
                    encoding.count_uncached(&text),
                    tiktoken_count(encoding, &text),
                    "{}: {:?}", encoding, text
                );
                proptest::prop_assert_eq!(
                    encoding.count_uncached(&arbitrary),
                    tiktoken_count(encoding, &arbitrary),
                    "{}: {:?}", encoding, arbitrary
                );
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for encoding in [TokenEncoding::Cl100kBase, TokenEncoding::O200kBase] {
            assert_eq!(
                encoding.name().parse::<TokenEncoding>().ok(),
                Some(encoding)
            );
        }
        assert!("gpt2".parse::<TokenEncoding>().is_err());
    }
}
