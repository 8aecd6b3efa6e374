//! Sessions, their messages, runs and summaries, idle sessions and snapshots.

use super::{conflict, invalid_input, not_found, refusal, tenant};
use crate::StoreError;
use crate::backend::SessionBackend;
use crate::model::{
    Access, Append, Metadata, NewMessage, NewRun, NewSession, Role, RunStatus, SessionFilter,
    SessionState, Timestamp,
};

/// One `#[tokio::test]` per conformance case, each on the backend `$open` evaluates to (an
/// async expression is fine: it is evaluated inside the test) behind anything that derefs
/// to a [`SessionBackend`](crate::backend::SessionBackend).
#[macro_export]
macro_rules! session_conformance {
    ($open:expr) => {
        $crate::session_conformance!(@cases $open;
            creating_sessions,
            appending_gives_dense_indices,
            idempotent_appends,
            another_users_session_is_not_found,
            runs_in_recorded_order,
            clearing_moves_the_load_checkpoint,
            searching_messages,
            summaries,
            listing_sessions,
            snapshots_agree_with_themselves,
            idle_sessions_are_taken_once,
            invalid_input_is_refused
        );
    };
    (@cases $open:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $open;
                $crate::conformance::sessions::$case(&*subject).await;
            }
        )*
    };
}

fn owner(user: &str) -> NewSession {
    NewSession {
        user_id: user.into(),
        agent_id: "agent".into(),
        ..NewSession::default()
    }
}

fn say(role: Role, text: &str) -> NewMessage {
    NewMessage::new(role, text, 3)
}

fn run(run_id: Option<&str>) -> NewRun {
    NewRun {
        run_id: run_id.map(str::to_owned),
        status: RunStatus::Completed,
        content: None,
        tool_calls: Vec::new(),
        error: None,
        metadata: Metadata::new(),
    }
}

/// Creates session "s" of "ada", reached by `ada`, holding `messages`.
async fn create_with(backend: &dyn SessionBackend, ada: &Access, messages: Vec<NewMessage>) {
    let create = Append {
        create: Some(owner("ada")),
        ..append(messages)
    };
    backend.append(ada, "s", create).await.unwrap();
}

fn append(messages: Vec<NewMessage>) -> Append {
    Append {
        messages,
        create: None,
        idempotency_key: None,
    }
}

/// Sessions under given and generated ids; an id is the tenant's whoever holds it.
pub async fn creating_sessions(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let mut metadata = Metadata::new();
    metadata.insert("topic".into(), "trip".into());
    let new = NewSession {
        flow_id: Some("flow".into()),
        metadata: metadata.clone(),
        ..owner("ada")
    };
    let created = backend
        .create_session(&ada, Some("s1"), new.clone())
        .await
        .unwrap();
    assert_eq!(created.id, "s1");
    assert_eq!(
        (created.user_id.as_str(), created.agent_id.as_str()),
        ("ada", "agent")
    );
    assert_eq!(created.flow_id.as_deref(), Some("flow"));
    assert_eq!(created.metadata, metadata);
    assert_eq!(
        (created.message_count, created.run_count, created.load_from),
        (0, 0, 0)
    );
    assert_eq!(created.state, SessionState::Active);
    assert_eq!(backend.session(&ada, "s1").await.unwrap(), Some(created));
    assert!(backend.session_exists(&ada, "s1").await.unwrap());

    let generated = backend
        .create_session(&ada, None, owner("ada"))
        .await
        .unwrap();
    assert!(
        uuid::Uuid::parse_str(&generated.id).is_ok(),
        "{generated:?}"
    );

    // Taken, whoever holds it: the tenant's operator and another user alike are refused.
    let bob = Access::one_user(&tenant, "bob");
    assert_eq!(
        refusal(backend.create_session(&bob, Some("s1"), owner("bob")).await),
        conflict()
    );
    let operator = Access::tenant_wide(&tenant);
    assert_eq!(
        refusal(
            backend
                .create_session(&operator, Some("s1"), owner("carol"))
                .await
        ),
        conflict()
    );
    // Another tenant has ids of its own.
    let other = Access::one_user(self::tenant(), "ada");
    backend
        .create_session(&other, Some("s1"), owner("ada"))
        .await
        .unwrap();
    assert_eq!(backend.session(&ada, "missing").await.unwrap(), None);
    assert!(!backend.session_exists(&ada, "missing").await.unwrap());
}

