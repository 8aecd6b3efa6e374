//! API keys, with the semantics of `memlayer_store::Keys`: the same key shape, checks and
//! answers, and the same invariant: no row holds a key, only the SHA-256 of the whole key,
//! compared in constant time (see `memlayer_store::keys` for why a fast hash is enough).
//!
//! Key material and digests never reach an error or a log: no error of this module formats
//! them, and the table has no CHECK constraint whose violation would print a row (see the
//! migration). Nothing is cached either: every authentication reads the key's row, so a
//! revocation holds from the next request on, on every node.
//!
//! The checks and the key's shape are memlayer-store's own (`well_formed_key`,
//! `generated_key_prefix`, `NewKey::validate`, `key_digest`, `fresh_key_material`), so both
//! backends accept and refuse the same keys.

use memlayer_store::{
    ApiKey, BOOTSTRAP_TENANT, Bootstrap, CONFIGURED_KEY_PREFIX, IssuedKey, KeyRejection, KeyRole,
    NewKey, OPERATOR_TENANT, StoreError, Timestamp, fresh_key_material, generated_key_prefix,
    issued_key_text, key_digest, validate_configured_key, validate_id, well_formed_key,
};
use subtle::ConstantTimeEq;
use tokio_postgres::Row;

use crate::sessions::{micros, unsigned};
use crate::{PgStore, PostgresError, Result};

/// The advisory lock bootstraps hold, so that nodes starting at once take turns and at most
/// one generates a key: "mlkeyboo" in ASCII, beside the migrations' "memlayer".
const BOOTSTRAP_LOCK: i64 = 0x6d6c_6b65_7962_6f6f;

/// The columns [`key_from_row`] reads, and the digest.
const KEY_COLUMNS: &str =
    "prefix, tenant, role, user_id, name, digest, created_at, expires_at, revoked_at";

/// What [`PgStore::authenticate_key`] sends: the rows of its candidate prefixes, found in
/// `api_keys_by_prefix`.
pub(crate) const AUTHENTICATE: &str = "SELECT prefix, tenant, role, user_id, name, digest, \
     created_at, expires_at, revoked_at FROM api_keys WHERE prefix = ANY($1)";

/// A role's number in `api_keys.role`: the redb record's (its variant index). Never renumber.
fn role_code(role: KeyRole) -> i16 {
    match role {
        KeyRole::TenantAdmin => 0,
        KeyRole::Service => 1,
        KeyRole::User => 2,
        KeyRole::Operator => 3,
    }
}

fn role_from_code(code: i16) -> Result<KeyRole> {
    Ok(match code {
        0 => KeyRole::TenantAdmin,
        1 => KeyRole::Service,
        2 => KeyRole::User,
        3 => KeyRole::Operator,
        other => {
            return Err(PostgresError::Corrupted {
                what: "API key",
                detail: format!("unknown role {other}"),
            });
        }
    })
}

/// The key in `row` ([`KEY_COLUMNS`]), without its digest.
fn key_from_row(row: &Row) -> Result<ApiKey> {
    let time = |column: &str| -> Result<Option<Timestamp>> {
        row.get::<_, Option<i64>>(column)
            .map(|at| Ok(Timestamp::from_micros(unsigned(at)?)))
            .transpose()
    };
    Ok(ApiKey {
        prefix: row.get("prefix"),
        tenant: row.get("tenant"),
        role: role_from_code(row.get("role"))?,
        user_id: row.get("user_id"),
        name: row.get("name"),
        created_at: Timestamp::from_micros(unsigned(row.get("created_at"))?),
        expires_at: time("expires_at")?,
        revoked_at: time("revoked_at")?,
    })
}

/// The digest in `row`, as the 32 bytes it must be.
fn digest_of(row: &Row) -> Result<[u8; 32]> {
    row.get::<_, &[u8]>("digest")
        .try_into()
        .map_err(|_| PostgresError::Corrupted {
            what: "API key",
            // The length only: never the digest.
            detail: "the stored digest is not 32 bytes".into(),
        })
}

