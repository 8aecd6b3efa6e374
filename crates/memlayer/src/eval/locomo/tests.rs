//! Reading LoCoMo files: the fields used, the ones ignored, the evidence repairs and what
//! they count, and errors that name the file instead of panicking.

use super::*;

use serde_json::json;

fn sample(conversation: Value, qa: Value) -> String {
    json!([{ "sample_id": "conv-1", "conversation": conversation, "qa": qa }]).to_string()
}

fn two_turns() -> Value {
    json!({
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            { "speaker": "Ana", "dia_id": "D1:1", "text": "I bought a kayak." },
            { "speaker": "Ben", "dia_id": "D1:2", "text": "Where will you paddle?" }
        ]
    })
}

#[test]
fn unknown_fields_are_ignored_and_captions_kept() {
    let text = json!([{
        "sample_id": "conv-9",
        "observation": { "session_1_observation": ["ignored"] },
        "session_summary": {},
        "event_summary": {},
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{
                "speaker": "Ana", "dia_id": "D1:1", "text": "Look!",
                "img_url": ["https://example.invalid/a.jpg"], "query": "kayak",
                "blip_caption": "a photo of a red kayak"
            }],
            "session_1_observation": "not a session"
        },
        "qa": [{
            "question": "What did Ana buy?", "answer": 2023, "category": 4,
            "evidence": ["D1:1"], "extra": true
        }, {
            "question": "What did Ben buy?", "adversarial_answer": "A kayak", "category": 5,
            "evidence": ["D1:1"]
        }]
    }])
    .to_string();
    let dataset = parse(&text).unwrap();
    let sample = &dataset.samples[0];
    assert_eq!(sample.id, "conv-9");
    assert_eq!(sample.speaker_a, "Ana");
    assert_eq!(sample.sessions.len(), 1);
    let turn = &sample.sessions[0].turns[0];
    assert_eq!(turn.blip_caption.as_deref(), Some("a photo of a red kayak"));
    assert_eq!(
        sample.sessions[0].date_time.as_deref(),
        Some("1:56 pm on 8 May, 2023")
    );
    assert_eq!(sample.questions.len(), 2);
    assert_eq!(sample.questions[1].category, 5);
    assert_eq!(
        (dataset.skipped_questions, dataset.unknown_evidence),
        (0, 0)
    );
}

#[test]
fn sessions_follow_their_numbers_not_the_key_order() {
    let mut conversation = json!({ "speaker_a": "Ana", "speaker_b": "Ben" });
    for number in [10, 2, 1] {
        conversation[format!("session_{number}")] = json!([
            { "speaker": "Ana", "dia_id": format!("D{number}:1"), "text": "hi" }
        ]);
        conversation[format!("session_{number}_date_time")] = json!(format!("day {number}"));
    }
    let dataset = parse(&sample(conversation, json!([]))).unwrap();
    let sessions = &dataset.samples[0].sessions;
    let numbers: Vec<u32> = sessions.iter().map(|s| s.number).collect();
    assert_eq!(numbers, [1, 2, 10]);
    assert_eq!(sessions[2].date_time.as_deref(), Some("day 10"));
    assert_eq!(dataset.turns(), 3);
}

#[test]
fn joined_evidence_is_split_and_unknown_ids_are_dropped_and_counted() {
    let qa = json!([
        { "question": "q1", "category": 1, "evidence": ["D1:2; D1:1", "D1:2"] },
        { "question": "q2", "category": 2, "evidence": ["D1:1 D9:9", "D", "D1:2,D1:1"] }
    ]);
    let dataset = parse(&sample(two_turns(), qa)).unwrap();
    let questions = &dataset.samples[0].questions;
    assert_eq!(questions[0].evidence, ["D1:2", "D1:1"]);
    assert_eq!(questions[1].evidence, ["D1:1", "D1:2"]);
    assert_eq!(dataset.unknown_evidence, 2);
    assert_eq!(dataset.skipped_questions, 0);
}

#[test]
fn questions_without_known_evidence_are_skipped_and_counted() {
    let qa = json!([
        { "question": "empty", "category": 3, "evidence": [] },
        { "question": "missing", "category": 3 },
        { "question": "unknown only", "category": 5, "evidence": ["D7:7"] },
        { "question": "kept", "category": 4, "evidence": ["D1:1"] }
    ]);
    let dataset = parse(&sample(two_turns(), qa)).unwrap();
    let kept: Vec<&str> = dataset.samples[0]
        .questions
        .iter()
        .map(|q| q.question.as_str())
        .collect();
    assert_eq!(kept, ["kept"]);
    assert_eq!(dataset.skipped_questions, 3);
    assert_eq!(dataset.unknown_evidence, 1);
    assert_eq!(dataset.questions(), 1);
}

#[test]
fn malformed_json_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.json");
    std::fs::write(&path, "[{\"conversation\": {\"speaker_a\": ").unwrap();
    let message = format!("{:#}", load(&path).unwrap_err());
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("EOF"), "{message}");

    let missing = dir.path().join("missing.json");
    let message = format!("{:#}", load(&missing).unwrap_err());
    assert!(message.contains("cannot read the LoCoMo file"), "{message}");
    assert!(message.contains("missing.json"), "{message}");
}

#[test]
fn wrong_shapes_name_the_sample_and_the_field() {
    let no_speaker = sample(json!({ "session_1": [] }), json!([]));
    let message = format!("{:#}", parse(&no_speaker).unwrap_err());
    assert!(message.contains("sample 1 (conv-1)"), "{message}");
    assert!(message.contains("no speaker_a"), "{message}");

    let bad_turn = sample(
        json!({ "speaker_a": "Ana", "session_1": [{ "speaker": "Ana", "text": "hi" }] }),
        json!([]),
    );
    let message = format!("{:#}", parse(&bad_turn).unwrap_err());
    assert!(message.contains("session_1"), "{message}");
    assert!(message.contains("dia_id"), "{message}");

    let text_category = sample(
        two_turns(),
        json!([{ "question": "q", "category": "single-hop", "evidence": ["D1:1"] }]),
    );
    let message = format!("{:#}", parse(&text_category).unwrap_err());
    assert!(message.contains("invalid type"), "{message}");

    let not_a_list = json!({ "conversations": [] }).to_string();
    assert!(parse(&not_a_list).is_err());
}

#[test]
fn a_repeated_sample_id_is_refused() {
    let one = json!({ "sample_id": "conv-1", "conversation": two_turns(), "qa": [] });
    let text = json!([one.clone(), one]).to_string();
    let err = parse(&text).unwrap_err();
    assert!(
        format!("{err:#}").contains("sample 2 repeats the sample_id conv-1"),
        "{err:#}"
    );
}
