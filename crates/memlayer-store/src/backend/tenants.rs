//! Tenant-wide documents: saved settings, retention rules and conversation stats.

use super::BoxFuture;
use crate::Result;
use crate::erasure::ConversationStats;
use crate::model::{Metadata, Timestamp};
use crate::store::Store;

/// Settings documents, retention rules and conversation stats: [`Store::tenants`] answered
/// by a backend. Each method's contract is the handle's method of the same name
/// ([`crate::Tenants`]).
pub trait TenantBackend: Send + Sync {
    /// [`crate::Tenants::settings`].
    fn settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<Metadata>>>;

    /// [`crate::Tenants::put_settings`].
    fn put_settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
        settings: Option<Metadata>,
    ) -> BoxFuture<'a, Result<()>>;

    /// [`crate::Tenants::conversation_stats`].
    fn conversation_stats<'a>(
        &'a self,
        tenant: &'a str,
    ) -> BoxFuture<'a, Result<ConversationStats>>;

    /// [`crate::Tenants::set_retention`].
    fn set_retention<'a>(&'a self, tenant: &'a str, days: Option<u32>)
    -> BoxFuture<'a, Result<()>>;

    /// [`crate::Tenants::retention_rules`]: every tenant's.
    fn retention_rules(&self) -> BoxFuture<'_, Result<Vec<(String, u32, Timestamp)>>>;

    /// [`crate::Tenants::claim_retention`].
    fn claim_retention<'a>(
        &'a self,
        tenant: &'a str,
        last_run: Timestamp,
        at: Timestamp,
    ) -> BoxFuture<'a, Result<bool>>;
}

/// The redb store as a tenant backend. Its reads run on the blocking pool ([`Store::read`]),
/// as its callers run them.
impl TenantBackend for Store {
    fn settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<Metadata>>> {
        let (tenant, agent_id) = (tenant.to_owned(), agent_id.map(str::to_owned));
        Box::pin(self.read(move |store| store.tenants().settings(&tenant, agent_id.as_deref())))
    }

    fn put_settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
        settings: Option<Metadata>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.tenants().put_settings(tenant, agent_id, settings))
    }

    fn conversation_stats<'a>(
        &'a self,
        tenant: &'a str,
    ) -> BoxFuture<'a, Result<ConversationStats>> {
        let tenant = tenant.to_owned();
        Box::pin(self.read(move |store| store.tenants().conversation_stats(&tenant)))
    }

    fn set_retention<'a>(
        &'a self,
        tenant: &'a str,
        days: Option<u32>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.tenants().set_retention(tenant, days))
    }

    fn retention_rules(&self) -> BoxFuture<'_, Result<Vec<(String, u32, Timestamp)>>> {
        Box::pin(self.read(|store| store.tenants().retention_rules()))
    }

    fn claim_retention<'a>(
        &'a self,
        tenant: &'a str,
        last_run: Timestamp,
        at: Timestamp,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.tenants().claim_retention(tenant, last_run, at))
    }
}
