//! API keys: creating, authenticating, listing and revoking them, and the bootstrap admin key.

use super::{both, invalid_id, invalid_input, refusal, tenant};
use crate::backend::KeyBackend;
use crate::keys::{
    ApiKey, BOOTSTRAP_TENANT, Bootstrap, CONFIGURED_KEY_PREFIX, KEY_SCHEME, KeyRejection, KeyRole,
    MAX_KEY_NAME_LEN, NewKey, OPERATOR_TENANT,
};
use crate::model::Timestamp;

/// One `#[tokio::test]` per conformance case, each on the backend `$open` evaluates to (an
/// async expression is fine: it is evaluated inside the test) behind anything that derefs
/// to a [`KeyBackend`](crate::backend::KeyBackend).
#[macro_export]
macro_rules! key_conformance {
    ($open:expr) => {
        $crate::key_conformance!(@cases $open;
            a_key_authenticates_to_its_tenant_and_role,
            wrong_and_malformed_keys_are_unknown,
            revoked_and_expired_keys_are_rejected,
            keys_are_listed_by_tenant_without_secrets,
            revoking_another_tenants_key_does_nothing,
            invalid_keys_are_refused,
            operator_keys_belong_to_no_tenant,
            bootstrap_is_idempotent
        );
    };
    (@cases $open:expr; $($case:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $open;
                $crate::conformance::keys::$case(&*subject).await;
            }
        )*
    };
}

fn service(tenant: &str) -> NewKey {
    NewKey {
        tenant: tenant.into(),
        role: KeyRole::Service,
        user_id: None,
        name: Some("backend".into()),
        expires_at: None,
    }
}

/// A timestamp `seconds` from now.
fn in_seconds(seconds: i64) -> Timestamp {
    let micros = Timestamp::now().as_micros() as i64 + seconds * 1_000_000;
    Timestamp::from_micros(micros as u64)
}

/// A key is shown once with its secret, and that secret authenticates as the key: its
/// tenant, role and user.
pub async fn a_key_authenticates_to_its_tenant_and_role(backend: &dyn KeyBackend) {
    let tenant = tenant();
    let now = Timestamp::now();
    for new in [
        service(&tenant),
        NewKey {
            role: KeyRole::TenantAdmin,
            name: None,
            ..service(&tenant)
        },
        NewKey {
            role: KeyRole::User,
            user_id: Some("ada".into()),
            expires_at: Some(in_seconds(3_600)),
            ..service(&tenant)
        },
    ] {
        let issued = backend.create_key(new.clone()).await.unwrap();
        let key = &issued.key;
        assert_eq!(
            (&key.tenant, key.role, &key.user_id, &key.name),
            (&new.tenant, new.role, &new.user_id, &new.name)
        );
        assert_eq!((key.expires_at, key.revoked_at), (new.expires_at, None));
        assert!(key.created_at.as_micros() >= now.as_micros() - 60_000_000);
        // `mlk_<16 hex prefix>_<64 hex secret>`.
        let rest = issued.secret.strip_prefix(KEY_SCHEME).expect("the scheme");
        let (prefix, secret) = rest.split_once('_').expect("prefix_secret");
        assert_eq!(prefix, key.prefix);
        assert_eq!((prefix.len(), secret.len()), (16, 64));
        assert!(
            rest.bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'_'))
        );
        assert_eq!(
            backend.authenticate_key(&issued.secret, now).await.unwrap(),
            Ok(key.clone())
        );
        assert_eq!(backend.key(&key.prefix).await.unwrap(), Some(key.clone()));
    }
    assert_eq!(backend.key("0123456789abcdef").await.unwrap(), None);
}

