//! Tenant-wide records, with the semantics of `memlayer_store::Tenants`: the settings
//! documents of a tenant and of its agents (sealed under the tenant's data key, see the
//! migration `0003_tenants_keys.sql` for why one key per tenant), the conversation retention
//! rules, and conversation stats read from the sessions.

use memlayer_store::{
    ConversationStats, Metadata, StoreError, Timestamp, settings_scope, validate_id,
};
use tokio_postgres::Transaction;

use crate::seal::{DataKey, Field, Place};
use crate::sessions::{micros, unsigned};
use crate::{PgStore, PostgresError, Result};

/// Attempts at finding or creating a tenant's key before giving up: each one that loses did so
/// because a concurrent writer committed the key, which the next attempt reads.
const KEY_ATTEMPTS: usize = 3;

/// Where a settings document is sealed: its tenant and scope.
fn settings_place<'a>(tenant: &'a str, scope: &'a str) -> Place<'a> {
    Place {
        tenant,
        session_id: scope,
        index: 0,
        field: Field::Settings,
    }
}

/// The key that seals `tenant`'s settings, created with its first document. Holds the key's
/// row in `tenant_keys` (`FOR SHARE`) until `txn` ends, so it stays while the document sealed
/// under it is written.
async fn tenant_key(txn: &Transaction<'_>, tenant: &str) -> Result<DataKey> {
    for _ in 0..KEY_ATTEMPTS {
        let found = txn
            .query_opt(
                "SELECT t.key_id, k.key FROM tenant_keys t
                 JOIN data_keys k ON k.tenant = t.tenant AND k.key_id = t.key_id
                 WHERE t.tenant = $1
                 FOR SHARE OF t",
                &[&tenant],
            )
            .await?;
        if let Some(row) = found {
            return DataKey::from_stored(row.get("key_id"), row.get("key"));
        }
        let key = DataKey::generate()?;
        // A concurrent first document may create the tenant's key first: then nothing is
        // inserted (after waiting for that transaction) and the next attempt reads its key.
        let created = txn
            .execute(
                "WITH created AS (
                     INSERT INTO tenant_keys (tenant, key_id) VALUES ($1, $2)
                     ON CONFLICT DO NOTHING
                     RETURNING tenant, key_id
                 )
                 INSERT INTO data_keys (tenant, key_id, key)
                 SELECT tenant, key_id, $3 FROM created",
                &[&tenant, &key.id, &key.bytes()],
            )
            .await?;
        if created == 1 {
            return Ok(key);
        }
    }
    Err(PostgresError::Corrupted {
        what: "tenant key",
        detail: format!("tenant {tenant:?} has a key row but no data key"),
    })
}

