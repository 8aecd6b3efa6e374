//! API keys: the credentials with which programs act for a tenant (project). A key is shown
//! once, when it is created; the store keeps only a SHA-256 hash of it, under a short public
//! prefix that finds it, with its tenant, role, optional user, expiry and revocation.
//!
//! A generated key reads `mlk_<prefix>_<secret>`: `prefix` is 16 lowercase hex digits (64
//! random bits; public: it names the key in listings, logs and `DELETE /v1/keys/{prefix}`),
//! `secret` is 64 lowercase hex digits (256 bits from the operating system's random number
//! generator). An operator may also configure one admin key of their own (`admin_key`), of
//! any shape of at least [`MIN_CONFIGURED_KEY_LEN`] characters; it is stored under the
//! reserved prefix [`CONFIGURED_KEY_PREFIX`].
//!
//! Keys act for one tenant, except [`KeyRole::Operator`] keys: the operator's credential for
//! what concerns the whole store (a backup holds every tenant's data), which belongs to no
//! tenant. Such keys are stored under [`OPERATOR_TENANT`], which is not a valid tenant id, so
//! no tenant's listing, revocation or tenant header can reach them.
//!
//! **Invariant:** no record holds a secret. What is stored is `SHA-256(whole key)`; checking
//! a presented key hashes it and compares the digests in constant time.
//!
//! Why a fast hash: a generated key carries 256 bits of entropy, so no amount of hashing
//! speed makes guessing it from a stolen file feasible. Slow password hashes (Argon2, bcrypt,
//! scrypt) exist to protect low-entropy human passwords, and would cost every request
//! milliseconds of CPU for nothing. The configured key is the operator's: the docs ask for a
//! random one (`openssl rand -hex 32`), and its minimum length rules out short passwords.

use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::model::{Timestamp, validate_id};
use crate::record::Record;
use crate::store::{Keys, blocking, wait};
use crate::tables::{API_KEY_TENANTS, API_KEYS};
use crate::{Result, StoreError};

/// What every generated key starts with, so that a leaked one is recognisable (secret
/// scanners, logs) and a client sending something else is told at once.
pub const KEY_SCHEME: &str = "mlk_";
/// The prefix the configured admin key (`admin_key`, `MEMLAYER_ADMIN_KEY`) is stored under.
/// Generated prefixes are hex digits, so they never collide with it.
pub const CONFIGURED_KEY_PREFIX: &str = "config";
/// The tenant of the configured and of the bootstrap admin key.
pub const BOOTSTRAP_TENANT: &str = "default";
/// What an [`KeyRole::Operator`] key has for a tenant: `*`, the whole store. Tenant ids
/// cannot contain `*` (`validate_id`), so it names no tenant.
pub const OPERATOR_TENANT: &str = "*";
/// Shortest configured admin key accepted: 32 characters, 128 bits if they are random hex.
pub const MIN_CONFIGURED_KEY_LEN: usize = 32;
/// Longest key accepted anywhere; longer input is refused before it is hashed.
const MAX_KEY_LEN: usize = 256;
/// Random bytes of a generated prefix (16 hex digits).
const PREFIX_BYTES: usize = 8;
/// Random bytes of a generated secret (64 hex digits, 256 bits).
const SECRET_BYTES: usize = 32;
/// Longest key name.
/// Longest key name, in characters.
pub const MAX_KEY_NAME_LEN: usize = 128;

/// What a key may do. The server maps roles to routes; the store only records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyRole {
    /// Everything in its tenant: settings, stats, purge, retention, erasure receipts,
    /// erasing users, and managing keys.
    TenantAdmin,
    /// An agent backend: sessions, messages, runs, context, recall, search, clear, reading
    /// settings, and erasing messages and sessions of its tenant.
    Service,
    /// Acts for one end user ([`ApiKey::user_id`]): only that user's sessions and recall.
    User,
    /// The operator of the whole store, of no tenant ([`OPERATOR_TENANT`]): whole-store
    /// operations (the backup) and nothing of any tenant. Created only on the data directory
    /// (`memlayer keys create --role operator`), never through the API.
    Operator,
}

// The record stores the role by variant index (bincode's enum encoding): append new roles at
// the end, never reorder.

impl KeyRole {
    /// Its name on the wire and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TenantAdmin => "tenant_admin",
            Self::Service => "service",
            Self::User => "user",
            Self::Operator => "operator",
        }
    }
}