/// Messages get consecutive indices from 0, in order, and read back as written.
pub async fn appending_gives_dense_indices(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    // An append may create its session.
    let first = backend
        .append(
            &ada,
            "s",
            Append {
                create: Some(owner("ada")),
                ..append(vec![say(Role::User, "hello"), say(Role::Assistant, "hi")])
            },
        )
        .await
        .unwrap();
    assert_eq!((first.first_index, first.count), (0, 2));
    assert!(first.created_session && !first.replayed);
    let mut stamped = say(Role::User, "when?");
    stamped.timestamp = Some(Timestamp::from_micros(1_700_000_000_000_000));
    stamped
        .metadata
        .insert("k".into(), serde_json::json!([1, 2]));
    let second = backend
        .append(&ada, "s", append(vec![stamped.clone()]))
        .await
        .unwrap();
    assert_eq!((second.first_index, second.count), (2, 1));
    assert!(!second.created_session);

    let session = backend.session(&ada, "s").await.unwrap().unwrap();
    assert_eq!(session.message_count, 3);
    assert_eq!(session.state, SessionState::IncompleteTurn);
    let all = backend.messages(&ada, "s", 0, 100).await.unwrap();
    let texts: Vec<_> = all.iter().map(|m| (m.index, m.content.as_str())).collect();
    assert_eq!(texts, [(0, "hello"), (1, "hi"), (2, "when?")]);
    assert_eq!(all[2].timestamp, stamped.timestamp.unwrap());
    assert_eq!(all[2].metadata, stamped.metadata);
    assert_eq!((all[1].role, all[1].token_count), (Role::Assistant, 3));
    let page = backend.messages(&ada, "s", 1, 1).await.unwrap();
    assert_eq!(page, all[1..2]);
    assert!(backend.messages(&ada, "s", 3, 10).await.unwrap().is_empty());

    // Without `create`, an unknown session is not found.
    assert_eq!(
        refusal(
            backend
                .append(&ada, "nope", append(vec![say(Role::User, "x")]))
                .await
        ),
        not_found()
    );
}

/// A retried append answers as the first did and writes nothing; the same key for another
/// request is refused.
pub async fn idempotent_appends(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let keyed = Append {
        create: Some(owner("ada")),
        idempotency_key: Some("k1".into()),
        ..append(vec![say(Role::User, "once")])
    };
    let first = backend.append(&ada, "s", keyed.clone()).await.unwrap();
    let retried = backend.append(&ada, "s", keyed.clone()).await.unwrap();
    assert!(retried.replayed);
    assert_eq!(
        (retried.first_index, retried.count, retried.created_session),
        (first.first_index, first.count, first.created_session)
    );
    assert_eq!(
        backend
            .session(&ada, "s")
            .await
            .unwrap()
            .unwrap()
            .message_count,
        1
    );
    let different = Append {
        messages: vec![say(Role::User, "another")],
        ..keyed
    };
    assert_eq!(
        refusal(backend.append(&ada, "s", different).await),
        conflict()
    );
}

/// Another user's session is not found by any read or write of a user-scoped access, while
/// the tenant's operator reaches it.
pub async fn another_users_session_is_not_found(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let bob = Access::one_user(&tenant, "bob");
    backend
        .create_session(&ada, Some("s"), owner("ada"))
        .await
        .unwrap();
    backend
        .append(&ada, "s", append(vec![say(Role::User, "secret")]))
        .await
        .unwrap();

    assert_eq!(backend.session(&bob, "s").await.unwrap(), None);
    assert!(!backend.session_exists(&bob, "s").await.unwrap());
    assert!(backend.snapshot(&bob, "s").await.unwrap().is_none());
    assert_eq!(
        refusal(backend.messages(&bob, "s", 0, 10).await),
        not_found()
    );
    assert_eq!(refusal(backend.runs(&bob, "s", 0, 10).await), not_found());
    assert_eq!(
        refusal(backend.search_messages(&bob, "s", "secret", 10).await),
        not_found()
    );
    assert_eq!(refusal(backend.summary(&bob, "s").await), not_found());
    assert_eq!(
        refusal(
            backend
                .append(&bob, "s", append(vec![say(Role::User, "x")]))
                .await
        ),
        not_found()
    );
    // Creating it by appending does not take it over either: the id is taken, which is
    // all that tells.
    assert_eq!(
        refusal(
            backend
                .append(
                    &bob,
                    "s",
                    Append {
                        create: Some(owner("bob")),
                        ..append(vec![say(Role::User, "x")])
                    }
                )
                .await
        ),
        conflict()
    );
    assert_eq!(
        refusal(backend.record_run(&bob, "s", run(None)).await),
        not_found()
    );
    assert_eq!(refusal(backend.clear_session(&bob, "s").await), not_found());
    let listed = backend
        .list_sessions(&bob, &SessionFilter::default(), 0, 10)
        .await
        .unwrap();
    assert_eq!((listed.items.len(), listed.total), (0, 0));

    let operator = Access::tenant_wide(&tenant);
    assert_eq!(
        backend.messages(&operator, "s", 0, 10).await.unwrap().len(),
        1
    );
    let session = backend.session(&ada, "s").await.unwrap().unwrap();
    assert_eq!(session.message_count, 1, "nothing was written for bob");
}

