//! Tenant-wide documents: saved settings, retention rules and conversation stats.

use super::{invalid_id, refusal, tenant};
use crate::backend::{SessionBackend, TenantBackend};
use crate::model::{Access, Append, Metadata, NewMessage, NewSession, Role, Timestamp};

/// One `#[tokio::test]` per conformance case, each on the backend `$open` evaluates to (an
/// async expression is fine: it is evaluated inside the test) behind anything that derefs
/// to a [`TenantBackend`](crate::backend::TenantBackend); the stats case also creates
/// sessions through it, as a [`SessionBackend`](crate::backend::SessionBackend).
#[macro_export]
macro_rules! tenant_conformance {
    ($open:expr) => {
        $crate::tenant_conformance!(@cases $open;
            settings_per_tenant_and_agent,
            retention_rules;
            conversation_stats
        );
    };
    (@cases $open:expr; $($case:ident),*; $($with_sessions:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $open;
                $crate::conformance::tenants::$case(&*subject).await;
            }
        )*
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $with_sessions() {
                let subject = $open;
                $crate::conformance::tenants::$with_sessions(&*subject, &*subject).await;
            }
        )*
    };
}

fn document(json: serde_json::Value) -> Metadata {
    json.as_object().cloned().expect("an object")
}

/// A tenant's document and each of its agents' are saved, replaced and removed apart, and
/// another tenant has its own.
pub async fn settings_per_tenant_and_agent(backend: &dyn TenantBackend) {
    let tenant = tenant();
    assert_eq!(backend.settings(&tenant, None).await.unwrap(), None);
    let tenant_wide = document(serde_json::json!({"max_turns": 4, "nested": {"a": [1, 2]}}));
    let bot = document(serde_json::json!({"recall_k": 2}));
    backend
        .put_settings(&tenant, None, Some(tenant_wide.clone()))
        .await
        .unwrap();
    backend
        .put_settings(&tenant, Some("bot"), Some(bot.clone()))
        .await
        .unwrap();
    assert_eq!(
        backend.settings(&tenant, None).await.unwrap(),
        Some(tenant_wide.clone())
    );
    assert_eq!(
        backend.settings(&tenant, Some("bot")).await.unwrap(),
        Some(bot)
    );
    assert_eq!(
        backend.settings(&tenant, Some("other")).await.unwrap(),
        None
    );
    let other = self::tenant();
    assert_eq!(backend.settings(&other, None).await.unwrap(), None);

    // Saving again replaces the whole document.
    let replaced = document(serde_json::json!({"recall_k": 5}));
    backend
        .put_settings(&tenant, Some("bot"), Some(replaced.clone()))
        .await
        .unwrap();
    assert_eq!(
        backend.settings(&tenant, Some("bot")).await.unwrap(),
        Some(replaced)
    );
    // Removing one leaves the others.
    backend
        .put_settings(&tenant, Some("bot"), None)
        .await
        .unwrap();
    assert_eq!(backend.settings(&tenant, Some("bot")).await.unwrap(), None);
    assert_eq!(
        backend.settings(&tenant, None).await.unwrap(),
        Some(tenant_wide)
    );
    // Removing what is not there is harmless.
    backend
        .put_settings(&tenant, Some("bot"), None)
        .await
        .unwrap();

    assert_eq!(
        refusal(backend.settings(&tenant, Some("a/b")).await),
        invalid_id()
    );
    assert_eq!(refusal(backend.settings("a b", None).await), invalid_id());
    assert_eq!(
        refusal(
            backend
                .put_settings(&tenant, Some("a/b"), Some(Metadata::new()))
                .await
        ),
        invalid_id()
    );
    assert_eq!(
        refusal(backend.put_settings("", None, Some(Metadata::new())).await),
        invalid_id()
    );
}

