//! Assembly under a budget: snapshot tests of each strategy's context and report, and
//! property tests of the budget's promises.

use expect_test::{Expect, expect};
use memlayer_store::{Memory, MemoryKind, Message, Role, Timestamp};
use proptest::prelude::{Just, prop_assert, prop_assert_eq, prop_oneof, proptest};
use proptest::strategy::Strategy as Generator;

use super::*;
use crate::entities::FactSheet;
use crate::render::{OutputFormat, render};

const ENCODING: TokenEncoding = TokenEncoding::Cl100kBase;

fn conversation(lines: &[(Role, &str)]) -> Vec<Message> {
    lines
        .iter()
        .enumerate()
        .map(|(i, (role, content))| Message {
            index: i as u64,
            role: *role,
            content: (*content).to_owned(),
            timestamp: Timestamp::from_micros(0),
            token_count: ENCODING.count(content),
            metadata: Default::default(),
        })
        .collect()
}

fn support_chat() -> Vec<Message> {
    conversation(&[
        (Role::System, "You are the support agent of Acme Telecom."),
        (
            Role::User,
            "Hi, my name is Dana and my account number is 55-0192.",
        ),
        (Role::Assistant, "Welcome Dana! How can I help?"),
        (
            Role::User,
            "My router keeps dropping the connection every evening.",
        ),
        (
            Role::Assistant,
            "Let's restart it remotely. Done — does it hold now?",
        ),
        (Role::User, "Please contact me by email from now on."),
        (Role::Assistant, "Noted: email it is."),
        (Role::User, "It dropped again. Can you send a technician?"),
        (Role::Assistant, "A technician is booked for Thursday 9-12."),
    ])
}

fn check(settings: ContextSettings, layers: &LayerInputs<'_>, expected: Expect) {
    let assembled = assemble(&support_chat(), layers, &settings, ENCODING).unwrap();
    let rendered = render(&assembled.messages, OutputFormat::Text);
    let report = serde_json::to_string(&assembled.report).unwrap();
    let text = match rendered {
        crate::Rendered::Text { text } => text,
        other => panic!("{other:?}"),
    };
    expected.assert_eq(&format!("{text}\n---\n{report}"));
}

fn settings(strategy: Strategy) -> ContextSettings {
    ContextSettings {
        strategy,
        max_turns: Some(2),
        session_history_depth: 2,
        ..ContextSettings::default()
    }
}