/// A wrong secret, an unknown prefix or anything else that could be a key is unknown (one
/// answer for all); what cannot be a key at all is malformed.
pub async fn wrong_and_malformed_keys_are_unknown(backend: &dyn KeyBackend) {
    let tenant = tenant();
    let issued = backend.create_key(service(&tenant)).await.unwrap();
    let now = Timestamp::now();
    let mut wrong = issued.secret.clone();
    let last = if wrong.ends_with('0') { "1" } else { "0" };
    wrong.replace_range(wrong.len() - 1.., last);
    let unknown_prefix = format!("{KEY_SCHEME}{}_{}", "0".repeat(16), &issued.secret[21..]);
    let secret_alone = issued.secret[21..].to_owned();
    for presented in [
        wrong.as_str(),
        unknown_prefix.as_str(),
        secret_alone.as_str(),
        issued.key.prefix.as_str(),
        "some-visible-ascii-that-is-no-key",
    ] {
        assert_eq!(
            backend.authenticate_key(presented, now).await.unwrap(),
            Err(KeyRejection::Unknown),
            "{presented:?}"
        );
    }
    for malformed in ["", "mlk_ x", &"a".repeat(300), "clé", "tab\tkey"] {
        assert_eq!(
            backend.authenticate_key(malformed, now).await.unwrap(),
            Err(KeyRejection::Malformed),
            "{malformed:?}"
        );
    }
    // Nothing of that touched the key.
    assert!(
        backend
            .authenticate_key(&issued.secret, now)
            .await
            .unwrap()
            .is_ok()
    );
}

/// An expired key is refused from its expiry on, a revoked one from its revocation on, for
/// good; revoking again keeps the first revocation, and both stay listed.
pub async fn revoked_and_expired_keys_are_rejected(backend: &dyn KeyBackend) {
    let tenant = tenant();
    let expires = in_seconds(60);
    let expiring = backend
        .create_key(NewKey {
            expires_at: Some(expires),
            ..service(&tenant)
        })
        .await
        .unwrap();
    let now = Timestamp::now();
    assert!(
        backend
            .authenticate_key(&expiring.secret, now)
            .await
            .unwrap()
            .is_ok()
    );
    let just_before = Timestamp::from_micros(expires.as_micros() - 1);
    assert!(
        backend
            .authenticate_key(&expiring.secret, just_before)
            .await
            .unwrap()
            .is_ok()
    );
    for later in [expires, Timestamp::from_micros(expires.as_micros() + 1)] {
        assert_eq!(
            backend
                .authenticate_key(&expiring.secret, later)
                .await
                .unwrap(),
            Err(KeyRejection::Expired)
        );
    }
    // Already expired when created: the store takes it, and refuses it.
    let expired = backend
        .create_key(NewKey {
            expires_at: Some(in_seconds(-60)),
            ..service(&tenant)
        })
        .await
        .unwrap();
    assert_eq!(
        backend
            .authenticate_key(&expired.secret, now)
            .await
            .unwrap(),
        Err(KeyRejection::Expired)
    );

    let revoked = backend
        .revoke_key(Some(&tenant), &expiring.key.prefix)
        .await
        .unwrap()
        .expect("its own tenant revokes it");
    let at = revoked.revoked_at.expect("revoked");
    assert_eq!(
        ApiKey {
            revoked_at: None,
            ..revoked.clone()
        },
        expiring.key
    );
    // Revoked comes before expired.
    assert_eq!(
        backend
            .authenticate_key(&expiring.secret, now)
            .await
            .unwrap(),
        Err(KeyRejection::Revoked)
    );
    assert_eq!(
        backend
            .authenticate_key(&expiring.secret, expires)
            .await
            .unwrap(),
        Err(KeyRejection::Revoked)
    );
    let again = backend
        .revoke_key(None, &expiring.key.prefix)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.revoked_at, Some(at), "the first revocation is kept");
    assert_eq!(
        backend.key(&expiring.key.prefix).await.unwrap(),
        Some(revoked)
    );
    let listed = backend.list_keys(Some(&tenant)).await.unwrap();
    assert_eq!(listed.len(), 2, "revoked and expired keys stay listed");
    assert_eq!(
        backend.revoke_key(Some(&tenant), "0000").await.unwrap(),
        None
    );
}

