//! Long-term memories, for the memory-recall benchmark (and the topics whose embeddings the
//! recovery benchmark's vectors cluster around): short statements about a user, each on one
//! of [`TOPICS`], and questions about them that no memory uses. Drawn with `rand`'s `StdRng`,
//! which the memory benchmark shares with the vectors it stores beside each text.

use std::fmt::Write as _;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const QUESTION_SEED: u64 = 6;

/// What memories are about; each is embedded once and its vector is the centre of its
/// memories' vectors.
pub(crate) const TOPICS: [&str; 24] = [
    "prefers email over phone calls",
    "works as a data engineer at a logistics company",
    "is allergic to peanuts",
    "has a daughter called Mia who plays the violin",
    "wants answers in short bullet points",
    "is training for the Berlin marathon",
    "reports to Sam, the head of finance",
    "uses a MacBook Pro with an external keyboard",
    "is vegetarian and does not eat fish",
    "moved from Lisbon to Amsterdam last spring",
    "pays invoices through the corporate card",
    "is learning Japanese for a trip to Kyoto",
    "never wants to be contacted on weekends",
    "drives an electric car and charges at work",
    "manages the onboarding of new support staff",
    "prefers the dark theme in every application",
    "has a dog named Pixel that needs walks at noon",
    "is saving for a house near the coast",
    "writes most of their code in Rust and Python",
    "plays five-a-side football on Thursday evenings",
    "needs accessible documents with large fonts",
    "travels to London twice a month for meetings",
    "keeps their budget in a shared spreadsheet",
    "is the main contact for the Acme account",
];
const OPENERS: [&str; 6] = ["The user", "They", "Customer", "User", "The client", "She"];
const DETAILS: [&str; 12] = [
    "since March",
    "according to the last call",
    "as of this quarter",
    "for the Paris office",
    "on weekdays",
    "when travelling",
    "unless it is urgent",
    "for the foreseeable future",
    "per the support ticket",
    "as mentioned twice",
    "at home and at work",
    "this year",
];
const QUESTION_OPENERS: [&str; 8] = [
    "What do we know about how the user",
    "Remind me whether the customer",
    "Is it true that the user",
    "Before I reply: the user",
    "Check if the client",
    "Do you remember that the user",
    "Quick question, the customer",
    "Confirm that the user",
];
const QUESTION_ENDINGS: [&str; 6] = [
    "?",
    " right now?",
    " still?",
    " or not?",
    " today?",
    " at all?",
];

/// A memory's text and the index of its topic in [`TOPICS`]; a third carry a reference number,
/// as memories about orders and tickets do, so that the keyword index holds many rare terms
/// besides the common ones.
pub(crate) fn statement(rng: &mut StdRng) -> (usize, String) {
    let topic = rng.random_range(0..TOPICS.len());
    let mut text = format!(
        "{} {} {}",
        OPENERS[rng.random_range(0..OPENERS.len())],
        TOPICS[topic],
        DETAILS[rng.random_range(0..DETAILS.len())],
    );
    if rng.random_bool(1.0 / 3.0) {
        let _ = write!(text, " (ref {})", rng.random_range(10_000..100_000));
    }
    (topic, text)
}

/// How many distinct questions `questions` can give.
pub(crate) const QUESTIONS: usize = QUESTION_OPENERS.len() * TOPICS.len() * QUESTION_ENDINGS.len();

/// `count` distinct questions, in an order that mixes topics.
pub(crate) fn questions(count: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(QUESTION_SEED);
    let mut all: Vec<String> = QUESTION_OPENERS
        .iter()
        .flat_map(|opener| {
            TOPICS.iter().flat_map(move |topic| {
                QUESTION_ENDINGS
                    .iter()
                    .map(move |ending| format!("{opener} {topic}{ending}"))
            })
        })
        .collect();
    // Fisher–Yates with the seeded generator, so every run asks the same questions.
    for i in (1..all.len()).rev() {
        all.swap(i, rng.random_range(0..=i));
    }
    all.truncate(count);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_distinct_and_repeatable() {
        let first = questions(500);
        let unique: std::collections::HashSet<&String> = first.iter().collect();
        assert_eq!(unique.len(), 500);
        assert_eq!(first, questions(500));
    }
}