impl std::fmt::Display for KeyRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KeyRole {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "tenant_admin" => Ok(Self::TenantAdmin),
            "service" => Ok(Self::Service),
            "user" => Ok(Self::User),
            "operator" => Ok(Self::Operator),
            other => Err(StoreError::InvalidInput {
                field: "role",
                reason: format!("{other:?} is not one of tenant_admin, service, user, operator"),
            }),
        }
    }
}

/// A stored key, without its secret (the store never has it after creation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Public identifier: finds the key, and names it in listings, logs and revocations.
    pub prefix: String,
    /// The tenant it acts for; [`OPERATOR_TENANT`] for an operator key.
    pub tenant: String,
    /// What it may do.
    pub role: KeyRole,
    /// For [`KeyRole::User`]: the one user it acts for.
    pub user_id: Option<String>,
    /// A label for people ("billing backend").
    pub name: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it stops working, if ever.
    pub expires_at: Option<Timestamp>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
}

impl ApiKey {
    /// Whether it authenticates at `now`: not revoked and not expired.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|at| now < at)
    }
}

/// A key to create.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// The tenant it acts for: a tenant id, or [`OPERATOR_TENANT`] for (and only for) an
    /// operator key.
    pub tenant: String,
    /// What it may do.
    pub role: KeyRole,
    /// Required for [`KeyRole::User`], refused for the other roles.
    pub user_id: Option<String>,
    /// A label for people.
    pub name: Option<String>,
    /// When it stops working. The store takes any time, even a past one; callers decide
    /// what they accept.
    pub expires_at: Option<Timestamp>,
}

/// A key just created: the only moment its secret exists outside the client.
#[derive(Clone)]
pub struct IssuedKey {
    /// The stored part.
    pub key: ApiKey,
    /// The whole key, `mlk_<prefix>_<secret>`, to be shown once and never again.
    pub secret: String,
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey")
            .field("key", &self.key)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a presented key does not authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRejection {
    /// Not a key at all (empty, too long, not visible ASCII).
    Malformed,
    /// No key matches: unknown prefix or wrong secret (deliberately the same answer).
    Unknown,
    /// The secret matched a revoked key.
    Revoked,
    /// The secret matched an expired key.
    Expired,
}

/// What [`Store::bootstrap_keys`] did.
#[derive(Debug, Clone)]
pub enum Bootstrap {
    /// The configured admin key is stored and active.
    Configured,
    /// The configured admin key was revoked (through the API or the command line); it stays
    /// revoked until the operator configures another.
    ConfiguredRevoked,
    /// No tenant had a key and none was configured: this admin key of tenant
    /// [`BOOTSTRAP_TENANT`] was created. Show it once.
    Generated(IssuedKey),
    /// Tenant keys exist and none is configured: nothing to do.
    Existing,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    tenant: String,
    role: KeyRole,
    user_id: Option<String>,
    name: Option<String>,
    /// SHA-256 of the whole key; never the key.
    hash: [u8; 32],
    created_at: u64,
    expires_at: Option<u64>,
    revoked_at: Option<u64>,
}

impl Record for KeyRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "key record";
}

impl KeyRecord {
    fn into_key(self, prefix: String) -> ApiKey {
        ApiKey {
            prefix,
            tenant: self.tenant,
            role: self.role,
            user_id: self.user_id,
            name: self.name,
            created_at: Timestamp::from_micros(self.created_at),
            expires_at: self.expires_at.map(Timestamp::from_micros),
            revoked_at: self.revoked_at.map(Timestamp::from_micros),
        }
    }
}

/// What a store keeps of a key: the SHA-256 of the whole key, never the key. Both backends
/// store and compare this (in constant time).
pub fn key_digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn random_hex<const N: usize>() -> Result<String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|err| StoreError::Random(err.to_string()))?;
    Ok(hex(&bytes))
}

/// The whole text of a generated key, `mlk_<prefix>_<secret>`.
pub fn issued_key_text(prefix: &str, secret: &str) -> String {
    format!("{KEY_SCHEME}{prefix}_{secret}")
}