/// A tenant's listing holds its keys and only them, oldest first, and no secret; every
/// tenant's listing holds them all.
pub async fn keys_are_listed_by_tenant_without_secrets(backend: &dyn KeyBackend) {
    let (tenant, other) = (tenant(), self::tenant());
    let mut issued = Vec::new();
    for new in [
        service(&tenant),
        service(&other),
        NewKey {
            role: KeyRole::User,
            user_id: Some("ada".into()),
            ..service(&tenant)
        },
        NewKey {
            role: KeyRole::TenantAdmin,
            ..service(&tenant)
        },
    ] {
        issued.push(backend.create_key(new).await.unwrap());
    }
    let oldest_first = |tenant: &str| {
        let mut keys: Vec<ApiKey> = issued
            .iter()
            .filter(|issued| issued.key.tenant == tenant)
            .map(|issued| issued.key.clone())
            .collect();
        keys.sort_by(|a, b| (a.created_at, &a.prefix).cmp(&(b.created_at, &b.prefix)));
        keys
    };
    let listed = backend.list_keys(Some(&tenant)).await.unwrap();
    assert_eq!(listed, oldest_first(&tenant));
    assert_eq!(
        backend.list_keys(Some(&other)).await.unwrap(),
        oldest_first(&other)
    );
    // Not a prefix match, and an unknown tenant has none.
    assert!(
        backend
            .list_keys(Some(&tenant[..tenant.len() - 1]))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        backend
            .list_keys(Some(&self::tenant()))
            .await
            .unwrap()
            .is_empty()
    );
    // Every tenant's, other cases' included: keep these two tenants'.
    let mut everyone: Vec<ApiKey> = backend
        .list_keys(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|key| key.tenant == tenant || key.tenant == other)
        .collect();
    everyone.sort_by(|a, b| a.prefix.cmp(&b.prefix));
    let mut expected: Vec<ApiKey> = issued.iter().map(|issued| issued.key.clone()).collect();
    expected.sort_by(|a, b| a.prefix.cmp(&b.prefix));
    assert_eq!(everyone, expected);
    // No listing holds a secret, in any field.
    let shown = format!("{listed:?}{everyone:?}");
    for issued in &issued {
        let secret = issued.secret.rsplit('_').next().unwrap();
        assert!(!shown.contains(secret), "a listing shows a secret");
    }
    assert_eq!(
        refusal(backend.list_keys(Some(OPERATOR_TENANT)).await),
        invalid_id()
    );
    assert_eq!(refusal(backend.list_keys(Some("a/b")).await), invalid_id());
}

/// A tenant cannot revoke another tenant's key: the key is not found, and still works.
pub async fn revoking_another_tenants_key_does_nothing(backend: &dyn KeyBackend) {
    let (tenant, other) = (tenant(), self::tenant());
    let issued = backend.create_key(service(&tenant)).await.unwrap();
    let prefix = &issued.key.prefix;
    assert_eq!(
        backend.revoke_key(Some(&other), prefix).await.unwrap(),
        None
    );
    assert_eq!(
        backend
            .revoke_key(Some(BOOTSTRAP_TENANT), prefix)
            .await
            .unwrap(),
        None
    );
    assert_eq!(backend.key(prefix).await.unwrap(), Some(issued.key.clone()));
    assert_eq!(
        backend
            .authenticate_key(&issued.secret, Timestamp::now())
            .await
            .unwrap(),
        Ok(issued.key.clone())
    );
    assert_eq!(
        backend.list_keys(Some(&tenant)).await.unwrap(),
        [issued.key]
    );
}