/// Runs read back in the order recorded, paged by position; a run id is unique in its
/// session.
pub async fn runs_in_recorded_order(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    backend
        .create_session(&ada, Some("s"), owner("ada"))
        .await
        .unwrap();
    let mut recorded = Vec::new();
    for n in 0..3 {
        let new = NewRun {
            content: Some(format!("answer {n}")),
            tool_calls: vec![serde_json::json!({"name": "tool", "n": n})],
            ..run((n == 1).then_some("named"))
        };
        recorded.push(backend.record_run(&ada, "s", new).await.unwrap());
    }
    assert_eq!(recorded[1].run_id, "named");
    assert!(uuid::Uuid::parse_str(&recorded[0].run_id).is_ok());
    assert_eq!(backend.runs(&ada, "s", 0, 10).await.unwrap(), recorded);
    assert_eq!(backend.runs(&ada, "s", 1, 1).await.unwrap(), recorded[1..2]);
    assert!(backend.runs(&ada, "s", 3, 10).await.unwrap().is_empty());
    assert_eq!(
        backend.session(&ada, "s").await.unwrap().unwrap().run_count,
        3
    );
    assert_eq!(
        refusal(backend.record_run(&ada, "s", run(Some("named"))).await),
        conflict()
    );
}

/// Clearing starts later loads after the last message and keeps the messages.
pub async fn clearing_moves_the_load_checkpoint(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    create_with(
        backend,
        &ada,
        vec![say(Role::User, "a"), say(Role::Assistant, "b")],
    )
    .await;
    assert_eq!(backend.clear_session(&ada, "s").await.unwrap(), 2);
    let session = backend.session(&ada, "s").await.unwrap().unwrap();
    assert_eq!((session.load_from, session.message_count), (2, 2));
    assert_eq!(backend.messages(&ada, "s", 0, 10).await.unwrap().len(), 2);
    assert_eq!(
        refusal(backend.clear_session(&ada, "missing").await),
        not_found()
    );
}