/// Rules are set, changed (keeping when they last ran) and removed per tenant; a run is
/// recorded only for a tenant with a rule, and a rule never run ran at time 0.
pub async fn retention_rules(backend: &dyn TenantBackend) {
    let (tenant, other) = (tenant(), self::tenant());
    // Every tenant's rules are listed: other cases' included. Keep these two tenants'.
    let rules = || async {
        let mut rules: Vec<_> = backend
            .retention_rules()
            .await
            .unwrap()
            .into_iter()
            .filter(|(t, _, _)| *t == tenant || *t == other)
            .collect();
        rules.sort();
        rules
    };
    assert_eq!(rules().await, []);
    backend.set_retention(&tenant, Some(30)).await.unwrap();
    backend.set_retention(&other, Some(90)).await.unwrap();
    let never = Timestamp::from_micros(0);
    let mut expected = vec![(tenant.clone(), 30, never), (other.clone(), 90, never)];
    expected.sort();
    assert_eq!(rules().await, expected);

    let at = Timestamp::from_micros(1_700_000_000_000_000);
    assert!(backend.claim_retention(&tenant, never, at).await.unwrap());
    // A second claim of the same run (another node's, which read the rule before) loses.
    assert!(!backend.claim_retention(&tenant, never, at).await.unwrap());
    let later = Timestamp::from_micros(at.as_micros() + 1);
    assert!(
        !backend
            .claim_retention(&tenant, never, later)
            .await
            .unwrap()
    );
    backend.set_retention(&tenant, Some(7)).await.unwrap();
    let mut expected = vec![(tenant.clone(), 7, at), (other.clone(), 90, never)];
    expected.sort();
    assert_eq!(rules().await, expected);

    backend.set_retention(&tenant, None).await.unwrap();
    assert_eq!(rules().await, [(other.clone(), 90, never)]);
    // Without a rule, a run is not claimed (and makes none).
    assert!(!backend.claim_retention(&tenant, never, at).await.unwrap());
    assert_eq!(rules().await, [(other.clone(), 90, never)]);
    // A rule set again starts over.
    backend.set_retention(&tenant, Some(1)).await.unwrap();
    let mut expected = vec![(tenant.clone(), 1, never), (other.clone(), 90, never)];
    expected.sort();
    assert_eq!(rules().await, expected);

    assert_eq!(
        refusal(backend.set_retention("a/b", Some(1)).await),
        invalid_id()
    );
    assert_eq!(
        refusal(backend.claim_retention("", never, at).await),
        invalid_id()
    );
}

/// How many sessions a tenant has, of every user, and which was active least recently.
pub async fn conversation_stats(backend: &dyn TenantBackend, sessions: &dyn SessionBackend) {
    let tenant = tenant();
    let empty = backend.conversation_stats(&tenant).await.unwrap();
    assert_eq!((empty.total, empty.oldest), (0, None));

    let operator = Access::tenant_wide(&tenant);
    for (id, user) in [("a", "ada"), ("b", "bob"), ("c", "ada")] {
        let new = NewSession {
            user_id: user.into(),
            agent_id: "agent".into(),
            ..NewSession::default()
        };
        sessions
            .create_session(&operator, Some(id), new)
            .await
            .unwrap();
    }
    // Another tenant's sessions count for it only.
    let other = Access::tenant_wide(self::tenant());
    let new = NewSession {
        user_id: "ada".into(),
        agent_id: "agent".into(),
        ..NewSession::default()
    };
    sessions
        .create_session(&other, Some("z"), new)
        .await
        .unwrap();

    let stats = backend.conversation_stats(&tenant).await.unwrap();
    let a = sessions.session(&operator, "a").await.unwrap().unwrap();
    assert_eq!(stats.total, 3);
    assert_eq!(stats.oldest, Some(("a".to_owned(), a.updated_at)));

    // Activity makes "a" the newest: "b" is the oldest now.
    std::thread::sleep(std::time::Duration::from_millis(2));
    let append = Append {
        messages: vec![NewMessage::new(Role::User, "again", 1)],
        create: None,
        idempotency_key: None,
    };
    sessions.append(&operator, "a", append).await.unwrap();
    let b = sessions.session(&operator, "b").await.unwrap().unwrap();
    let stats = backend.conversation_stats(&tenant).await.unwrap();
    assert_eq!(stats.total, 3);
    assert_eq!(stats.oldest, Some(("b".to_owned(), b.updated_at)));

    assert_eq!(
        refusal(backend.conversation_stats("a/b").await),
        invalid_id()
    );
}