/// Inserts a generated key under the first free prefix of `prefixes`, one statement per
/// prefix tried (normally one).
async fn create_in(
    client: &impl tokio_postgres::GenericClient,
    new: NewKey,
    prefixes: Vec<String>,
    secret: &str,
    now: Timestamp,
) -> Result<IssuedKey> {
    let created_at = micros(now)?;
    let expires_at = new.expires_at.map(micros).transpose()?;
    for prefix in prefixes {
        let whole = issued_key_text(&prefix, secret);
        let digest = key_digest(&whole);
        let row = client
            .query_opt(
                &format!(
                    "INSERT INTO api_keys (tenant, prefix, role, user_id, name, digest,
                                           created_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT DO NOTHING
                     RETURNING {KEY_COLUMNS}"
                ),
                &[
                    &new.tenant,
                    &prefix,
                    &role_code(new.role),
                    &new.user_id,
                    &new.name,
                    &digest.as_slice(),
                    &created_at,
                    &expires_at,
                ],
            )
            .await?;
        if let Some(row) = row {
            return Ok(IssuedKey {
                key: key_from_row(&row)?,
                secret: whole,
            });
        }
    }
    Err(StoreError::Conflict("no free key prefix; retry".into()).into())
}

impl PgStore {
    /// Creates a key and returns it with its secret, which nothing keeps: show it once.
    pub async fn create_key(&self, new: NewKey) -> Result<IssuedKey> {
        new.validate()?;
        let (prefixes, secret) = fresh_key_material()?;
        let client = self.connection().await?;
        create_in(&**client, new, prefixes, &secret, Timestamp::now()).await
    }

    /// The key `presented` is, if it authenticates at `now`. Unknown prefixes and wrong
    /// secrets are indistinguishable to the caller, and both take a hash and a constant-time
    /// comparison. One statement, on the unique index of prefixes: the generated key's prefix
    /// and the configured key's, as either may be the one presented.
    pub async fn authenticate_key(
        &self,
        presented: &str,
        now: Timestamp,
    ) -> Result<std::result::Result<ApiKey, KeyRejection>> {
        if !well_formed_key(presented) {
            return Ok(Err(KeyRejection::Malformed));
        }
        let digest = key_digest(presented);
        // A generated key names its row; anything else can only be the configured key, which
        // may also have the generated shape (an operator reusing a generated key).
        let mut candidates = vec![CONFIGURED_KEY_PREFIX];
        if let Some(prefix) = generated_key_prefix(presented) {
            candidates.insert(0, prefix);
        }
        let client = self.connection().await?;
        let rows = client.query(AUTHENTICATE, &[&candidates]).await?;
        let mut found = None;
        for prefix in candidates {
            let row = rows
                .iter()
                .find(|row| row.get::<_, &str>("prefix") == prefix);
            let stored = row.map(digest_of).transpose()?.unwrap_or([0u8; 32]);
            if bool::from(digest.ct_eq(&stored)) && row.is_some() {
                found = row;
                break;
            }
        }
        let Some(row) = found else {
            return Ok(Err(KeyRejection::Unknown));
        };
        let key = key_from_row(row)?;
        Ok(if key.revoked_at.is_some() {
            Err(KeyRejection::Revoked)
        } else if !key.is_active(now) {
            Err(KeyRejection::Expired)
        } else {
            Ok(key)
        })
    }

    /// The key stored under `prefix`, of any tenant.
    pub async fn key(&self, prefix: &str) -> Result<Option<ApiKey>> {
        let client = self.connection().await?;
        client
            .query_opt(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE prefix = $1"),
                &[&prefix],
            )
            .await?
            .as_ref()
            .map(key_from_row)
            .transpose()
    }

    /// The keys of `tenant` (of every tenant when `None`), revoked and expired ones included,
    /// oldest first (then by prefix). As in the redb store, not paged: keys are few, made by
    /// people.
    pub async fn list_keys(&self, tenant: Option<&str>) -> Result<Vec<ApiKey>> {
        let order = "ORDER BY created_at, prefix COLLATE \"C\"";
        let client = self.connection().await?;
        let rows = match tenant {
            Some(tenant) => {
                validate_id("tenant", tenant)?;
                // The tenant's part of the primary key.
                client
                    .query(
                        &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = $1 {order}"),
                        &[&tenant],
                    )
                    .await?
            }
            None => {
                client
                    .query(&format!("SELECT {KEY_COLUMNS} FROM api_keys {order}"), &[])
                    .await?
            }
        };
        rows.iter().map(key_from_row).collect()
    }