/// The prefix of a generated key (`mlk_<16 hex>_<64 hex>`), or `None` for anything else.
pub fn generated_key_prefix(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(KEY_SCHEME)?;
    let (prefix, secret) = rest.split_once('_')?;
    let hex_of = |text: &str, len: usize| {
        text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    (hex_of(prefix, PREFIX_BYTES * 2) && hex_of(secret, SECRET_BYTES * 2)).then_some(prefix)
}

/// The stored key `presented` (well formed) is, if it authenticates at `now`, read in `txn`.
fn stored_key(
    txn: &ReadTransaction,
    presented: &str,
    now: Timestamp,
) -> Result<std::result::Result<ApiKey, KeyRejection>> {
    let digest = key_digest(presented);
    let keys = txn.open_table(API_KEYS)?;
    // A generated key names its record; anything else can only be the configured key,
    // which may also have the generated shape (an operator reusing a generated key).
    let mut candidates = vec![CONFIGURED_KEY_PREFIX];
    if let Some(prefix) = generated_key_prefix(presented) {
        candidates.insert(0, prefix);
    }
    let mut found = None;
    for prefix in candidates {
        let record = keys
            .get(prefix)?
            .map(|value| KeyRecord::decode(value.value()))
            .transpose()?;
        let stored = record.as_ref().map_or([0u8; 32], |record| record.hash);
        if bool::from(digest.ct_eq(&stored)) && record.is_some() {
            found = record.map(|record| (prefix, record));
            break;
        }
    }
    let Some((prefix, record)) = found else {
        return Ok(Err(KeyRejection::Unknown));
    };
    let key = record.into_key(prefix.to_owned());
    if key.revoked_at.is_some() {
        Ok(Err(KeyRejection::Revoked))
    } else if !key.is_active(now) {
        Ok(Err(KeyRejection::Expired))
    } else {
        Ok(Ok(key))
    }
}

/// Whether `key` could be a key at all: 1 to 256 visible ASCII characters. Anything else is
/// refused before it is hashed.
pub fn well_formed_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Checks a configured admin key: visible ASCII, no shorter than [`MIN_CONFIGURED_KEY_LEN`].
pub fn validate_configured_key(key: &str) -> Result<()> {
    let invalid = |reason: String| {
        Err(StoreError::InvalidInput {
            field: "admin_key",
            reason,
        })
    };
    if !well_formed_key(key) {
        return invalid(format!(
            "must be 1 to {MAX_KEY_LEN} visible ASCII characters (no spaces)"
        ));
    }
    if key.len() < MIN_CONFIGURED_KEY_LEN {
        return invalid(format!(
            "must be at least {MIN_CONFIGURED_KEY_LEN} characters; generate one with \
             `openssl rand -hex 32`"
        ));
    }
    Ok(())
}

impl NewKey {
    /// The checks before a key is created: the role decides the tenant and the user; names
    /// are short visible text.
    pub fn validate(&self) -> Result<()> {
        match self.role {
            KeyRole::Operator if self.tenant != OPERATOR_TENANT => {
                return Err(StoreError::InvalidInput {
                    field: "tenant",
                    reason: format!(
                        "an operator key belongs to no tenant (tenant {OPERATOR_TENANT:?})"
                    ),
                });
            }
            KeyRole::Operator => {}
            // `*` is not a valid id either: only operator keys have it.
            _ => validate_id("tenant", &self.tenant)?,
        }
        match (&self.role, &self.user_id) {
            (KeyRole::User, Some(user)) => validate_id("user_id", user)?,
            (KeyRole::User, None) => {
                return Err(StoreError::InvalidInput {
                    field: "user_id",
                    reason: "a user key needs the user it acts for".into(),
                });
            }
            (_, Some(_)) => {
                return Err(StoreError::InvalidInput {
                    field: "user_id",
                    reason: format!("only user keys have a user, not {} keys", self.role),
                });
            }
            (_, None) => {}
        }
        if let Some(name) = &self.name
            && (name.trim().is_empty()
                || name.chars().count() > MAX_KEY_NAME_LEN
                || name.chars().any(char::is_control))
        {
            return Err(StoreError::InvalidInput {
                field: "name",
                reason: format!("must be 1 to {MAX_KEY_NAME_LEN} characters, none of them control"),
            });
        }
        Ok(())
    }
}

/// Inserts a key record and its listing entry.
fn insert(txn: &WriteTransaction, prefix: &str, record: &KeyRecord) -> Result<()> {
    txn.open_table(API_KEYS)?
        .insert(prefix, record.encode().as_slice())?;
    txn.open_table(API_KEY_TENANTS)?
        .insert((record.tenant.as_str(), prefix), ())?;
    Ok(())
}

/// Creates a generated key in `txn` under the first free prefix of `prefixes`.
fn create_in(
    txn: &WriteTransaction,
    new: NewKey,
    prefixes: Vec<String>,
    secret: &str,
    now: Timestamp,
) -> Result<IssuedKey> {
    let keys = txn.open_table(API_KEYS)?;
    let mut free = None;
    for prefix in prefixes {
        if keys.get(prefix.as_str())?.is_none() {
            free = Some(prefix);
            break;
        }
    }
    drop(keys);
    // Four 64-bit prefixes all taken would take billions of keys; refuse rather than loop.
    let prefix = free.ok_or_else(|| StoreError::Conflict("no free key prefix; retry".into()))?;
    let whole = issued_key_text(&prefix, secret);
    let record = KeyRecord {
        tenant: new.tenant,
        role: new.role,
        user_id: new.user_id,
        name: new.name,
        hash: key_digest(&whole),
        created_at: now.as_micros(),
        expires_at: new.expires_at.map(Timestamp::as_micros),
        revoked_at: None,
    };
    insert(txn, &prefix, &record)?;
    Ok(IssuedKey {
        key: record.into_key(prefix),
        secret: whole,
    })
}

/// Whether any tenant has a key (revoked and expired ones count: the tenant was set up).
fn any_tenant_key(txn: &WriteTransaction) -> Result<bool> {
    for entry in txn.open_table(API_KEY_TENANTS)?.iter()? {
        if entry?.0.value().0 != OPERATOR_TENANT {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Random material for one new key: candidate prefixes (a collision is retried with the
/// next) and the secret.
/// Random material for one new key: candidate prefixes (a taken one is retried with the
/// next) and the secret. [`issued_key_text`] puts a prefix and the secret together.
pub fn fresh_key_material() -> Result<(Vec<String>, String)> {
    let prefixes = (0..4)
        .map(|_| random_hex::<PREFIX_BYTES>())
        .collect::<Result<_>>()?;
    Ok((prefixes, random_hex::<SECRET_BYTES>()?))
}

impl Keys<'_> {
    /// Creates a key and returns it with its secret, which nothing keeps: show it once.
    pub async fn create_key(self, new: NewKey) -> Result<IssuedKey> {
        if let Some(backend) = self.store.backend() {
            return backend.keys().create_key(new).await;
        }
        new.validate()?;
        let (prefixes, secret) = fresh_key_material()?;
        self.store
            .write(move |txn| create_in(txn, new, prefixes, &secret, Timestamp::now()))
            .await
    }

    /// The key `presented` is, if it authenticates at `now`. Unknown prefixes and wrong
    /// secrets are indistinguishable to the caller, and both take a hash and a constant-time
    /// comparison, so timing tells little either.
    ///
    /// Every request authenticates, so the file's answer is read on the calling task: a point
    /// read of the keys table, whose pages every request keeps in redb's cache, takes
    /// microseconds, where handing it to the blocking pool woke a thread per request and
    /// contended the pool's lock (about 12% of the async workers' time with 64 clients
    /// appending, against 3.4% for the lookup, docs/benchmarks.md). Only while a reopening holds the file does it wait,
    /// on the blocking pool. Revocation stays immediate: nothing is cached.
    pub async fn authenticate_key(
        self,
        presented: &str,
        now: Timestamp,
    ) -> Result<std::result::Result<ApiKey, KeyRejection>> {
        if let Some(backend) = self.store.backend() {
            return backend.keys().authenticate_key(presented, now).await;
        }
        if !well_formed_key(presented) {
            return Ok(Err(KeyRejection::Malformed));
        }
        if let Some(txn) = self.store.try_begin_read()? {
            return stored_key(&txn, presented, now);
        }
        let store = self.store.clone();
        let presented = presented.to_owned();
        blocking(move || stored_key(&*store.begin_read()?, &presented, now)).await
    }

    /// The key stored under `prefix`, of any tenant.
    pub fn key(self, prefix: &str) -> Result<Option<ApiKey>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.keys().key(prefix));
        }
        let txn = self.store.begin_read()?;
        let keys = txn.open_table(API_KEYS)?;
        keys.get(prefix)?
            .map(|value| Ok(KeyRecord::decode(value.value())?.into_key(prefix.to_owned())))
            .transpose()
    }

    /// The keys of `tenant` (of every tenant when `None`), revoked and expired ones included,
    /// oldest first.
    pub fn list_keys(self, tenant: Option<&str>) -> Result<Vec<ApiKey>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.keys().list_keys(tenant));
        }
        let txn = self.store.begin_read()?;
        let keys = txn.open_table(API_KEYS)?;
        let mut listed = match tenant {
            Some(tenant) => {
                validate_id("tenant", tenant)?;
                let owners = txn.open_table(API_KEY_TENANTS)?;
                let mut listed = Vec::new();
                for entry in owners.range((tenant, "")..)? {
                    let (key, _) = entry?;
                    let (owner, prefix) = key.value();
                    if owner != tenant {
                        break;
                    }
                    let value = keys.get(prefix)?.ok_or_else(|| StoreError::Corrupted {
                        what: "key listing",
                        detail: format!("key {prefix} is listed but not stored"),
                    })?;
                    listed.push(KeyRecord::decode(value.value())?.into_key(prefix.to_owned()));
                }
                listed
            }
            None => keys
                .iter()?
                .map(|entry| {
                    let (prefix, value) = entry?;
                    Ok(KeyRecord::decode(value.value())?.into_key(prefix.value().to_owned()))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        listed.sort_by(|a, b| (a.created_at, &a.prefix).cmp(&(b.created_at, &b.prefix)));
        Ok(listed)
    }

    /// Revokes the key under `prefix` if it belongs to `tenant` (any tenant when `None`).
    /// Returns it, revoked; `None` if there is no such key (or it is another tenant's).
    /// Revoking a revoked key changes nothing. A revoked key is kept, so that listings show
    /// it and its prefix is never handed out again.
    pub async fn revoke_key(self, tenant: Option<&str>, prefix: &str) -> Result<Option<ApiKey>> {
        if let Some(backend) = self.store.backend() {
            return backend.keys().revoke_key(tenant, prefix).await;
        }
        let (tenant, prefix) = (tenant.map(str::to_owned), prefix.to_owned());
        self.store
            .write(move |txn| {
                let mut keys = txn.open_table(API_KEYS)?;
                let record = keys
                    .get(prefix.as_str())?
                    .map(|value| KeyRecord::decode(value.value()))
                    .transpose()?;
                let Some(mut record) = record.filter(|record| {
                    tenant
                        .as_deref()
                        .is_none_or(|tenant| tenant == record.tenant)
                }) else {
                    return Ok(None);
                };
                if record.revoked_at.is_none() {
                    record.revoked_at = Some(Timestamp::now().as_micros());
                    keys.insert(prefix.as_str(), record.encode().as_slice())?;
                }
                Ok(Some(record.into_key(prefix)))
            })
            .await
    }

    /// Makes sure the server can be administered, once per start:
    ///
    /// - with `configured` (the operator's `admin_key`), stores its hash as a `tenant_admin`
    ///   key of tenant [`BOOTSTRAP_TENANT`] under [`CONFIGURED_KEY_PREFIX`], replacing the
    ///   key configured before if it changed. A configured key revoked since stays revoked
    ///   until another is configured.
    /// - without, removes a previously configured key (it is no longer the operator's), and
    ///   if no tenant has a key (operator keys administer no tenant), generates one, which
    ///   the caller shows once.
    pub async fn bootstrap_keys(self, configured: Option<&str>) -> Result<Bootstrap> {
        if let Some(backend) = self.store.backend() {
            return backend.keys().bootstrap_keys(configured).await;
        }
        if let Some(key) = configured {
            validate_configured_key(key)?;
        }
        let digest = configured.map(key_digest);
        let (prefixes, secret) = fresh_key_material()?;
        self.store
            .write(move |txn| {
                let now = Timestamp::now();
                let mut keys = txn.open_table(API_KEYS)?;
                let current = keys
                    .get(CONFIGURED_KEY_PREFIX)?
                    .map(|value| KeyRecord::decode(value.value()))
                    .transpose()?;
                match (digest, current) {
                    (Some(digest), Some(current)) if current.hash == digest => {
                        Ok(if current.revoked_at.is_some() {
                            Bootstrap::ConfiguredRevoked
                        } else {
                            Bootstrap::Configured
                        })
                    }
                    (Some(digest), _) => {
                        drop(keys);
                        let record = KeyRecord {
                            tenant: BOOTSTRAP_TENANT.to_owned(),
                            role: KeyRole::TenantAdmin,
                            user_id: None,
                            name: Some("configured admin key (admin_key)".to_owned()),
                            hash: digest,
                            created_at: now.as_micros(),
                            expires_at: None,
                            revoked_at: None,
                        };
                        insert(txn, CONFIGURED_KEY_PREFIX, &record)?;
                        Ok(Bootstrap::Configured)
                    }
                    (None, current) => {
                        if let Some(current) = current {
                            keys.remove(CONFIGURED_KEY_PREFIX)?;
                            txn.open_table(API_KEY_TENANTS)?
                                .remove((current.tenant.as_str(), CONFIGURED_KEY_PREFIX))?;
                        }
                        drop(keys);
                        if any_tenant_key(txn)? {
                            return Ok(Bootstrap::Existing);
                        }
                        let new = NewKey {
                            tenant: BOOTSTRAP_TENANT.to_owned(),
                            role: KeyRole::TenantAdmin,
                            user_id: None,
                            name: Some("bootstrap admin key".to_owned()),
                            expires_at: None,
                        };
                        create_in(txn, new, prefixes, &secret, now).map(Bootstrap::Generated)
                    }
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        (dir, store)
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

    #[tokio::test]
    async fn a_created_key_authenticates_and_its_secret_is_not_stored() {
        let (dir, store) = store();
        let issued = store.keys().create_key(service("acme")).await.unwrap();
        let prefix = issued.key.prefix.clone();
        assert_eq!(generated_key_prefix(&issued.secret), Some(prefix.as_str()));
        assert_eq!(issued.secret.len(), 4 + 16 + 1 + 64);
        let now = Timestamp::now();
        assert_eq!(
            store
                .keys()
                .authenticate_key(&issued.secret, now)
                .await
                .unwrap(),
            Ok(issued.key.clone())
        );
        // One character off, or the right prefix with another secret: unknown.
        let mut wrong = issued.secret.clone();
        let last = if wrong.ends_with('0') { "1" } else { "0" };
        wrong.replace_range(wrong.len() - 1.., last);
        assert_eq!(
            store.keys().authenticate_key(&wrong, now).await.unwrap(),
            Err(KeyRejection::Unknown)
        );
        for malformed in ["", "mlk_ x", &"a".repeat(300), "clé"] {
            assert_eq!(
                store.keys().authenticate_key(malformed, now).await.unwrap(),
                Err(KeyRejection::Malformed),
                "{malformed:?}"
            );
        }
        // Nothing of the secret part is in the file, in any form an attacker could use.
        let secret_part = issued.secret.rsplit('_').next().unwrap().to_owned();
        store.shutdown();
        drop(store);
        let bytes = std::fs::read(dir.path().join("memlayer.redb")).unwrap();
        let found = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        assert!(!found(secret_part.as_bytes()));
        assert!(!found(issued.secret.as_bytes()));
        assert!(found(prefix.as_bytes()), "the prefix is stored");
    }

    /// A key is checked on the request's task, but never waits there for the file: while a
    /// reopening holds it (as long as redb's repair may take), the check waits on the
    /// blocking pool and the async worker goes on serving.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_key_check_waits_off_the_async_worker_while_the_file_is_reopened() {
        let (_dir, store) = store();
        let issued = store.keys().create_key(service("acme")).await.unwrap();
        let reopening = store.hold_as_reopening();
        let checking = tokio::spawn({
            let store = store.clone();
            let secret = issued.secret.clone();
            async move {
                store
                    .keys()
                    .authenticate_key(&secret, Timestamp::now())
                    .await
            }
        });
        // The runtime's one worker still runs other tasks (waited for on the test's own
        // thread, which is not a worker).
        let (ran, other) = std::sync::mpsc::channel();
        tokio::spawn(async move { ran.send(()) });
        let waited = other.recv_timeout(std::time::Duration::from_secs(5));
        assert!(waited.is_ok(), "the async worker was blocked");
        assert!(!checking.is_finished());
        drop(reopening);
        assert_eq!(checking.await.unwrap().unwrap(), Ok(issued.key));
    }

    #[tokio::test]
    async fn revoked_and_expired_keys_are_refused() {
        let (_dir, store) = store();
        let issued = store.keys().create_key(service("acme")).await.unwrap();
        let soon = Timestamp::from_micros(Timestamp::now().as_micros() + 60_000_000);
        let expiring = store
            .keys()
            .create_key(NewKey {
                expires_at: Some(soon),
                ..service("acme")
            })
            .await
            .unwrap();
        let now = Timestamp::now();
        assert!(
            store
                .keys()
                .authenticate_key(&expiring.secret, now)
                .await
                .unwrap()
                .is_ok()
        );
        let later = Timestamp::from_micros(soon.as_micros() + 1);
        assert_eq!(
            store
                .keys()
                .authenticate_key(&expiring.secret, later)
                .await
                .unwrap(),
            Err(KeyRejection::Expired)
        );

        // Another tenant cannot revoke it; its own can, once.
        assert_eq!(
            store
                .keys()
                .revoke_key(Some("globex"), &issued.key.prefix)
                .await
                .unwrap(),
            None
        );
        let revoked = store
            .keys()
            .revoke_key(Some("acme"), &issued.key.prefix)
            .await
            .unwrap()
            .unwrap();
        let at = revoked.revoked_at.expect("revoked");
        let again = store
            .keys()
            .revoke_key(None, &issued.key.prefix)
            .await
            .unwrap();
        assert_eq!(again.unwrap().revoked_at, Some(at), "revocation is kept");
        assert_eq!(
            store
                .keys()
                .authenticate_key(&issued.secret, now)
                .await
                .unwrap(),
            Err(KeyRejection::Revoked)
        );
        assert_eq!(store.keys().revoke_key(None, "0000").await.unwrap(), None);
    }

    #[tokio::test]
    async fn keys_are_listed_by_tenant_and_roles_are_checked() {
        let (_dir, store) = store();
        let a = store.keys().create_key(service("acme")).await.unwrap();
        let g = store.keys().create_key(service("globex")).await.unwrap();
        let u = store
            .keys()
            .create_key(NewKey {
                role: KeyRole::User,
                user_id: Some("alice".into()),
                ..service("acme")
            })
            .await
            .unwrap();
        let prefixes = |keys: Vec<ApiKey>| keys.into_iter().map(|k| k.prefix).collect::<Vec<_>>();
        let mut acme = prefixes(store.keys().list_keys(Some("acme")).unwrap());
        acme.sort();
        let mut expected = vec![a.key.prefix.clone(), u.key.prefix.clone()];
        expected.sort();
        assert_eq!(acme, expected);
        assert_eq!(
            prefixes(store.keys().list_keys(Some("globex")).unwrap()),
            [g.key.prefix]
        );
        assert_eq!(store.keys().list_keys(None).unwrap().len(), 3);
        assert!(store.keys().list_keys(Some("acm")).unwrap().is_empty());

        for bad in [
            NewKey {
                role: KeyRole::User,
                ..service("acme")
            },
            NewKey {
                user_id: Some("alice".into()),
                ..service("acme")
            },
            NewKey {
                name: Some(" ".into()),
                ..service("acme")
            },
            service("a/b"),
        ] {
            assert!(
                store.keys().create_key(bad.clone()).await.is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            "tenant_admin".parse::<KeyRole>().unwrap(),
            KeyRole::TenantAdmin
        );
        assert!("admin".parse::<KeyRole>().is_err());
    }

    /// An operator key belongs to no tenant: only it has the tenant `*`, no tenant lists or
    /// revokes it, and a store whose only key is the operator's still gets its first admin
    /// key at the first start.
    #[tokio::test]
    async fn operator_keys_belong_to_no_tenant() {
        let (_dir, store) = store();
        let operator = NewKey {
            role: KeyRole::Operator,
            ..service(OPERATOR_TENANT)
        };
        let issued = store.keys().create_key(operator.clone()).await.unwrap();
        let now = Timestamp::now();
        let key = store
            .keys()
            .authenticate_key(&issued.secret, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((key.role, key.tenant.as_str()), (KeyRole::Operator, "*"));
        for bad in [
            NewKey {
                tenant: BOOTSTRAP_TENANT.into(),
                ..operator.clone()
            },
            NewKey {
                user_id: Some("alice".into()),
                ..operator.clone()
            },
            service(OPERATOR_TENANT),
        ] {
            assert!(
                store.keys().create_key(bad.clone()).await.is_err(),
                "{bad:?}"
            );
        }
        assert!(store.keys().list_keys(Some(OPERATOR_TENANT)).is_err());
        assert_eq!(
            store.keys().list_keys(None).unwrap(),
            std::slice::from_ref(&issued.key)
        );
        let prefix = &issued.key.prefix;
        assert_eq!(
            store
                .keys()
                .revoke_key(Some("default"), prefix)
                .await
                .unwrap(),
            None
        );

        let Bootstrap::Generated(admin) = store.keys().bootstrap_keys(None).await.unwrap() else {
            panic!("an operator key administers no tenant: the first admin key is generated");
        };
        assert_eq!(admin.key.tenant, BOOTSTRAP_TENANT);
        assert!(matches!(
            store.keys().bootstrap_keys(None).await.unwrap(),
            Bootstrap::Existing
        ));
        assert_eq!("operator".parse::<KeyRole>().unwrap(), KeyRole::Operator);
    }

    /// Records store the role as its variant index: the order of the roles is the format.
    #[test]
    fn roles_keep_their_stored_numbers() {
        let roles = [
            KeyRole::TenantAdmin,
            KeyRole::Service,
            KeyRole::User,
            KeyRole::Operator,
        ];
        for (number, role) in roles.into_iter().enumerate() {
            let bytes = bincode::serde::encode_to_vec(role, bincode::config::standard()).unwrap();
            assert_eq!(bytes, [number as u8], "{role}");
        }
    }

    #[tokio::test]
    async fn bootstrap_generates_once_or_stores_the_configured_key() {
        let (_dir, store) = store();
        let Bootstrap::Generated(first) = store.keys().bootstrap_keys(None).await.unwrap() else {
            panic!("an empty store gets a bootstrap key");
        };
        assert_eq!(first.key.role, KeyRole::TenantAdmin);
        assert_eq!(first.key.tenant, BOOTSTRAP_TENANT);
        assert!(matches!(
            store.keys().bootstrap_keys(None).await.unwrap(),
            Bootstrap::Existing
        ));

        let configured = "0123456789abcdef0123456789abcdef-operator";
        assert!(matches!(
            store.keys().bootstrap_keys(Some(configured)).await.unwrap(),
            Bootstrap::Configured
        ));
        let now = Timestamp::now();
        let key = store
            .keys()
            .authenticate_key(configured, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (key.prefix.as_str(), key.role, key.tenant.as_str()),
            (
                CONFIGURED_KEY_PREFIX,
                KeyRole::TenantAdmin,
                BOOTSTRAP_TENANT
            )
        );
        // Revoked, it stays revoked across starts with the same configuration.
        store
            .keys()
            .revoke_key(None, CONFIGURED_KEY_PREFIX)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            store.keys().bootstrap_keys(Some(configured)).await.unwrap(),
            Bootstrap::ConfiguredRevoked
        ));
        assert_eq!(
            store
                .keys()
                .authenticate_key(configured, now)
                .await
                .unwrap(),
            Err(KeyRejection::Revoked)
        );
        // A new configured key replaces it; unconfigured, it is gone.
        let rotated = "fedcba9876543210fedcba9876543210";
        store.keys().bootstrap_keys(Some(rotated)).await.unwrap();
        assert!(
            store
                .keys()
                .authenticate_key(rotated, now)
                .await
                .unwrap()
                .is_ok()
        );
        assert_eq!(
            store
                .keys()
                .authenticate_key(configured, now)
                .await
                .unwrap(),
            Err(KeyRejection::Unknown)
        );
        assert!(matches!(
            store.keys().bootstrap_keys(None).await.unwrap(),
            Bootstrap::Existing
        ));
        assert_eq!(
            store.keys().authenticate_key(rotated, now).await.unwrap(),
            Err(KeyRejection::Unknown)
        );
        assert!(store.keys().key(CONFIGURED_KEY_PREFIX).unwrap().is_none());
        assert!(
            store
                .keys()
                .authenticate_key(&first.secret, now)
                .await
                .unwrap()
                .is_ok()
        );

        assert!(store.keys().bootstrap_keys(Some("short")).await.is_err());

        // A configured key of the generated shape (a generated key reused) works too.
        let shaped = format!("{KEY_SCHEME}0123456789abcdef_{}", "ab".repeat(32));
        store.keys().bootstrap_keys(Some(&shaped)).await.unwrap();
        let key = store
            .keys()
            .authenticate_key(&shaped, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(key.prefix, CONFIGURED_KEY_PREFIX);
    }
}
