//! Route handlers, one module per resource, and the route table that registers them.

pub(crate) mod backup;
pub(crate) mod context;
pub(crate) mod episodes;
pub(crate) mod erasure;
pub(crate) mod health;
pub(crate) mod keys;
pub(crate) mod mcp;
pub(crate) mod memories;
pub(crate) mod openai;
pub(crate) mod operations;
pub(crate) mod recall;
pub(crate) mod runs;
pub(crate) mod sessions;
pub(crate) mod settings;
pub(crate) mod tools;

use memlayer_store::Store;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use crate::{ApiError, AppState};

/// Every route, the one place a route is registered. Each entry is one path's handlers,
/// gathered by `utoipa_axum::routes!` from their `#[utoipa::path]` annotations: the method
/// and path a handler is routed at and those it is documented at come from the same
/// attribute, so [`crate::router`] (which builds the router from this table) and
/// [`crate::openapi`] (which builds the document from it) cannot disagree, and a handler
/// without an annotation does not compile here. Each annotation also names the handler's
/// error answers, declared beside it with `errors!` (see `openapi::responses`). One entry
/// holds the handlers of one path and only those: `routes!` routes every handler of an entry
/// at every path of the entry.
pub(crate) const ROUTES: &[Route] = &[
    Route::api(|| routes!(sessions::list_sessions, sessions::create_session)),
    Route::api(|| routes!(sessions::get_session, sessions::delete_session)),
    Route::api(|| routes!(sessions::list_messages, sessions::append_messages)),
    Route::api(|| routes!(sessions::list_runs, sessions::record_run)),
    Route::api(|| routes!(sessions::clear_session)),
    Route::api(|| routes!(sessions::search_session)),
    Route::api(|| routes!(context::context)),
    Route::api(|| routes!(context::entities)),
    Route::api(|| routes!(recall::recall)),
    Route::api(|| routes!(tools::tools)),
    Route::api(|| routes!(tools::call)),
    Route::api(|| routes!(runs::run)),
    Route::api(|| routes!(openai::chat_completions)),
    Route::api(|| routes!(mcp::mcp)),
    Route::api(|| routes!(memories::remember, memories::list)),
    Route::api(|| routes!(memories::search)),
    Route::api(|| routes!(memories::end_session)),
    Route::api(|| routes!(memories::session_memory)),
    Route::api(|| routes!(memories::get, memories::forget)),
    Route::api(|| routes!(memories::put, memories::get_by_key)),
    Route::api(|| routes!(episodes::record, episodes::list)),
    Route::api(|| routes!(episodes::get, episodes::delete)),
    Route::api(|| routes!(episodes::lessons)),
    Route::api(|| routes!(erasure::erase_message)),
    Route::api(|| routes!(erasure::erase_user)),
    Route::api(|| routes!(erasure::stats)),
    Route::api(|| routes!(erasure::purge)),
    Route::api(|| routes!(erasure::receipts)),
    Route::api(|| routes!(erasure::erasure)),
    Route::api(|| routes!(erasure::retention, erasure::set_retention)),
    Route::api(|| routes!(backup::backup)),
    Route::api(|| routes!(keys::list_keys, keys::create_key)),
    Route::api(|| routes!(keys::revoke_key)),
    Route::api(|| {
        routes!(
            settings::tenant_settings,
            settings::put_tenant_settings,
            settings::delete_tenant_settings
        )
    }),
    Route::api(|| {
        routes!(
            settings::agent_settings,
            settings::put_agent_settings,
            settings::delete_agent_settings
        )
    }),
    Route::api(|| routes!(settings::memory_config, settings::put_memory_config)),
    Route::operations(|| routes!(health::live)),
    Route::operations(|| routes!(health::ready)),
    Route::operations(|| routes!(operations::metrics)),
    Route::operations(|| routes!(operations::openapi_json)),
    Route::operations(|| routes!(operations::docs)),
    Route::operations(|| routes!(operations::admin)),
];

/// One path of the route table.
pub(crate) struct Route {
    /// The path's handlers with their documentation.
    pub(crate) handlers: fn() -> UtoipaMethodRouter<AppState>,
    /// Whether the route counts against `max_in_flight` (see [`crate::ServerConfig`]).
    pub(crate) shed: bool,
}

impl Route {
    /// A route of the API proper, shed under overload.
    const fn api(handlers: fn() -> UtoipaMethodRouter<AppState>) -> Self {
        Self {
            handlers,
            shed: true,
        }
    }

    /// A probe, the metrics, the documentation or the admin page: cheap, and never shed, so
    /// that an overloaded server can still be watched (the admin page's own `/v1` calls are
    /// shed like any other).
    const fn operations(handlers: fn() -> UtoipaMethodRouter<AppState>) -> Self {
        Self {
            handlers,
            shed: false,
        }
    }
}

/// The routes of the table that `keep` selects, their documentation added to `doc`.
pub(crate) fn table_router(
    doc: utoipa::openapi::OpenApi,
    keep: impl Fn(&Route) -> bool,
) -> OpenApiRouter<AppState> {
    ROUTES
        .iter()
        .filter(|route| keep(route))
        .fold(OpenApiRouter::with_openapi(doc), |router, route| {
            router.routes((route.handlers)())
        })
}

/// Answer for paths no route matches.
pub(crate) async fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "route_not_found",
        message: "no such route; the API lives under /v1".into(),
    }
}

/// Answer for a known path with the wrong method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Runs a store read on the blocking pool: reads are short but may touch the disk, and the
/// async workers must stay free for accepting and parsing requests.
pub(crate) async fn read<T, F>(state: &AppState, read: F) -> Result<T, ApiError>
where
    F: FnOnce(&Store) -> memlayer_store::Result<T> + Send + 'static,
    T: Send + 'static,
{
    Ok(state.store().read(read).await?)
}