#[test]
fn sliding_window_keeps_the_last_turns() {
    check(
        settings(Strategy::SlidingWindow),
        &LayerInputs::default(),
        expect![[r#"
            You are the support agent of Acme Telecom.
            User (turn 3): Please contact me by email from now on.
            Assistant: Noted: email it is.
            User (turn 4): It dropped again. Can you send a technician?
            Assistant: A technician is booked for Thursday 9-12.
            ---
            {"strategy":"sliding_window","budget":7372,"total_tokens":67,"layers":[{"layer":"instructions","pieces":1,"tokens":14},{"layer":"window","pieces":4,"tokens":53}],"window":[5,6,7,8],"dropped":[{"layer":"window","sources":[1,2],"tokens":33,"reason":"outside_window"},{"layer":"window","sources":[3,4],"tokens":30,"reason":"outside_window"}],"summary":null,"facts":0,"recalled":[],"memories":[],"lessons":[]}"#]],
    );
}

#[test]
fn history_depth_keeps_older_questions_as_stubs() {
    check(
        settings(Strategy::HistoryDepth),
        &LayerInputs::default(),
        expect![[r#"
            You are the support agent of Acme Telecom.
            [earlier question] (turn 1): Hi, my name is Dana and my account number is 55-0192.
            [earlier question] (turn 2): My router keeps dropping the connection every evening.
            User (turn 3): Please contact me by email from now on.
            Assistant: Noted: email it is.
            User (turn 4): It dropped again. Can you send a technician?
            Assistant: A technician is booked for Thursday 9-12.
            ---
            {"strategy":"history_depth","budget":7372,"total_tokens":117,"layers":[{"layer":"instructions","pieces":1,"tokens":14},{"layer":"earlier_questions","pieces":1,"tokens":50},{"layer":"window","pieces":4,"tokens":53}],"window":[5,6,7,8],"dropped":[],"summary":null,"facts":0,"recalled":[],"memories":[],"lessons":[]}"#]],
    );
}

#[test]
fn combined_adds_facts_summary_and_recalled_messages() {
    let summary = Summary {
        text: "[Conversation Summary] (messages 0–0)\n- User: earlier chat about billing.".into(),
        first_index: 0,
        last_index: 0,
    };
    let facts = FactSheet::from_messages(&support_chat());
    let mut earlier_conversation = support_chat()[1].clone();
    earlier_conversation.content = "My modem is a FritzBox 7590.".into();
    earlier_conversation.timestamp = Timestamp::from_micros(1_763_900_000_000_000);
    let lessons = Lessons {
        text: "Lessons from earlier tasks:\n- (standing) Book technicians for mornings.".into(),
        episodes: vec![3],
    };
    let layers = LayerInputs {
        summary: Some(&summary),
        facts: Some(&facts),
        recalled: vec![
            RecalledMessage {
                session_id: "support-2".into(),
                current_session: true,
                message: support_chat()[3].clone(),
                score: 0.031,
            },
            RecalledMessage {
                session_id: "support-2".into(),
                current_session: true,
                message: support_chat()[7].clone(),
                score: 0.030,
            },
            RecalledMessage {
                session_id: "support-1".into(),
                current_session: false,
                message: earlier_conversation,
                score: 0.016,
            },
        ],
        memories: vec![Memory {
            id: 7,
            revision: 1,
            tenant: "t".into(),
            user_id: "dana".into(),
            agent_id: None,
            text: "Works from home on Thursdays".into(),
            kind: MemoryKind::Fact,
            tags: Vec::new(),
            source: None,
            created_at: Timestamp::from_micros(0),
            updated_at: Timestamp::from_micros(0),
            history: Vec::new(),
            vector: Vec::new(),
            key: None,
        }],
        session_memory: Some(
            "[Earlier conversations with this user]\n- User: My modem was replaced in May.",
        ),
        lessons: Some(&lessons),
    };
    check(
        settings(Strategy::Combined),
        &layers,
        expect![[r#"
            You are the support agent of Acme Telecom.
            Known facts:
            - account number: 55-0192
            - contact preference: email
            - name: Dana
            Long-term memories:
            - (fact) Works from home on Thursdays
            Lessons from earlier tasks:
            - (standing) Book technicians for mornings.
            [Earlier conversations with this user]
            - User: My modem was replaced in May.
            [Conversation Summary] (messages 0–0)
            - User: earlier chat about billing.
            Relevant earlier message (user, #3): My router keeps dropping the connection every evening.
            Relevant message from an earlier conversation (user, 2025-11-23): My modem is a FritzBox 7590.
            User (turn 3): Please contact me by email from now on.
            Assistant: Noted: email it is.
            User (turn 4): It dropped again. Can you send a technician?
            Assistant: A technician is booked for Thursday 9-12.
            ---
            {"strategy":"combined","budget":7372,"total_tokens":230,"layers":[{"layer":"instructions","pieces":1,"tokens":14},{"layer":"facts","pieces":1,"tokens":27},{"layer":"memories","pieces":1,"tokens":18},{"layer":"lessons","pieces":1,"tokens":19},{"layer":"session_memory","pieces":1,"tokens":21},{"layer":"summary","pieces":1,"tokens":23},{"layer":"retrieved","pieces":2,"tokens":55},{"layer":"window","pieces":4,"tokens":53}],"window":[5,6,7,8],"dropped":[{"layer":"window","sources":[1,2],"tokens":33,"reason":"outside_window"},{"layer":"window","sources":[3,4],"tokens":30,"reason":"outside_window"}],"summary":[0,0],"facts":3,"recalled":[{"session_id":"support-2","index":3,"score":0.031},{"session_id":"support-1","index":1,"score":0.016}],"memories":[7],"lessons":[3]}"#]],
    );
}

#[test]
fn a_tight_budget_drops_whole_exchanges_but_never_instructions() {
    let tight = ContextSettings {
        strategy: Strategy::FullHistory,
        context_window: 256,
        window_reserve: 0.75,
        ..ContextSettings::default()
    };
    let assembled = assemble(&support_chat(), &LayerInputs::default(), &tight, ENCODING).unwrap();
    assert_eq!(assembled.report.budget, 64);
    assert!(
        assembled.report.total_tokens <= 64,
        "{:?}",
        assembled.report
    );
    assert_eq!(assembled.messages[0].layer, Layer::Instructions);
    assert_eq!(assembled.report.window, [7, 8]);
    assert!(
        assembled
            .report
            .dropped
            .iter()
            .all(|d| d.reason == DropReason::OverBudget)
    );
}

#[test]
fn settings_out_of_range_are_refused() {
    for bad in [
        ContextSettings {
            session_history_depth: 0,
            ..ContextSettings::default()
        },
        ContextSettings {
            session_history_depth: 101,
            ..ContextSettings::default()
        },
        ContextSettings {
            window_reserve: 0.95,
            ..ContextSettings::default()
        },
        ContextSettings {
            context_window: 10,
            ..ContextSettings::default()
        },
        ContextSettings {
            max_turns: Some(0),
            ..ContextSettings::default()
        },
    ] {
        assert!(matches!(
            assemble(&support_chat(), &LayerInputs::default(), &bad, ENCODING),
            Err(MemoryError::InvalidSetting { .. })
        ));
    }
}

#[test]
fn a_reserve_just_below_the_limit_is_taken_as_written() {
    // The largest double below 0.9 rounds to 0.9 as an f32, which the range check refused.
    let settings: ContextSettings =
        serde_json::from_str(r#"{"window_reserve": 0.8999999999999999}"#).expect("parses");
    assert!(
        assemble(
            &support_chat(),
            &LayerInputs::default(),
            &settings,
            ENCODING
        )
        .is_ok()
    );
}

#[test]
fn an_unset_window_narrows_only_for_a_combined_context_that_recalls() {
    let turns = |settings: ContextSettings, query: bool| settings.for_turn(query).max_turns;
    let default = ContextSettings::default();
    assert_eq!(default.max_turns, None);
    assert_eq!(turns(default.clone(), true), Some(RECALLING_WINDOW_TURNS));
    // Nothing to recall with: the window is the only history the context has.
    assert_eq!(turns(default.clone(), false), Some(WINDOW_TURNS));
    let no_recall = ContextSettings {
        recall_k: 0,
        ..default.clone()
    };
    assert_eq!(turns(no_recall, true), Some(WINDOW_TURNS));
    assert_eq!(
        turns(settings(Strategy::SlidingWindow), true),
        Some(2),
        "a window the caller set is kept"
    );
    let sliding = ContextSettings {
        strategy: Strategy::SlidingWindow,
        ..default.clone()
    };
    assert_eq!(turns(sliding, true), Some(WINDOW_TURNS));
    let explicit = ContextSettings {
        max_turns: Some(10),
        ..default
    };
    assert_eq!(turns(explicit, true), Some(10));
}

fn arb_conversation() -> impl Generator<Value = Vec<Message>> {
    let role = prop_oneof![
        1 => Just(Role::System),
        4 => Just(Role::User),
        4 => Just(Role::Assistant),
        1 => Just(Role::Tool),
    ];
    proptest::collection::vec((role, "[a-z ]{0,80}"), 0..40).prop_map(|lines| {
        let borrowed: Vec<(Role, &str)> = lines
            .iter()
            .map(|(role, text)| (*role, text.as_str()))
            .collect();
        conversation(&borrowed)
    })
}

fn arb_settings() -> impl Generator<Value = ContextSettings> {
    (
        prop_oneof![
            Just(Strategy::FullHistory),
            Just(Strategy::SlidingWindow),
            Just(Strategy::HistoryDepth),
            Just(Strategy::Combined)
        ],
        256u32..2_000,
        proptest::option::of(1usize..12),
        1usize..12,
    )
        .prop_map(
            |(strategy, context_window, max_turns, depth)| ContextSettings {
                strategy,
                context_window,
                max_turns,
                session_history_depth: depth,
                ..ContextSettings::default()
            },
        )
}

proptest! {
    /// The budget holds unless instructions alone exceed it; instructions are never dropped;
    /// exchanges in the window are whole; the reported total is a recount of the output.
    #[test]
    fn the_budget_is_kept_and_the_report_is_true(
        messages in arb_conversation(),
        settings in arb_settings(),
    ) {
        let facts = FactSheet::from_messages(&messages);
        let layers = LayerInputs { facts: Some(&facts), ..LayerInputs::default() };
        let assembled = assemble(&messages, &layers, &settings, ENCODING).unwrap();
        let report = &assembled.report;
        let instructions: u32 = messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(message_tokens)
            .sum();
        prop_assert!(report.total_tokens <= report.budget.max(instructions));
        let recount: u32 = assembled
            .messages
            .iter()
            .map(|m| ENCODING.count(&m.content) + crate::MESSAGE_OVERHEAD_TOKENS)
            .sum();
        prop_assert_eq!(report.total_tokens, recount);
        let kept_system = assembled.messages.iter().filter(|m| m.layer == Layer::Instructions).count();
        prop_assert_eq!(kept_system, messages.iter().filter(|m| m.role == Role::System).count());
        let history = History::new(&messages);
        for exchange in &history.exchanges {
            let indices: Vec<u64> = exchange.messages.iter().map(|m| m.index).collect();
            let inside = indices.iter().filter(|i| report.window.contains(i)).count();
            prop_assert!(inside == 0 || inside == indices.len(), "exchange {:?} split", indices);
        }
    }
}

proptest! {
    /// A summary split happens only over the budget, at an exchange boundary, and leaves a
    /// recent part within its share of the budget (or just the newest exchange).
    #[test]
    fn summary_splits_cut_whole_exchanges_into_the_recent_share(
        messages in arb_conversation(),
        settings in arb_settings(),
    ) {
        let history = History::new(&messages);
        let instructions: u32 = history.system.iter().map(|m| message_tokens(m)).sum();
        let total: u32 = instructions + history.exchanges.iter().map(Exchange::tokens).sum::<u32>();
        match summary_split(&messages, 0, &settings) {
            None => prop_assert!(total <= settings.budget() || history.exchanges.len() <= 1),
            Some(cut) => {
                prop_assert!(total > settings.budget());
                prop_assert!(cut > 0);
                let starts_exchange = history
                    .exchanges
                    .iter()
                    .any(|e| e.messages[0].index == messages[cut].index);
                prop_assert!(starts_exchange, "cut {} is inside an exchange", cut);
                let recent = History::new(&messages[cut..]);
                let recent_tokens: u32 = recent.exchanges.iter().map(Exchange::tokens).sum();
                let recent_budget = (f64::from(settings.budget().saturating_sub(instructions)) * RECENT_SHARE) as u32;
                prop_assert!(recent.exchanges.len() == 1 || recent_tokens <= recent_budget);
            }
        }
    }
}