/// Search finds the messages holding every word, ignoring case, newest first.
pub async fn searching_messages(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let texts = [
        "The flight to Lisbon",
        "a hotel in Porto",
        "LISBON hotel booked",
        "flight cancelled",
    ];
    create_with(
        backend,
        &ada,
        texts.iter().map(|t| say(Role::User, t)).collect(),
    )
    .await;
    let found = |hits: Vec<crate::Message>| hits.into_iter().map(|m| m.index).collect::<Vec<_>>();
    assert_eq!(
        found(
            backend
                .search_messages(&ada, "s", "lisbon", 10)
                .await
                .unwrap()
        ),
        [2, 0]
    );
    assert_eq!(
        found(
            backend
                .search_messages(&ada, "s", "Hotel  lisbon", 10)
                .await
                .unwrap()
        ),
        [2]
    );
    assert_eq!(
        found(
            backend
                .search_messages(&ada, "s", "flight", 1)
                .await
                .unwrap()
        ),
        [3]
    );
    assert!(
        backend
            .search_messages(&ada, "s", "madrid", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        refusal(backend.search_messages(&ada, "s", "   ", 10).await),
        invalid_input()
    );
    let long = "word ".repeat(crate::MAX_SEARCH_QUERY);
    assert_eq!(
        refusal(backend.search_messages(&ada, "s", &long, 10).await),
        invalid_input()
    );
}

/// A summary is saved against the version it was read from, within the session's messages,
/// and never moves the checkpoint back.
pub async fn summaries(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    create_with(
        backend,
        &ada,
        (0..6).map(|n| say(Role::User, &format!("m{n}"))).collect(),
    )
    .await;
    assert_eq!(backend.summary(&ada, "s").await.unwrap(), None);
    let version = backend
        .snapshot(&ada, "s")
        .await
        .unwrap()
        .unwrap()
        .version();
    backend
        .save_summary(&ada, "s", version, "up to 3".into(), 0, 3)
        .await
        .unwrap();
    let saved = backend.summary(&ada, "s").await.unwrap().unwrap();
    assert_eq!(
        (saved.text.as_str(), saved.first_index, saved.last_index),
        ("up to 3", 0, 3)
    );
    // An older summary racing in does not move the checkpoint back.
    backend
        .save_summary(&ada, "s", version, "up to 1".into(), 0, 1)
        .await
        .unwrap();
    assert_eq!(
        backend
            .summary(&ada, "s")
            .await
            .unwrap()
            .unwrap()
            .last_index,
        3
    );
    backend
        .save_summary(&ada, "s", version, "up to 5".into(), 0, 5)
        .await
        .unwrap();
    assert_eq!(
        backend.summary(&ada, "s").await.unwrap().unwrap().text,
        "up to 5"
    );
    assert_eq!(
        refusal(
            backend
                .save_summary(&ada, "s", version, "past the end".into(), 0, 6)
                .await
        ),
        invalid_input()
    );
    assert_eq!(
        refusal(
            backend
                .save_summary(&ada, "s", version, "backwards".into(), 4, 2)
                .await
        ),
        invalid_input()
    );
    // A version of another session is another state.
    backend
        .create_session(&ada, Some("t"), owner("ada"))
        .await
        .unwrap();
    backend
        .append(&ada, "t", append(vec![say(Role::User, "x")]))
        .await
        .unwrap();
    let changed = std::mem::discriminant(&StoreError::SessionChanged {
        session_id: String::new(),
    });
    assert_eq!(
        refusal(
            backend
                .save_summary(&ada, "t", version, "wrong session".into(), 0, 0)
                .await
        ),
        changed
    );
}

/// Listing is most recently active first, filtered, paged, and counts the whole listing.
pub async fn listing_sessions(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let operator = Access::tenant_wide(&tenant);
    for (id, user, agent) in [
        ("a", "ada", "x"),
        ("b", "ada", "y"),
        ("c", "bob", "x"),
        ("d", "ada", "x"),
    ] {
        let new = NewSession {
            agent_id: agent.into(),
            ..owner(user)
        };
        backend
            .create_session(&operator, Some(id), new)
            .await
            .unwrap();
    }
    // Activity moves "a" to the front.
    backend
        .append(&operator, "a", append(vec![say(Role::User, "again")]))
        .await
        .unwrap();
    let ids = |page: crate::Page<crate::Session>| {
        (
            page.items.into_iter().map(|s| s.id).collect::<Vec<_>>(),
            page.total,
        )
    };
    let all = SessionFilter::default();
    assert_eq!(
        ids(backend.list_sessions(&operator, &all, 0, 10).await.unwrap()),
        (vec!["a".into(), "d".into(), "c".into(), "b".into()], 4)
    );
    assert_eq!(
        ids(backend.list_sessions(&operator, &all, 1, 3).await.unwrap()),
        (vec!["b".to_owned()], 4)
    );
    assert_eq!(
        ids(backend.list_sessions(&operator, &all, 9, 3).await.unwrap()),
        (vec![], 4)
    );
    let ada_x = SessionFilter {
        user_id: Some("ada".into()),
        agent_id: Some("x".into()),
    };
    assert_eq!(
        ids(backend
            .list_sessions(&operator, &ada_x, 0, 10)
            .await
            .unwrap()),
        (vec!["a".into(), "d".into()], 2)
    );
    let ada = Access::one_user(&tenant, "ada");
    assert_eq!(
        ids(backend.list_sessions(&ada, &all, 0, 10).await.unwrap()),
        (vec!["a".into(), "d".into(), "b".into()], 3)
    );
    let bob_named = SessionFilter {
        user_id: Some("bob".into()),
        agent_id: None,
    };
    assert_eq!(
        ids(backend
            .list_sessions(&ada, &bob_named, 0, 10)
            .await
            .unwrap()),
        (vec![], 0)
    );
    for page_size in [0, crate::MAX_PAGE_SIZE + 1] {
        assert_eq!(
            refusal(backend.list_sessions(&operator, &all, 0, page_size).await),
            invalid_input()
        );
    }
}

/// Reads through one snapshot agree with each other and ignore later writes.
pub async fn snapshots_agree_with_themselves(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    create_with(
        backend,
        &ada,
        vec![say(Role::User, "one"), say(Role::Assistant, "two")],
    )
    .await;
    let view = backend.snapshot(&ada, "s").await.unwrap().unwrap();
    backend
        .append(&ada, "s", append(vec![say(Role::User, "three")]))
        .await
        .unwrap();
    assert_eq!(view.session().message_count, 2);
    let outline = view.outline(0).await.unwrap();
    assert_eq!(
        outline
            .iter()
            .map(|o| (o.index, o.role, o.token_count))
            .collect::<Vec<_>>(),
        [(0, Role::User, 3), (1, Role::Assistant, 3)]
    );
    let messages = view.messages(0, 10).await.unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        view.messages_at(&[1, 2, 0]).await.unwrap(),
        [messages[1].clone(), messages[0].clone()]
    );
    assert_eq!(view.summary().await.unwrap(), None);
    drop(view);
    let later = backend.snapshot(&ada, "s").await.unwrap().unwrap();
    assert_eq!(later.session().message_count, 3);
    assert_eq!(later.outline(2).await.unwrap().len(), 1);
}

