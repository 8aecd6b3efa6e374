//! Saved context settings: the defaults of a tenant (`/v1/settings`) and of one of its agents
//! (`/v1/agents/{agent_id}/settings`). Each is a partial document of the context settings'
//! keys, laid over the built-in defaults (and an agent's over its tenant's); a request may
//! override them again. A change applies from the next context on and never rewrites turns.
//! An agent's memory configuration (`/v1/agents/{agent_id}/memory-config`) is another view of
//! the same settings (`memlayer_memory::MemoryConfig`).

use axum::Json;
use axum::extract::State;
use memlayer_memory::{ContextSettings, MemoryConfig, SettingsOverrides};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::read;
use crate::extract::{Admin, ApiJson, ApiPath, Tenant};
use crate::openapi::foreign;
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// The settings saved at one level and what they lead to.
#[derive(Serialize, ToSchema)]
pub(crate) struct SettingsResponse {
    /// The keys saved at this level.
    #[schema(value_type = crate::openapi::foreign::SettingsDocument)]
    saved: SettingsOverrides,
    /// What a context gets with no request overrides: defaults, then the tenant's, then
    /// (for an agent) the agent's.
    #[schema(value_type = crate::openapi::foreign::ContextSettings)]
    effective: ContextSettings,
}

errors!(TenantSettingsErrors = [KEYED]);

