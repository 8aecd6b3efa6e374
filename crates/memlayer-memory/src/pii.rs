//! Sanitising personal data out of text that outlives its messages: summaries are persisted
//! and sent to a model, so e-mail addresses, phone numbers, payment card numbers, US social
//! security numbers and IBANs are replaced by a placeholder before a summary is written. The
//! values stay in entity memory, which is derived from the messages per request and so leaves
//! with them when they are erased.
//!
//! Card numbers are only replaced when they pass the Luhn check and IBANs when they pass the
//! ISO 13616 mod-97 check, so order numbers and other long digit runs are left alone.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::{Captures, Regex};

/// What one kind of personal data is replaced with.
const EMAIL: &str = "[email]";
const PHONE: &str = "[phone]";
const CARD: &str = "[card number]";
const SSN: &str = "[ssn]";
const IBAN: &str = "[iban]";

static EMAILS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}").expect("the pattern is valid")
});
static IBANS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
        .expect("the pattern is valid")
});
static CARDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("the pattern is valid"));
static SSNS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b\d{3}-\d{2}-\d{4}\b").expect("the pattern is valid"));
static PHONES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}")
        .expect("the pattern is valid")
});

/// Decides what a match is replaced with; `None` keeps it (a failed checksum).
type Replacement = fn(&str) -> Option<&'static str>;

/// `text` with personal data replaced by placeholders; borrowed when there is none.
pub fn redact_pii(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    let steps: [(&Regex, Replacement); 5] = [
        (&EMAILS, |_| Some(EMAIL)),
        (&IBANS, |found| iban_is_valid(found).then_some(IBAN)),
        (&CARDS, |found| luhn_is_valid(found).then_some(CARD)),
        (&SSNS, |_| Some(SSN)),
        (&PHONES, |found| is_phone_number(found).then_some(PHONE)),
    ];
    for (pattern, replacement) in steps {
        if !pattern.is_match(&out) {
            continue;
        }
        let replaced = pattern.replace_all(&out, |caps: &Captures<'_>| {
            let found = &caps[0];
            replacement(found).map_or_else(|| found.to_owned(), str::to_owned)
        });
        if let Cow::Owned(changed) = replaced {
            out = Cow::Owned(changed);
        }
    }
    out
}

fn digits(text: &str) -> impl Iterator<Item = u32> + '_ {
    text.chars().filter_map(|c| c.to_digit(10))
}

/// The Luhn checksum every payment card number carries.
fn luhn_is_valid(candidate: &str) -> bool {
    let numbers: Vec<u32> = digits(candidate).collect();
    if !(13..=19).contains(&numbers.len()) {
        return false;
    }
    let sum: u32 = numbers
        .iter()
        .rev()
        .enumerate()
        .map(|(position, &digit)| {
            if position % 2 == 1 {
                let doubled = digit * 2;
                if doubled > 9 { doubled - 9 } else { doubled }
            } else {
                digit
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616: the country code and check digits moved to the end, letters as numbers, the
/// whole number modulo 97 is 1.
fn iban_is_valid(candidate: &str) -> bool {
    let compact: String = candidate.chars().filter(|c| !c.is_whitespace()).collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder = 0u32;
    for c in tail.chars().chain(head.chars()) {
        let value = match c.to_digit(36) {
            Some(value) => value,
            None => return false,
        };
        // Letters count as two digits (A = 10 … Z = 35).
        remainder = if value >= 10 {
            (remainder * 100 + value) % 97
        } else {
            (remainder * 10 + value) % 97
        };
    }
    remainder == 1
}

/// A phone number has 7 to 15 digits (E.164) and is not a date.
fn is_phone_number(candidate: &str) -> bool {
    static DATE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\d{4}[-.]\d{2}[-.]\d{2}$|^\d{2}[-.]\d{2}[-.]\d{4}$")
            .expect("the pattern is valid")
    });
    let count = digits(candidate).count();
    (7..=15).contains(&count) && !DATE.is_match(candidate.trim())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{prop_assert, proptest};

    use super::*;

    #[test]
    fn replaces_each_kind_and_leaves_the_rest() {
        assert_eq!(
            redact_pii(
                "Write to dana@example.org or call +44 20 7946 0958; card 4111 1111 1111 1111, \
                 SSN 078-05-1120, IBAN GB82 WEST 1234 5698 7654 32. Order 1234567890123 ships \
                 on 2026-11-23."
            ),
            "Write to [email] or call [phone]; card [card number], SSN [ssn], IBAN [iban]. \
             Order 1234567890123 ships on 2026-11-23."
        );
        assert!(matches!(redact_pii("nothing to see"), Cow::Borrowed(_)));
    }

    #[test]
    fn checksums_decide_for_cards_and_ibans() {
        assert!(luhn_is_valid("4111111111111111"));
        assert!(!luhn_is_valid("4111111111111112"));
        assert!(iban_is_valid("DE89 3704 0044 0532 0130 00"));
        assert!(!iban_is_valid("DE89 3704 0044 0532 0130 01"));
    }

    proptest! {
        /// Any text is handled without a panic, and what is redacted never grows back.
        #[test]
        fn redaction_is_total_and_idempotent(text in "\\PC{0,200}") {
            let once = redact_pii(&text).into_owned();
            prop_assert!(redact_pii(&once) == once.as_str());
        }
    }
}
