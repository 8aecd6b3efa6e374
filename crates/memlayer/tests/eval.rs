//! Tests of `memlayer eval` as a process. `eval recall` runs on a small LoCoMo-format
//! fixture (`tests/fixtures/locomo-mini.json`, invented text): the JSON document's exact
//! shape and the scores the real store, pipeline and embedder must reach on it, the table,
//! and a malformed file reported by name. `eval planted` runs its built-in conversations:
//! the JSON document's shape, full history's complete baseline, the sliding window's cliff
//! and the combined strategy's token saving, and the tables.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_memlayer");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/locomo-mini.json"
);

/// `memlayer eval recall` with `args`.
fn eval_recall(args: &[&str]) -> Output {
    eval("recall", args)
}

/// `memlayer eval <what>` with `args`, without any `MEMLAYER_*` variable of the surrounding
/// environment except where the embedding assets are (`.cargo/config.toml` sets it).
fn eval(what: &str, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.args(["eval", what]).args(args);
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

/// `memlayer eval planted --json`, parsed.
fn planted_json() -> Value {
    let output = eval("planted", &["--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is one JSON value")
}

const STRATEGIES: [&str; 4] = [
    "combined",
    "full_history",
    "history_depth",
    "sliding_window",
];

/// A strategy's judgement of one context: its verdict, where the value was found, and the
/// context's tokens in total and per layer, the total being the layers' sum.
fn check_judgement(judgement: &Value) {
    assert_eq!(
        keys(judgement),
        ["found_in", "layers", "tokens", "verdict"],
        "{judgement}"
    );
    let verdict = judgement["verdict"].as_str().unwrap();
    assert!(
        ["found", "missing", "stale"].contains(&verdict),
        "{verdict}"
    );
    assert_eq!(
        judgement["found_in"].as_array().unwrap().is_empty(),
        verdict == "missing",
        "{judgement}"
    );
    let layers: u64 = judgement["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|layer| layer["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(judgement["tokens"].as_u64().unwrap(), layers, "{judgement}");
}

fn check_results(results: &Value) {
    assert_eq!(keys(results), STRATEGIES);
    for judgement in results.as_object().unwrap().values() {
        check_judgement(judgement);
    }
}

#[test]
fn planted_facts_json_has_the_baseline_the_cliff_and_the_token_saving() {
    let report = planted_json();
    assert_eq!(
        keys(&report),
        [
            "combined_misses",
            "conversation",
            "cross_session",
            "seconds",
            "setup",
            "suite",
            "targets",
            "window_trade_off"
        ]
    );
    let names: Vec<&str> = report["setup"]["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "full_history",
            "sliding_window",
            "history_depth",
            "combined"
        ]
    );
    assert_eq!(report["setup"]["context_window"], 128_000);
    assert_eq!(report["setup"]["recall_k"], 4);

    // The 60-turn conversation: every plant stored, every question found by full history.
    let conversation = &report["conversation"];
    assert_eq!(conversation["turns"], 60);
    let plants = conversation["plants"].as_array().unwrap();
    assert_eq!(plants.len(), 4);
    assert!(plants.iter().all(|p| p["stored"] == true), "{plants:?}");
    let probes = conversation["probes"].as_array().unwrap();
    let turns: Vec<u64> = probes.iter().map(|p| p["turn"].as_u64().unwrap()).collect();
    assert_eq!(turns, [55, 57, 59]);
    // Only the question about the corrected name has a stale value to watch for.
    assert_eq!(probes[0]["stale"], "Marta");
    assert_eq!(
        keys(&probes[1]),
        ["expected", "fact", "query", "results", "stored", "turn"]
    );
    assert!(probes[2].get("stale").is_none());
    for probe in probes {
        assert_eq!(probe["stored"], true);
        check_results(&probe["results"]);
        assert_eq!(
            probe["results"]["full_history"]["verdict"], "found",
            "{probe}"
        );
        // Every fact is 30 or more turns back: outside a window of 10.
        assert_eq!(
            probe["results"]["sliding_window"]["verdict"], "missing",
            "{probe}"
        );
    }

    // Turn 60: the combined strategy costs a fraction of the full history.
    let last = &conversation["final_turn"];
    assert_eq!(last["turn"], 60);
    assert_eq!(keys(&last["tokens"]), STRATEGIES);
    let tokens = |strategy: &str| last["tokens"][strategy].as_u64().unwrap();
    assert!(tokens("combined") < tokens("full_history"), "{last}");
    let share = last["combined_share_of_full_history"].as_f64().unwrap();
    let expected = tokens("combined") as f64 / tokens("full_history") as f64;
    assert!((share - expected).abs() < 1e-9 && share < 1.0, "{last}");

    // The suite: full history finds everything; the sliding window of 10 exchanges finds
    // every fact 5 turns back and none 15 or more turns back.
    let suite = &report["suite"];
    assert_eq!(suite["query_turn"], 71);
    assert_eq!(suite["depths"], serde_json::json!([5, 15, 30, 45, 60]));
    let by_depth = &suite["hits_by_depth"];
    assert_eq!(keys(by_depth), STRATEGIES);
    for strategy in STRATEGIES {
        assert_eq!(keys(&by_depth[strategy]), ["15", "30", "45", "5", "60"]);
    }
    assert_eq!(
        by_depth["full_history"],
        serde_json::json!({"5": 4, "15": 4, "30": 4, "45": 4, "60": 4})
    );
    assert_eq!(
        by_depth["sliding_window"],
        serde_json::json!({"5": 4, "15": 0, "30": 0, "45": 0, "60": 0})
    );
    let by_kind = &suite["hits_by_kind"];
    assert_eq!(keys(by_kind), STRATEGIES);
    for strategy in STRATEGIES {
        assert_eq!(
            keys(&by_kind[strategy]),
            ["correction", "identifier", "preference", "temporal"]
        );
        for depths in by_kind[strategy].as_object().unwrap().values() {
            assert_eq!(keys(depths), ["15", "30", "45", "5", "60"]);
            assert!(depths.as_object().unwrap().values().all(Value::is_boolean));
        }
    }
    let cases = suite["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 20);
    for case in cases {
        assert_eq!(case["stored"], true, "{case}");
        assert!(["user", "assistant"].contains(&case["source"].as_str().unwrap()));
        assert_eq!(
            case["plant_turn"].as_u64().unwrap() + case["depth"].as_u64().unwrap(),
            71
        );
        check_results(&case["results"]);
    }
    let corrections = cases.iter().filter(|c| c["kind"] == "correction");
    assert!(corrections.clone().all(|c| c["stale"].is_string()));
    assert_eq!(corrections.count(), 5);

    // Cross-session: every strategy over the second session, combined with both scopes.
    let cross = &report["cross_session"];
    assert_eq!(cross["stored"], true);
    let rows: Vec<(String, Option<String>)> = cross["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            // A row is a judgement with the strategy and, for combined, the recall scope.
            let mut judgement = row.as_object().unwrap().clone();
            let strategy = judgement.remove("strategy").unwrap();
            let scope = judgement.remove("recall_scope");
            check_judgement(&Value::Object(judgement));
            (
                strategy.as_str().unwrap().to_owned(),
                scope.map(|s| s.as_str().unwrap().to_owned()),
            )
        })
        .collect();
    let rows: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|(strategy, scope)| (strategy.as_str(), scope.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("full_history", None),
            ("sliding_window", None),
            ("history_depth", None),
            ("combined", Some("session")),
            ("combined", Some("user"))
        ]
    );
    // Nothing of the first session is in the second one's messages.
    assert_eq!(cross["rows"][0]["verdict"], "missing");

    // The window trade-off: the default first, then each window set. With a question to
    // recall for, the default window is the 4-exchange one, token for token; the sliding
    // default of 10 exchanges would alone cost more than the 15% target.
    let trade_off = &report["window_trade_off"];
    assert_eq!(trade_off["cases"], 20);
    let rows = trade_off["rows"].as_array().unwrap();
    let windows: Vec<&Value> = rows.iter().map(|row| &row["max_turns"]).collect();
    assert_eq!(
        windows,
        [&Value::Null, &2.into(), &4.into(), &6.into(), &10.into()]
    );
    let without_window = |row: &Value| {
        let mut row = row.as_object().unwrap().clone();
        row.remove("max_turns");
        row
    };
    assert_eq!(without_window(&rows[0]), without_window(&rows[2]));
    assert_eq!(
        rows[0]["conversation_share"],
        last["combined_share_of_full_history"]
    );
    assert!(
        rows[4]["conversation_share"].as_f64().unwrap() > 0.15,
        "{trade_off}"
    );
    let shares: Vec<f64> = rows[1..]
        .iter()
        .map(|row| row["suite_share"].as_f64().unwrap())
        .collect();
    assert!(shares.is_sorted(), "a wider window costs more: {shares:?}");

    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4);
    for target in targets {
        assert_eq!(keys(target), ["goal", "measured", "met"]);
        // The strategies issue's targets are met, and stay met.
        assert_eq!(target["met"], true, "{target}");
    }
    for miss in report["combined_misses"].as_array().unwrap() {
        assert_eq!(keys(miss), ["at", "cause", "expected", "fact", "verdict"]);
        assert_ne!(miss["verdict"], "found");
        assert!(!miss["cause"].as_str().unwrap().is_empty());
    }
}

#[test]
fn planted_facts_table_shows_hits_by_depth() {
    let output = eval("planted", &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let table = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    let header = lines
        .iter()
        .position(|line| line.starts_with("strategy ") && line.contains("d=60"))
        .expect("the suite's table");
    assert_eq!(
        lines[header].split_whitespace().collect::<Vec<_>>(),
        ["strategy", "d=5", "d=15", "d=30", "d=45", "d=60", "total"]
    );
    let row = |at: usize| lines[header + at].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        row(1),
        ["full_history", "4/4", "4/4", "4/4", "4/4", "4/4", "20/20"]
    );
    assert_eq!(
        row(2),
        ["sliding_window", "4/4", "0/4", "0/4", "0/4", "0/4", "4/20"]
    );
    assert_eq!(row(3)[0], "history_depth");
    assert_eq!(row(4)[0], "combined");
    for section in [
        "1. 60-turn conversation.",
        "2. Depth suite:",
        "3. Cross-session:",
        "the combined strategy's window (max_turns):",
        "targets for the combined strategy:",
        "misses of the combined strategy (",
    ] {
        assert!(table.contains(section), "no {section:?} in\n{table}");
    }
}
