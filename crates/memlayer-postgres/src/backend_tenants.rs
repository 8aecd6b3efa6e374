//! `PgStore` behind memlayer-store's backend boundary for tenants and keys
//! ([`TenantBackend`], [`KeyBackend`]): each method answers with its inherent method of the
//! same name (`tenants.rs`, `keys.rs`); caller mistakes come back as the very [`StoreError`]
//! they carry, every other failure as [`StoreError::Backend`].

use memlayer_store::{
    ApiKey, Bootstrap, BoxFuture, ConversationStats, IssuedKey, KeyBackend, KeyRejection, Metadata,
    NewKey, TenantBackend, Timestamp,
};

use crate::PgStore;
use crate::backend::store;

impl TenantBackend for PgStore {
    fn settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Metadata>>> {
        Box::pin(async move { store(self.settings(tenant, agent_id).await) })
    }

    fn put_settings<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: Option<&'a str>,
        settings: Option<Metadata>,
    ) -> BoxFuture<'a, memlayer_store::Result<()>> {
        Box::pin(async move { store(self.put_settings(tenant, agent_id, settings).await) })
    }

    fn conversation_stats<'a>(
        &'a self,
        tenant: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<ConversationStats>> {
        Box::pin(async move { store(self.conversation_stats(tenant).await) })
    }

    fn set_retention<'a>(
        &'a self,
        tenant: &'a str,
        days: Option<u32>,
    ) -> BoxFuture<'a, memlayer_store::Result<()>> {
        Box::pin(async move { store(self.set_retention(tenant, days).await) })
    }

    fn retention_rules(
        &self,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<(String, u32, Timestamp)>>> {
        Box::pin(async move { store(self.retention_rules().await) })
    }

    fn claim_retention<'a>(
        &'a self,
        tenant: &'a str,
        last_run: Timestamp,
        at: Timestamp,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.claim_retention(tenant, last_run, at).await) })
    }
}

impl KeyBackend for PgStore {
    fn create_key(&self, new: NewKey) -> BoxFuture<'_, memlayer_store::Result<IssuedKey>> {
        Box::pin(async move { store(self.create_key(new).await) })
    }

    fn authenticate_key<'a>(
        &'a self,
        presented: &'a str,
        now: Timestamp,
    ) -> BoxFuture<'a, memlayer_store::Result<std::result::Result<ApiKey, KeyRejection>>> {
        Box::pin(async move { store(self.authenticate_key(presented, now).await) })
    }

    fn key<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, memlayer_store::Result<Option<ApiKey>>> {
        Box::pin(async move { store(self.key(prefix).await) })
    }

    fn list_keys<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<ApiKey>>> {
        Box::pin(async move { store(self.list_keys(tenant).await) })
    }

    fn revoke_key<'a>(
        &'a self,
        tenant: Option<&'a str>,
        prefix: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<ApiKey>>> {
        Box::pin(async move { store(self.revoke_key(tenant, prefix).await) })
    }

    fn bootstrap_keys<'a>(
        &'a self,
        configured: Option<&'a str>,
    ) -> BoxFuture<'a, memlayer_store::Result<Bootstrap>> {
        Box::pin(async move { store(self.bootstrap_keys(configured).await) })
    }
}
