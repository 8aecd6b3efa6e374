//! Tests of `memlayer eval recall` as a process, on a small LoCoMo-format fixture
//! (`tests/fixtures/locomo-mini.json`, invented text): the JSON document's exact shape and
//! the scores the real store, pipeline and embedder must reach on it, the table, and a
//! malformed file reported by name.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_memlayer");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/locomo-mini.json"
);

/// `memlayer eval recall` with `args`, without any `MEMLAYER_*` variable of the surrounding
/// environment except where the embedding assets are (`.cargo/config.toml` sets it).
fn eval_recall(args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.args(["eval", "recall"]).args(args);
    for (name, _) in std::env::vars_os() {
        if name != "MEMLAYER_ASSETS_DIR" && name.to_string_lossy().starts_with("MEMLAYER_") {
            command.env_remove(name);
        }
    }
    let output = command.output().expect("run memlayer");
    assert!(
        !String::from_utf8_lossy(&output.stderr).contains("panicked"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// Every recall map holds exactly the default cut-offs, each a fraction.
fn check_recall_maps(scores: &Value) {
    for retriever in ["keyword", "vector", "hybrid"] {
        let map = &scores[retriever];
        assert_eq!(keys(map), ["1", "10", "25", "5"], "{retriever}: {map}");
        for (k, recall) in map.as_object().unwrap() {
            let recall = recall.as_f64().unwrap();
            assert!((0.0..=1.0).contains(&recall), "{retriever}@{k} = {recall}");
        }
    }
}

#[test]
fn json_report_has_the_exact_shape_and_finds_the_evidence() {
    let output = eval_recall(&["--locomo", FIXTURE, "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("stdout is one JSON value");

    assert_eq!(
        keys(&report),
        [
            "categories",
            "dataset",
            "k",
            "overall",
            "per_question",
            "questions",
            "reference",
            "samples",
            "skipped_questions",
            "turn_text",
            "turns",
            "unknown_evidence_ids"
        ]
    );
    assert_eq!(report["dataset"], FIXTURE);
    assert_eq!(report["turn_text"], "speaker");
    assert_eq!(report["k"], serde_json::json!([1, 5, 10, 25]));
    // 30 turns; 16 questions, of which one has empty evidence and one only the id "D".
    assert_eq!(report["samples"], 2);
    assert_eq!(report["turns"], 30);
    assert_eq!(report["questions"], 14);
    assert_eq!(report["skipped_questions"], 2);
    // "D" and "D9:99".
    assert_eq!(report["unknown_evidence_ids"], 2);

    assert_eq!(
        keys(&report["overall"]),
        ["hybrid", "keyword", "questions", "vector"]
    );
    assert_eq!(report["overall"]["questions"], 14);
    check_recall_maps(&report["overall"]);
    // Each sample has at most 17 turns, so the first 25 hold them all: a score below 1 would
    // mean a turn was never embedded or indexed.
    assert_eq!(report["overall"]["hybrid"]["25"], 1.0);
    assert_eq!(report["overall"]["vector"]["25"], 1.0);

    let categories = report["categories"].as_array().unwrap();
    let counts: Vec<(u64, u64)> = categories
        .iter()
        .map(|c| {
            assert_eq!(
                keys(c),
                ["category", "hybrid", "keyword", "questions", "vector"]
            );
            check_recall_maps(c);
            (
                c["category"].as_u64().unwrap(),
                c["questions"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(counts, [(1, 3), (2, 3), (3, 2), (4, 4), (5, 2)]);

    let questions = report["per_question"].as_array().unwrap();
    assert_eq!(questions.len(), 14);
    for question in questions {
        assert_eq!(
            keys(question),
            [
                "category",
                "evidence",
                "hybrid",
                "keyword",
                "question",
                "sample_id",
                "vector"
            ]
        );
        check_recall_maps(question);
    }
    let find = |text: &str| {
        questions
            .iter()
            .find(|q| q["question"].as_str().unwrap().contains(text))
            .unwrap_or_else(|| panic!("no question with {text:?}"))
    };
    // The evidence entry "D2:6; D2:4" joins two ids; "D9:99" names no turn.
    assert_eq!(
        find("ceramics class")["evidence"],
        serde_json::json!(["D2:6", "D2:4"])
    );
    assert_eq!(
        find("Lisbon half marathon")["evidence"],
        serde_json::json!(["D2:1"])
    );

    assert_eq!(report["reference"]["recall"]["5"], 0.567);
    assert_eq!(report["reference"]["recall"]["10"], 0.662);
    assert_eq!(report["reference"]["recall"]["25"], 0.767);
}

#[test]
fn keyword_search_ranks_the_turn_sharing_a_rare_word_first() {
    // The fixture's premise, checked rather than assumed: "Bakelite" is in the question and
    // in its evidence turn, and in no other turn of the sample.
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    let conversation = fixture[0]["conversation"].as_object().unwrap();
    let with_word: BTreeSet<&str> = conversation
        .iter()
        .filter(|(key, _)| key.starts_with("session_") && !key.ends_with("date_time"))
        .flat_map(|(_, turns)| turns.as_array().unwrap())
        .filter(|turn| turn["text"].as_str().unwrap().contains("Bakelite"))
        .map(|turn| turn["dia_id"].as_str().unwrap())
        .collect();
    assert_eq!(with_word, BTreeSet::from(["D1:1"]));

    let output = eval_recall(&["--locomo", FIXTURE, "--json", "--k", "1"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let question = report["per_question"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["question"] == "Which family member left Priya the Bakelite radio?")
        .expect("the Bakelite question is scored");
    assert_eq!(question["evidence"], serde_json::json!(["D1:1"]));
    assert_eq!(question["keyword"]["1"], 1.0);
    assert_eq!(question["hybrid"]["1"], 1.0);
}

#[test]
fn table_has_a_block_per_category_and_the_reference() {
    let output = eval_recall(&["--locomo", FIXTURE, "--k", "3,1", "--turn-text", "dated"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].ends_with("locomo-mini.json"), "{table}");
    assert!(
        lines[1].starts_with("2 samples, 30 turns, 14 questions scored (2 skipped"),
        "{table}"
    );
    assert!(lines[2].contains("[session date] speaker: text"), "{table}");
    let header = lines
        .iter()
        .position(|line| line.starts_with("category"))
        .expect("a header");
    assert_eq!(
        lines[header].split_whitespace().collect::<Vec<_>>(),
        ["category", "questions", "retriever", "R@1", "R@3"]
    );
    // Five categories and overall, three rows each.
    let labels: Vec<&str> = lines[header + 1..header + 19]
        .iter()
        .step_by(3)
        .map(|line| line.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(labels, ["1", "2", "3", "4", "5", "overall"]);
    for (line, retriever) in lines[header + 16..header + 19]
        .iter()
        .zip(["keyword", "vector", "hybrid"])
    {
        let words: Vec<&str> = line.split_whitespace().collect();
        // The retriever, then one percentage per cut-off.
        assert_eq!(&words[words.len() - 3..][..1], [retriever], "{line}");
    }
    assert!(
        lines
            .last()
            .unwrap()
            .ends_with("DRAGON retriever, all categories: R@5 56.7, R@10 66.2, R@25 76.7"),
        "{table}"
    );
}

#[test]
fn a_malformed_file_is_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.json");
    std::fs::write(&path, "[{\"sample_id\": \"conv-1\", \"conversation\": {").unwrap();
    let output = eval_recall(&["--locomo", path.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("invalid LoCoMo file {}", path.display())),
        "{stderr}"
    );
}
