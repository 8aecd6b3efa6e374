//! Tenant-wide documents: the saved context settings of a tenant and of its agents.

use crate::store::{Tenants, wait};
use crate::tables::{SETTINGS, settings_scope};
use crate::{Metadata, Result, StoreError};

impl Tenants<'_> {
    /// The settings document of a tenant (`agent_id` `None`) or of one of its agents: a JSON
    /// object the caller interprets, or `None` when none was saved.
    pub fn settings(self, tenant: &str, agent_id: Option<&str>) -> Result<Option<Metadata>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.tenants().settings(tenant, agent_id));
        }
        let key = settings_scope(tenant, agent_id)?;
        let txn = self.store.begin_read()?;
        txn.open_table(SETTINGS)?
            .get((tenant, key.as_str()))?
            .map(|value| {
                serde_json::from_slice(value.value()).map_err(|err| StoreError::Corrupted {
                    what: "settings",
                    detail: err.to_string(),
                })
            })
            .transpose()
    }

    /// Saves (or, with `None`, removes) the settings document of a tenant or of one of its
    /// agents.
    pub async fn put_settings(
        self,
        tenant: &str,
        agent_id: Option<&str>,
        settings: Option<Metadata>,
    ) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend
                .tenants()
                .put_settings(tenant, agent_id, settings)
                .await;
        }
        let key = settings_scope(tenant, agent_id)?;
        let tenant = tenant.to_owned();
        let encoded = settings
            .map(|document| serde_json::to_vec(&document))
            .transpose()
            .map_err(|err| StoreError::InvalidInput {
                field: "settings",
                reason: err.to_string(),
            })?;
        self.store
            .write(move |txn| {
                let mut table = txn.open_table(SETTINGS)?;
                match encoded {
                    Some(bytes) => {
                        table.insert((tenant.as_str(), key.as_str()), bytes.as_slice())?
                    }
                    None => table.remove((tenant.as_str(), key.as_str()))?,
                };
                Ok(())
            })
            .await
    }
}