/// Idle sessions are taken oldest first, each once; an ended session is not open any more.
pub async fn idle_sessions_are_taken_once(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    for id in ["a", "b", "c"] {
        backend
            .create_session(&ada, Some(id), owner("ada"))
            .await
            .unwrap();
    }
    backend.end_session_activity(&ada, "c").await.unwrap();
    // Harmless for an unknown session.
    backend.end_session_activity(&ada, "missing").await.unwrap();
    assert!(backend.oldest_open_activity().await.unwrap().is_some());

    let cutoff = Timestamp::from_micros(Timestamp::now().as_micros() + 1_000_000);
    // Other cases' sessions may be open in the same backend: keep this tenant's.
    let mut taken = Vec::new();
    loop {
        let batch = backend.take_idle_sessions(cutoff, 2).await.unwrap();
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 2);
        taken.extend(
            batch
                .into_iter()
                .filter(|(t, _)| *t == tenant)
                .map(|(_, id)| id),
        );
    }
    assert_eq!(taken, ["a", "b"]);
    assert!(
        backend
            .take_idle_sessions(cutoff, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Malformed ids and accesses are refused before anything is read or written.
pub async fn invalid_input_is_refused(backend: &dyn SessionBackend) {
    let tenant = tenant();
    let ada = Access::one_user(&tenant, "ada");
    let invalid_id = std::mem::discriminant(&StoreError::InvalidId {
        kind: "",
        reason: String::new(),
    });
    let too_long = "x".repeat(crate::MAX_ID_LEN + 1);
    for id in ["", "with space", too_long.as_str()] {
        assert_eq!(
            refusal(backend.session(&ada, id).await),
            invalid_id,
            "{id:?}"
        );
        assert_eq!(
            refusal(backend.create_session(&ada, Some(id), owner("ada")).await),
            invalid_id,
            "{id:?}"
        );
    }
    // A user-scoped access creates sessions for its own user only.
    assert!(
        backend
            .create_session(&ada, Some("s"), owner("bob"))
            .await
            .is_err()
    );
    assert!(backend.session(&ada, "s").await.unwrap().is_none());
    let empty = append(Vec::new());
    backend
        .create_session(&ada, Some("t"), owner("ada"))
        .await
        .unwrap();
    assert!(backend.append(&ada, "t", empty).await.is_err());
    assert_eq!(
        backend
            .session(&ada, "t")
            .await
            .unwrap()
            .unwrap()
            .message_count,
        0
    );
}