/// A key's role decides whether it has a user; names are short visible text; tenants are
/// ids. Nothing is created for a refused key.
pub async fn invalid_keys_are_refused(backend: &dyn KeyBackend) {
    let tenant = tenant();
    for (bad, expected) in [
        (
            NewKey {
                role: KeyRole::User,
                ..service(&tenant)
            },
            invalid_input(),
        ),
        (
            NewKey {
                user_id: Some("ada".into()),
                ..service(&tenant)
            },
            invalid_input(),
        ),
        (
            NewKey {
                role: KeyRole::User,
                user_id: Some("a/b".into()),
                ..service(&tenant)
            },
            invalid_id(),
        ),
        (
            NewKey {
                name: Some(" ".into()),
                ..service(&tenant)
            },
            invalid_input(),
        ),
        (
            NewKey {
                name: Some("x".repeat(MAX_KEY_NAME_LEN + 1)),
                ..service(&tenant)
            },
            invalid_input(),
        ),
        (
            NewKey {
                name: Some("line\nbreak".into()),
                ..service(&tenant)
            },
            invalid_input(),
        ),
        (service("a/b"), invalid_id()),
        (service(OPERATOR_TENANT), invalid_id()),
        (
            NewKey {
                role: KeyRole::Operator,
                ..service(&tenant)
            },
            invalid_input(),
        ),
    ] {
        assert_eq!(
            refusal(backend.create_key(bad.clone()).await),
            expected,
            "{bad:?}"
        );
    }
    assert!(backend.list_keys(Some(&tenant)).await.unwrap().is_empty());
    // The longest name is fine, in characters.
    let longest = backend
        .create_key(NewKey {
            name: Some("é".repeat(MAX_KEY_NAME_LEN)),
            ..service(&tenant)
        })
        .await
        .unwrap();
    assert_eq!(longest.key.name, Some("é".repeat(MAX_KEY_NAME_LEN)));
}

/// An operator key belongs to no tenant: it authenticates for `*`, is listed with every
/// tenant's keys only, and no tenant revokes it.
pub async fn operator_keys_belong_to_no_tenant(backend: &dyn KeyBackend) {
    let tenant = tenant();
    let operator = backend
        .create_key(NewKey {
            role: KeyRole::Operator,
            name: Some(tenant.clone()),
            ..service(OPERATOR_TENANT)
        })
        .await
        .unwrap();
    let key = backend
        .authenticate_key(&operator.secret, Timestamp::now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (key.role, key.tenant.as_str(), key.user_id),
        (KeyRole::Operator, OPERATOR_TENANT, None)
    );
    let prefix = &operator.key.prefix;
    for tenant in [tenant.as_str(), BOOTSTRAP_TENANT] {
        assert_eq!(
            backend.revoke_key(Some(tenant), prefix).await.unwrap(),
            None
        );
        assert!(
            backend
                .list_keys(Some(tenant))
                .await
                .unwrap()
                .iter()
                .all(|key| key.prefix != *prefix)
        );
    }
    let everyone = backend.list_keys(None).await.unwrap();
    assert!(everyone.contains(&operator.key));
    // Only a revocation for any tenant reaches it.
    let revoked = backend.revoke_key(None, prefix).await.unwrap().unwrap();
    assert!(revoked.revoked_at.is_some());
    assert_eq!(
        backend
            .authenticate_key(&operator.secret, Timestamp::now())
            .await
            .unwrap(),
        Err(KeyRejection::Revoked)
    );
}