impl PgStore {
    /// The settings document of a tenant (`agent_id` `None`) or of one of its agents, or
    /// `None` when none was saved.
    pub async fn settings(&self, tenant: &str, agent_id: Option<&str>) -> Result<Option<Metadata>> {
        let scope = settings_scope(tenant, agent_id)?;
        let client = self.connection().await?;
        let Some(row) = client
            .query_opt(
                "SELECT s.document, s.key_id, k.key FROM settings s
                 JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                 WHERE s.tenant = $1 AND s.scope = $2",
                &[&tenant, &scope],
            )
            .await?
        else {
            return Ok(None);
        };
        let key = DataKey::from_stored(row.get("key_id"), row.get("key"))?;
        let text = key.open(settings_place(tenant, &scope), row.get("document"))?;
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|err| PostgresError::Corrupted {
                what: "settings",
                detail: err.to_string(),
            })
    }

    /// Saves (or, with `None`, removes) the settings document of a tenant or of one of its
    /// agents. Saving replaces the whole document.
    pub async fn put_settings(
        &self,
        tenant: &str,
        agent_id: Option<&str>,
        settings: Option<Metadata>,
    ) -> Result<()> {
        let scope = settings_scope(tenant, agent_id)?;
        let mut client = self.connection().await?;
        let Some(document) = settings else {
            client
                .execute(
                    "DELETE FROM settings WHERE tenant = $1 AND scope = $2",
                    &[&tenant, &scope],
                )
                .await?;
            return Ok(());
        };
        let text = serde_json::to_vec(&document).map_err(|err| StoreError::InvalidInput {
            field: "settings",
            reason: err.to_string(),
        })?;
        let txn = client.transaction().await?;
        let key = tenant_key(&txn, tenant).await?;
        let sealed = key.seal(settings_place(tenant, &scope), &text)?;
        txn.execute(
            "INSERT INTO settings (tenant, scope, key_id, document) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, scope)
             DO UPDATE SET key_id = EXCLUDED.key_id, document = EXCLUDED.document",
            &[&tenant, &scope, &key.id, &sealed],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// How many sessions a tenant has, of every user, and which was active least recently
    /// (the smallest last activity, then the bytewise smallest id, as the redb store orders
    /// them). One statement; the count reads the tenant's entries of `sessions_by_activity`.
    pub async fn conversation_stats(&self, tenant: &str) -> Result<ConversationStats> {
        validate_id("tenant", tenant)?;
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM sessions WHERE tenant = $1) AS total,
                        oldest.session_id, oldest.updated_at
                 FROM (SELECT 1) AS one
                 LEFT JOIN LATERAL (
                     SELECT session_id, updated_at FROM sessions WHERE tenant = $1
                     ORDER BY updated_at, session_id COLLATE \"C\"
                     LIMIT 1
                 ) AS oldest ON true",
                &[&tenant],
            )
            .await?;
        let oldest = row
            .get::<_, Option<String>>("session_id")
            .map(|id| -> Result<_> {
                let at = unsigned(row.get("updated_at"))?;
                Ok((id, Timestamp::from_micros(at)))
            })
            .transpose()?;
        Ok(ConversationStats {
            total: unsigned(row.get("total"))?,
            oldest,
        })
    }

    /// Sets (or with `None` removes) a tenant's conversation retention in days. Changing a
    /// rule keeps when it last ran; a rule set again after its removal starts over.
    pub async fn set_retention(&self, tenant: &str, days: Option<u32>) -> Result<()> {
        validate_id("tenant", tenant)?;
        let client = self.connection().await?;
        match days {
            Some(days) => {
                client
                    .execute(
                        "INSERT INTO retention (tenant, days) VALUES ($1, $2)
                         ON CONFLICT (tenant) DO UPDATE SET days = EXCLUDED.days",
                        &[&tenant, &i64::from(days)],
                    )
                    .await?
            }
            None => {
                client
                    .execute("DELETE FROM retention WHERE tenant = $1", &[&tenant])
                    .await?
            }
        };
        Ok(())
    }

    /// Every tenant's retention: `(tenant, days, last run)`, by tenant (bytewise), time 0 for
    /// a rule that never ran. As in the redb store, not paged: one row per tenant with a rule.
    pub async fn retention_rules(&self) -> Result<Vec<(String, u32, Timestamp)>> {
        let client = self.connection().await?;
        client
            .query(
                "SELECT tenant, days, last_run FROM retention ORDER BY tenant COLLATE \"C\"",
                &[],
            )
            .await?
            .iter()
            .map(|row| {
                let days: i64 = row.get("days");
                let days = u32::try_from(days).map_err(|_| PostgresError::Corrupted {
                    what: "retention rule",
                    detail: format!("{days} days"),
                })?;
                let last_run = unsigned(row.get("last_run"))?;
                Ok((row.get("tenant"), days, Timestamp::from_micros(last_run)))
            })
            .collect()
    }

    /// Records that a tenant's retention rule runs at `at`, only while its last run is still
    /// `last_run`: true for the one caller (of every node) that claimed this run; false for a
    /// tenant without a rule.
    pub async fn claim_retention(
        &self,
        tenant: &str,
        last_run: Timestamp,
        at: Timestamp,
    ) -> Result<bool> {
        validate_id("tenant", tenant)?;
        let (last_run, at) = (micros(last_run)?, micros(at)?);
        let client = self.connection().await?;
        // One statement: of nodes claiming at once, the row lock orders them, and the later
        // ones find `last_run` changed.
        let claimed = client
            .execute(
                "UPDATE retention SET last_run = $3 WHERE tenant = $1 AND last_run = $2",
                &[&tenant, &last_run, &at],
            )
            .await?;
        Ok(claimed == 1)
    }
}
