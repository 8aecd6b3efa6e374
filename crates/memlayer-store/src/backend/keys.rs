//! API keys: creating, authenticating, listing and revoking them, and the bootstrap admin key.

use super::BoxFuture;
use crate::Result;
use crate::keys::{ApiKey, Bootstrap, IssuedKey, KeyRejection, NewKey};
use crate::model::Timestamp;
use crate::store::Store;

/// API keys: [`Store::keys`] answered by a backend. Each method's contract is the handle's
/// method of the same name ([`crate::Keys`]); in particular no backend stores a secret, only
/// its SHA-256 hash.
pub trait KeyBackend: Send + Sync {
    /// [`crate::Keys::create_key`].
    fn create_key(&self, new: NewKey) -> BoxFuture<'_, Result<IssuedKey>>;

    /// [`crate::Keys::authenticate_key`].
    fn authenticate_key<'a>(
        &'a self,
        presented: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<std::result::Result<ApiKey, KeyRejection>>>;

    /// [`crate::Keys::key`].
    fn key<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<ApiKey>>>;

    /// [`crate::Keys::list_keys`].
    fn list_keys<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, Result<Vec<ApiKey>>>;

    /// [`crate::Keys::revoke_key`].
    fn revoke_key<'a>(
        &'a self,
        tenant: Option<&'a str>,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiKey>>>;

    /// [`crate::Keys::bootstrap_keys`]. With several callers at once (several nodes starting
    /// on one database), at most one key is generated.
    fn bootstrap_keys<'a>(
        &'a self,
        configured: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Bootstrap>>;
}

/// The redb store as a key backend. Its reads run on the blocking pool ([`Store::read`]),
/// as its callers run them, but for authentication (see [`crate::Keys::authenticate_key`]).
impl KeyBackend for Store {
    fn create_key(&self, new: NewKey) -> BoxFuture<'_, Result<IssuedKey>> {
        Box::pin(self.keys().create_key(new))
    }

    fn authenticate_key<'a>(
        &'a self,
        presented: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<std::result::Result<ApiKey, KeyRejection>>> {
        Box::pin(self.keys().authenticate_key(presented, now))
    }

    fn key<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<ApiKey>>> {
        let prefix = prefix.to_owned();
        Box::pin(self.read(move |store| store.keys().key(&prefix)))
    }

    fn list_keys<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, Result<Vec<ApiKey>>> {
        let tenant = tenant.map(str::to_owned);
        Box::pin(self.read(move |store| store.keys().list_keys(tenant.as_deref())))
    }

    fn revoke_key<'a>(
        &'a self,
        tenant: Option<&'a str>,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Option<ApiKey>>> {
        Box::pin(self.keys().revoke_key(tenant, prefix))
    }

    fn bootstrap_keys<'a>(
        &'a self,
        configured: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Bootstrap>> {
        Box::pin(self.keys().bootstrap_keys(configured))
    }
}
