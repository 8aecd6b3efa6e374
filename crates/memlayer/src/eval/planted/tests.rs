//! The scoring rules: when a correction's old value counts as marked, and when it stands.

use memlayer_memory::{ContextMessage, Layer, TokenEncoding};

use super::*;

fn piece(layer: Layer, content: &str) -> ContextMessage {
    ContextMessage::generated(
        layer,
        content.to_owned(),
        Vec::new(),
        TokenEncoding::Cl100kBase,
    )
}

#[test]
fn a_correction_is_marked_by_the_new_value_first_and_a_cue() {
    let marks = |line| marks_correction(line, "Thursday", "Tuesday");
    assert!(marks(
        "I got that wrong: the meeting is on Thursday, not Tuesday."
    ));
    assert!(marks("- meeting: Thursday (corrected; earlier: Tuesday)"));
    assert!(!marks("The meeting is on Tuesday."));
    // The facts block naming the old value as the current one, the new one as earlier.
    assert!(!marks("- meeting: Tuesday (corrected; earlier: Thursday)"));
    // Both values but no cue: nothing says which one holds.
    assert!(!marks("Thursday or Tuesday?"));
}

#[test]
fn an_old_statement_is_fine_next_to_its_correction() {
    let original = piece(Layer::Window, "My name is Jon Baker.");
    let correction = piece(
        Layer::Window,
        "Sorry, my name is John Baker, not Jon Baker.",
    );
    let stands = |pieces: &[ContextMessage]| stale_stands(pieces, "John Baker", "Jon Baker");
    assert!(!stands(&[original.clone(), correction.clone()]));
    assert!(stands(std::slice::from_ref(&original)));
    assert!(!stands(&[piece(Layer::Window, "Hello John Baker.")]));
    // A known fact naming the old value wins over a correction elsewhere in the context.
    let wrong_fact = piece(
        Layer::Facts,
        "Known facts:\n- name: Jon Baker (corrected; earlier: John Baker)",
    );
    assert!(stands(&[wrong_fact, correction]));
}

#[test]
fn every_contender_has_valid_settings_of_its_strategy() {
    for contender in CONTENDERS {
        let settings = contender.settings(128_000);
        settings.validate().unwrap();
        let strategy = match contender {
            Contender::FullHistory => Strategy::FullHistory,
            Contender::SlidingWindow => Strategy::SlidingWindow,
            Contender::HistoryDepth => Strategy::HistoryDepth,
            Contender::Combined => Strategy::Combined,
        };
        assert_eq!(settings.strategy, strategy);
        assert_eq!(
            serde_json::to_value(contender).unwrap(),
            serde_json::Value::from(contender.name())
        );
    }
}