/// Get the tenant's settings
#[utoipa::path(
    get,
    path = "/v1/settings",
    tag = "settings",
    responses((status = 200, description = "The saved document and the effective settings", body = SettingsResponse), TenantSettingsErrors),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn tenant_settings(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> Result<Json<SettingsResponse>, ApiError> {
    describe(&state, tenant, None).await.map(Json)
}

errors!(PutTenantSettingsErrors = [KEYED, JSON_BODY, WRITES, SETTING]);

/// Save the tenant's settings
///
/// Replaces the saved document; it must lead to valid settings.
#[utoipa::path(
    put,
    path = "/v1/settings",
    tag = "settings",
    request_body = crate::openapi::foreign::SettingsDocument,
    responses((status = 200, description = "Saved", body = SettingsResponse), PutTenantSettingsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn put_tenant_settings(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiJson(document): ApiJson<SettingsOverrides>,
) -> Result<Json<SettingsResponse>, ApiError> {
    save(&state, tenant, None, Some(document)).await.map(Json)
}

errors!(DeleteTenantSettingsErrors = [KEYED, WRITES]);

/// Remove the tenant's settings
#[utoipa::path(
    delete,
    path = "/v1/settings",
    tag = "settings",
    responses((status = 200, description = "Removed: the defaults apply", body = SettingsResponse), DeleteTenantSettingsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn delete_tenant_settings(
    State(state): State<AppState>,
    Admin(tenant): Admin,
) -> Result<Json<SettingsResponse>, ApiError> {
    save(&state, tenant, None, None).await.map(Json)
}

errors!(AgentSettingsErrors = [KEYED, PATH]);

/// Get an agent's settings
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/settings",
    tag = "settings",
    params(("agent_id" = String, Path, description = "The agent's id")),
    responses((status = 200, description = "The saved document and the effective settings", body = SettingsResponse), AgentSettingsErrors),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn agent_settings(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<SettingsResponse>, ApiError> {
    describe(&state, tenant, Some(agent_id)).await.map(Json)
}

errors!(PutAgentSettingsErrors = [KEYED, PATH, JSON_BODY, WRITES, SETTING]);

/// Save an agent's settings
///
/// Replaces the agent's saved document, laid over the tenant's; the result must be valid.
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}/settings",
    tag = "settings",
    params(("agent_id" = String, Path, description = "The agent's id")),
    request_body = crate::openapi::foreign::SettingsDocument,
    responses((status = 200, description = "Saved", body = SettingsResponse), PutAgentSettingsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn put_agent_settings(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(document): ApiJson<SettingsOverrides>,
) -> Result<Json<SettingsResponse>, ApiError> {
    save(&state, tenant, Some(agent_id), Some(document))
        .await
        .map(Json)
}

errors!(DeleteAgentSettingsErrors = [KEYED, PATH, WRITES]);

/// Remove an agent's settings
#[utoipa::path(
    delete,
    path = "/v1/agents/{agent_id}/settings",
    tag = "settings",
    params(("agent_id" = String, Path, description = "The agent's id")),
    responses((status = 200, description = "Removed: the tenant's settings apply", body = SettingsResponse), DeleteAgentSettingsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn delete_agent_settings(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<SettingsResponse>, ApiError> {
    save(&state, tenant, Some(agent_id), None).await.map(Json)
}

errors!(MemoryConfigErrors = [KEYED, PATH]);

/// An agent's memory configuration
///
/// The agent's effective settings (defaults, the tenant's, the agent's) as a memory
/// configuration document: `session_memory` and one entry per memory type
/// (`working_memory`, `long_term`, `episodic`).
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/memory-config",
    tag = "settings",
    params(("agent_id" = String, Path, description = "The agent's id")),
    responses((status = 200, description = "The document in force", body = foreign::MemoryConfig), MemoryConfigErrors),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn memory_config(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<Json<MemoryConfig>, ApiError> {
    let described = describe(&state, tenant, Some(agent_id)).await?;
    Ok(Json(MemoryConfig::from_settings(&described.effective)))
}

errors!(
    PutMemoryConfigErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        WRITES,
        SETTING,
        &[
            fails(
                422,
                "invalid_memory_config",
                "The document is not a memory configuration (the message says why)"
            ),
            fails(
                422,
                "unknown_memory_type",
                "A memory type the server does not know"
            )
        ]
    ]
);

/// Save an agent's memory configuration
///
/// Sets the agent's settings keys the document maps onto (`working_memory.config.max_tokens`
/// → `context_window`, `compaction_strategy` → `overflow`, `long_term.enabled` →
/// `long_term_memory`, `long_term.config.max_memories` → `max_memories`, `episodic.enabled` →
/// `lessons`, …); the agent's other saved keys, and types the document leaves out, stay. It
/// applies from the next context on. An unknown type is `422 unknown_memory_type`, any other
/// mistake `422 invalid_memory_config`, with the field's path in the message.
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}/memory-config",
    tag = "settings",
    params(("agent_id" = String, Path, description = "The agent's id")),
    request_body = foreign::MemoryConfig,
    responses((status = 200, description = "Saved: the document now in force", body = foreign::MemoryConfig), PutMemoryConfigErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn put_memory_config(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(document): ApiJson<serde_json::Value>,
) -> Result<Json<MemoryConfig>, ApiError> {
    let overrides = MemoryConfig::to_overrides(&document)?;
    let (owner, agent) = (tenant.clone(), agent_id.clone());
    let mut saved = read(&state, move |store| {
        store.tenants().settings(&owner, Some(&agent))
    })
    .await?
    .unwrap_or_default();
    saved.extend(overrides);
    let described = save(&state, tenant, Some(agent_id), Some(saved)).await?;
    Ok(Json(MemoryConfig::from_settings(&described.effective)))
}

/// Saves `document` at one level (removes it when `None`) after checking that the settings
/// it leads to are valid, so a bad document never reaches a later context request.
async fn save(
    state: &AppState,
    tenant: String,
    agent_id: Option<String>,
    mut document: Option<SettingsOverrides>,
) -> Result<SettingsResponse, ApiError> {
    if let Some(document) = &mut document {
        // Saved as the integers they are (`475.0` is `475`), so they read back as integers.
        for value in document.values_mut() {
            memlayer_memory::whole_floats_to_integers(value);
        }
        let (tenant, agent) = (tenant.clone(), agent_id.clone());
        let levels = read(state, move |store| levels(store, &tenant, agent.as_deref())).await?;
        let mut above = levels;
        above.pop();
        ContextSettings::layered(above.iter().flatten().chain([&*document]))?;
    }
    state
        .store()
        .tenants()
        .put_settings(&tenant, agent_id.as_deref(), document)
        .await?;
    describe(state, tenant, agent_id).await
}

async fn describe(
    state: &AppState,
    tenant: String,
    agent_id: Option<String>,
) -> Result<SettingsResponse, ApiError> {
    let levels = read(state, move |store| {
        levels(store, &tenant, agent_id.as_deref())
    })
    .await?;
    let effective = ContextSettings::layered(levels.iter().flatten())?;
    let saved = levels.into_iter().last().flatten().unwrap_or_default();
    Ok(SettingsResponse { saved, effective })
}

/// The saved documents from the tenant down to the level asked for (the last one).
pub(crate) fn levels(
    store: &memlayer_store::Store,
    tenant: &str,
    agent_id: Option<&str>,
) -> memlayer_store::Result<Vec<Option<SettingsOverrides>>> {
    let mut levels = vec![store.tenants().settings(tenant, None)?];
    if let Some(agent) = agent_id {
        levels.push(store.tenants().settings(tenant, Some(agent))?);
    }
    Ok(levels)
}