/// Bootstrapping again changes nothing: a key is generated only while no tenant has one
/// (once, however many start at once), the configured key is stored once, stays revoked
/// once revoked, and is replaced when another is configured and removed when none is.
///
/// The configured key and the bootstrap tenant are the whole backend's: no other case may
/// configure a key.
pub async fn bootstrap_is_idempotent(backend: &dyn KeyBackend) {
    let now = Timestamp::now();
    // Other cases' keys may exist already in a shared backend: then nothing is generated.
    let (first, second) = both(backend.bootstrap_keys(None), backend.bootstrap_keys(None)).await;
    let mut generated = Vec::new();
    for outcome in [first.unwrap(), second.unwrap()] {
        match outcome {
            Bootstrap::Generated(issued) => generated.push(issued),
            Bootstrap::Existing => {}
            other => panic!("nothing configured, yet {other:?}"),
        }
    }
    assert!(generated.len() <= 1, "two bootstrap keys: {generated:?}");
    if let Some(issued) = generated.pop() {
        assert_eq!(
            (issued.key.tenant.as_str(), issued.key.role),
            (BOOTSTRAP_TENANT, KeyRole::TenantAdmin)
        );
        assert_eq!(
            backend.authenticate_key(&issued.secret, now).await.unwrap(),
            Ok(issued.key)
        );
    }
    assert!(matches!(
        backend.bootstrap_keys(None).await.unwrap(),
        Bootstrap::Existing
    ));

    let configured = format!("{}-configured", uuid::Uuid::new_v4().simple());
    for _ in 0..2 {
        assert!(matches!(
            backend.bootstrap_keys(Some(&configured)).await.unwrap(),
            Bootstrap::Configured
        ));
    }
    let key = backend
        .authenticate_key(&configured, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (key.prefix.as_str(), key.tenant.as_str(), key.role),
        (
            CONFIGURED_KEY_PREFIX,
            BOOTSTRAP_TENANT,
            KeyRole::TenantAdmin
        )
    );
    assert_eq!(
        backend.key(CONFIGURED_KEY_PREFIX).await.unwrap(),
        Some(key.clone())
    );
    // Listed with its tenant's keys, once.
    let listed = backend.list_keys(Some(BOOTSTRAP_TENANT)).await.unwrap();
    assert_eq!(listed.iter().filter(|listed| **listed == key).count(), 1);

    // Revoked, it stays revoked however often the same key is configured.
    backend
        .revoke_key(Some(BOOTSTRAP_TENANT), CONFIGURED_KEY_PREFIX)
        .await
        .unwrap()
        .unwrap();
    for _ in 0..2 {
        assert!(matches!(
            backend.bootstrap_keys(Some(&configured)).await.unwrap(),
            Bootstrap::ConfiguredRevoked
        ));
    }
    assert_eq!(
        backend.authenticate_key(&configured, now).await.unwrap(),
        Err(KeyRejection::Revoked)
    );

    // Another configured key replaces it.
    let rotated = format!("{}-rotated", uuid::Uuid::new_v4().simple());
    assert!(matches!(
        backend.bootstrap_keys(Some(&rotated)).await.unwrap(),
        Bootstrap::Configured
    ));
    assert!(
        backend
            .authenticate_key(&rotated, now)
            .await
            .unwrap()
            .is_ok()
    );
    assert_eq!(
        backend.authenticate_key(&configured, now).await.unwrap(),
        Err(KeyRejection::Unknown)
    );
    // Configured no more, it is gone, and nothing is generated: tenants have keys.
    assert!(matches!(
        backend.bootstrap_keys(None).await.unwrap(),
        Bootstrap::Existing
    ));
    assert_eq!(
        backend.authenticate_key(&rotated, now).await.unwrap(),
        Err(KeyRejection::Unknown)
    );
    assert_eq!(backend.key(CONFIGURED_KEY_PREFIX).await.unwrap(), None);
    assert!(
        backend
            .list_keys(Some(BOOTSTRAP_TENANT))
            .await
            .unwrap()
            .iter()
            .all(|key| key.prefix != CONFIGURED_KEY_PREFIX)
    );

    assert_eq!(
        refusal(backend.bootstrap_keys(Some("short")).await),
        invalid_input()
    );
    assert_eq!(
        refusal(backend.bootstrap_keys(Some(&"x ".repeat(20))).await),
        invalid_input()
    );
}