    /// Revokes the key under `prefix` if it belongs to `tenant` (any tenant when `None`), in
    /// one statement. Returns it, revoked; `None` if there is no such key (or it is another
    /// tenant's). Revoking a revoked key keeps its first revocation. A revoked key is kept,
    /// so that listings show it and its prefix is never handed out again.
    pub async fn revoke_key(&self, tenant: Option<&str>, prefix: &str) -> Result<Option<ApiKey>> {
        let now = micros(Timestamp::now())?;
        let client = self.connection().await?;
        client
            .query_opt(
                &format!(
                    "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $3)
                     WHERE prefix = $1 AND ($2::text IS NULL OR tenant = $2)
                     RETURNING {KEY_COLUMNS}"
                ),
                &[&prefix, &tenant, &now],
            )
            .await?
            .as_ref()
            .map(key_from_row)
            .transpose()
    }

    /// Makes sure the server can be administered, once per start, as
    /// `memlayer_store::Keys::bootstrap_keys`: stores the configured admin key (replacing
    /// another configured before; one revoked since stays revoked), or without one removes
    /// the key configured before and generates an admin key of [`BOOTSTRAP_TENANT`] if no
    /// tenant has a key.
    ///
    /// One transaction under an advisory lock: nodes starting at once on one database take
    /// turns, and the second finds the first one's key, so at most one key is generated.
    pub async fn bootstrap_keys(&self, configured: Option<&str>) -> Result<Bootstrap> {
        if let Some(key) = configured {
            validate_configured_key(key)?;
        }
        let digest = configured.map(key_digest);
        let (prefixes, secret) = fresh_key_material()?;
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        txn.execute("SELECT pg_advisory_xact_lock($1)", &[&BOOTSTRAP_LOCK])
            .await?;
        let now = Timestamp::now();
        let current = txn
            .query_opt(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE prefix = $1"),
                &[&CONFIGURED_KEY_PREFIX],
            )
            .await?;
        let current = current
            .as_ref()
            .map(|row| Ok::<_, PostgresError>((key_from_row(row)?, digest_of(row)?)))
            .transpose()?;
        let outcome = match (digest, current) {
            (Some(digest), Some((current, stored))) if bool::from(digest.ct_eq(&stored)) => {
                if current.revoked_at.is_some() {
                    Bootstrap::ConfiguredRevoked
                } else {
                    Bootstrap::Configured
                }
            }
            (Some(digest), _) => {
                // Another key was configured before (or none): this one replaces it, active.
                txn.execute(
                    "INSERT INTO api_keys (tenant, prefix, role, user_id, name, digest,
                                           created_at, expires_at, revoked_at)
                     VALUES ($1, $2, $3, NULL, $4, $5, $6, NULL, NULL)
                     ON CONFLICT (prefix) DO UPDATE SET
                         tenant = EXCLUDED.tenant, role = EXCLUDED.role, user_id = NULL,
                         name = EXCLUDED.name, digest = EXCLUDED.digest,
                         created_at = EXCLUDED.created_at, expires_at = NULL,
                         revoked_at = NULL",
                    &[
                        &BOOTSTRAP_TENANT,
                        &CONFIGURED_KEY_PREFIX,
                        &role_code(KeyRole::TenantAdmin),
                        &"configured admin key (admin_key)",
                        &digest.as_slice(),
                        &micros(now)?,
                    ],
                )
                .await?;
                Bootstrap::Configured
            }
            (None, current) => {
                if current.is_some() {
                    txn.execute(
                        "DELETE FROM api_keys WHERE prefix = $1",
                        &[&CONFIGURED_KEY_PREFIX],
                    )
                    .await?;
                }
                // Revoked and expired keys count: the tenant was set up. Operator keys
                // administer no tenant.
                let any_tenant_key: bool = txn
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM api_keys WHERE tenant <> $1)",
                        &[&OPERATOR_TENANT],
                    )
                    .await?
                    .get(0);
                if any_tenant_key {
                    Bootstrap::Existing
                } else {
                    let new = NewKey {
                        tenant: BOOTSTRAP_TENANT.to_owned(),
                        role: KeyRole::TenantAdmin,
                        user_id: None,
                        name: Some("bootstrap admin key".to_owned()),
                        expires_at: None,
                    };
                    Bootstrap::Generated(create_in(&*txn, new, prefixes, &secret, now).await?)
                }
            }
        };
        txn.commit().await?;
        Ok(outcome)
    }
}
