//! The OpenAPI 3.1 document of the API, generated from the code: each handler's
//! `#[utoipa::path]` annotation and the wire types' `ToSchema` derives, collected through the
//! route table (`api::ROUTES`) that also builds the router, so a route cannot be served
//! without being documented. This module adds what is common to every operation (the error
//! shape, the API key and the tenant header) and describes the JSON of types that live in other crates.

mod links;
mod requests;
pub(crate) mod responses;

use std::sync::LazyLock;

use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Required, ResponseBuilder, schema};
use utoipa::{Modify, OpenApi as _};

use crate::error::ErrorBody;
use crate::extract::TENANT_HEADER;

/// The document's fixed parts; the paths come from the route table.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "memlayer",
        description = "A self-hosted memory layer for LLM agents: durable sessions, context \
            assembly inside a token budget, hybrid recall. Every `/v1` route needs an API key \
            (`Authorization: Bearer <key>`), which decides the tenant and the role: \
            `tenant_admin`, `service` or `user` (one end user's sessions only). Every error \
            answers `{\"error\": {\"code\": \"...\", \"message\": \"...\"}}`; \
            each operation lists its error answers by status, with the `code`s each can \
            carry (`500` `internal` under `5XX`). Not listed: `405` `method_not_allowed`, \
            for a method a path does not serve, and `404` `route_not_found`, for a path no \
            route serves.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    components(schemas(ErrorBody)),
    tags(
        (name = "sessions", description = "Sessions and their owners"),
        (name = "messages", description = "A session's messages: appends, pages, search, clear"),
        (name = "runs", description = "Agent runs recorded in a session"),
        (name = "openai", description = "OpenAI-compatible chat completions with memory"),
        (name = "context", description = "The context for the next model call, and entity memory"),
        (name = "recall", description = "Hybrid (keyword + vector) search over messages"),
        (name = "settings", description = "Saved context settings of a tenant and its agents"),
        (name = "keys", description = "API keys of a tenant (tenant_admin keys only)"),
        (name = "operations", description = "Probes, metrics and this documentation"),
    ),
)]
struct ApiDoc;

/// The OpenAPI document of every route [`crate::router`] serves.
pub fn openapi() -> OpenApi {
    let mut doc = crate::api::table_router(ApiDoc::openapi(), |_| true).into_openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    Common.modify(&mut doc);
    Identifiers.modify(&mut doc);
    doc
}

/// The document as served at `/openapi.json`, built once: [`openapi`] with its request
/// schemas made exact (see `requests`), its error answers' headers required (see
/// `responses`) and its links (see `links`).
pub(crate) static OPENAPI_JSON: LazyLock<String> = LazyLock::new(|| {
    let mut doc = serde_json::to_value(openapi()).expect("the OpenAPI document serialises");
    requests::make_exact(&mut doc);
    responses::require_headers(&mut doc);
    links::add(&mut doc);
    serde_json::to_string_pretty(&doc).expect("the OpenAPI document serialises")
});

/// The security scheme every `/v1` operation requires.
pub(crate) const BEARER_AUTH: &str = "bearerAuth";

/// What every operation shares: errors in the API's shape, and the API key and the tenant
/// header on the `/v1` routes.
struct Common;

impl Modify for Common {
    fn modify(&self, doc: &mut OpenApi) {
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    Content::new(Some(Ref::from_schema_name("ErrorBody"))),
                )
                .build()
        };
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                BEARER_AUTH,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .bearer_format("mlk_<prefix>_<secret>")
                        .description(Some(
                            "An API key: created with `POST /v1/keys` or `memlayer keys create`, \
                             or the admin key configured or printed at the first start. It \
                             decides the tenant and the role (`tenant_admin`, `service`, \
                             `user`; or `operator`, of no tenant, for the backup only). \
                             Missing, malformed, unknown, revoked or expired keys answer \
                             `401`; a role that may not use a route answers `403` (each \
                             operation's security requirement lists the roles that may); an \
                             object of another tenant or user answers `404`.",
                        ))
                        .build(),
                ),
            );
        for (path, item) in doc.paths.paths.iter_mut() {
            let scoped = path.starts_with("/v1/");
            for operation in operations(item) {
                add_errors(operation, &error);
                // The key each role needs is in the operation's own `security` (its roles,
                // as OpenAPI 3.1 allows for schemes other than OAuth).
                if scoped {
                    add_tenant(operation);
                }
            }
        }
    }
}

/// The operations of a path, one per method the API serves.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
    ]
    .into_iter()
    .flatten()
}

/// The one error answer an operation does not list by status and code (see `responses`):
/// `500`, whose details go to the server log only.
fn add_errors(operation: &mut Operation, error: &dyn Fn(&str) -> utoipa::openapi::Response) {
    operation
        .responses
        .responses
        .entry("5XX".into())
        .or_insert_with(|| {
            error("`500` `internal`: a failure the client cannot fix (details in the server log)")
                .into()
        });
}

fn add_tenant(operation: &mut Operation) {
    let tenant = ParameterBuilder::new()
        .name(TENANT_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "The tenant (project) the request acts for. The API key decides it; when sent, \
             the header must name the key's tenant (another answers `404`)",
        ))
        .schema(Some(
            schema::ObjectBuilder::new().schema_type(schema::Type::String),
        ))
        .build();
    operation
        .parameters
        .get_or_insert_with(Vec::new)
        .insert(0, tenant);
}

/// The names under which requests carry identifiers the server checks with
/// `memlayer_store::validate_id`, as parameters (path, query, header) and body fields.
pub(crate) const IDENTIFIERS: [&str; 16] = [
    TENANT_HEADER,
    crate::api::openai::SESSION_HEADER,
    crate::api::openai::USER_HEADER,
    crate::api::openai::AGENT_HEADER,
    "Idempotency-Key",
    "idempotency_key",
    "tenant",
    "project_id",
    "session_id",
    "source_session_id",
    "user_id",
    "agent_id",
    "flow_id",
    "run_id",
    "task_type",
    "key",
];

/// What `memlayer_store::validate_id` accepts: 1 to `MAX_ID_LEN` characters of
/// `A-Z a-z 0-9 . _ - : @ +`, not `.` or `..` (the second alternative: dots only, three or
/// more). Written without look-ahead so that generators of test data can read it.
pub(crate) const ID_PATTERN: &str =
    r"^(?:[A-Za-z0-9._:@+-]*[A-Za-z0-9_:@+-][A-Za-z0-9._:@+-]*|\.{3,})$";

/// Gives every identifier parameter and body field the rule the server enforces, so the
/// document says what a request may hold rather than "a string" (and a generated client or
/// schemathesis does not send an empty tenant header the server must refuse). Integers
/// (memory, episode and erasure ids) are left as they are.
struct Identifiers;

impl Modify for Identifiers {
    fn modify(&self, doc: &mut OpenApi) {
        for item in doc.paths.paths.values_mut() {
            for operation in operations(item) {
                for parameter in operation.parameters.iter_mut().flatten() {
                    if IDENTIFIERS.contains(&parameter.name.as_str())
                        && let Some(schema) = parameter.schema.as_mut()
                    {
                        constrain_identifier(schema);
                    }
                }
            }
        }
        let schemas = doc
            .components
            .iter_mut()
            .flat_map(|components| components.schemas.values_mut());
        for schema in schemas {
            if let RefOr::T(Schema::Object(object)) = schema {
                for (name, property) in object.properties.iter_mut() {
                    if IDENTIFIERS.contains(&name.as_str()) {
                        constrain_identifier(property);
                    }
                }
            }
        }
    }
}

/// Adds the identifier rule to a string (or nullable string) schema; leaves others alone.
fn constrain_identifier(schema: &mut RefOr<Schema>) {
    let RefOr::T(Schema::Object(object)) = schema else {
        return;
    };
    let string = match &object.schema_type {
        schema::SchemaType::Type(kind) => *kind == schema::Type::String,
        schema::SchemaType::Array(kinds) => {
            kinds.contains(&schema::Type::String)
                && kinds
                    .iter()
                    .all(|kind| matches!(kind, schema::Type::String | schema::Type::Null))
        }
        schema::SchemaType::AnyValue => false,
    };
    if string {
        object.min_length = Some(1);
        object.max_length = Some(memlayer_store::MAX_ID_LEN);
        object.pattern = Some(ID_PATTERN.to_owned());
    }
}

/// JSON shapes of types owned by other crates (`memlayer-store`, `memlayer-memory`), which
/// cannot derive `ToSchema` there without a utoipa dependency. Each mirrors the serde
/// encoding of its original; `tests::mirrored_enums_match_the_real_types` and the
/// end-to-end test that validates real answers against the document catch drift.
#[allow(dead_code)] // Never built: these types only describe JSON.
pub(crate) mod foreign {
    use std::collections::BTreeMap;

    use serde::Serialize;
    use utoipa::openapi::schema::{
        AdditionalProperties, ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type,
    };
    use utoipa::openapi::{RefOr, schema};
    use utoipa::{PartialSchema, ToSchema};

    /// Free-form JSON attached to a session, message or run (citations, thought process, …).
    pub(crate) struct Metadata;

    impl PartialSchema for Metadata {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .additional_properties(Some(AdditionalProperties::FreeForm(true)))
                .description(Some(
                    "Free-form JSON object attached to a session, message or run",
                ))
                .into()
        }
    }

    impl ToSchema for Metadata {}

    /// Who produced a message (`memlayer_store::Role`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub(crate) enum Role {
        System,
        User,
        Assistant,
        Tool,
    }

    /// `incomplete_turn` when the last message is a user message with no answer after it
    /// (`memlayer_store::SessionState`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum SessionState {
        Active,
        IncompleteTurn,
    }

    /// What kind of thing a long-term memory is (`memlayer_store::MemoryKind`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum MemoryKind {
        Fact,
        Preference,
        Relationship,
        Instruction,
    }

    /// How an episode's task went (`memlayer_store::Outcome`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum Outcome {
        Success,
        Failure,
        Partial,
    }

    /// Outcome of an agent run (`memlayer_store::RunStatus`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
    pub(crate) enum RunStatus {
        Running,
        Completed,
        Failed,
        Cancelled,
    }

    /// How the window of recent history is chosen (`memlayer_memory::Strategy`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum Strategy {
        FullHistory,
        SlidingWindow,
        HistoryDepth,
        Combined,
    }

    /// What happens to history over the budget (`memlayer_memory::Overflow`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum Overflow {
        Drop,
        Summarize,
    }

    /// Where recall looks for older messages (`memlayer_memory::RecallScope`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum RecallScope {
        Session,
        User,
    }

    /// How the context is rendered (`memlayer_memory::OutputFormat`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum OutputFormat {
        Openai,
        Anthropic,
        Text,
    }

    /// The memory layer a piece of context comes from (`memlayer_memory::Layer`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum Layer {
        Instructions,
        Facts,
        Memories,
        Lessons,
        SessionMemory,
        Summary,
        Retrieved,
        EarlierQuestions,
        Window,
    }

    /// Why a piece of history is not in the context (`memlayer_memory::DropReason`).
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(crate) enum DropReason {
        OutsideWindow,
        OverBudget,
    }

    /// Everything that shapes a context (`memlayer_memory::ContextSettings`).
    #[derive(ToSchema)]
    pub(crate) struct ContextSettings {
        strategy: Strategy,
        /// The model's context window in tokens.
        #[schema(default = 8192, minimum = 256, maximum = 10_000_000)]
        context_window: u32,
        /// Fraction of the context window kept free for the prompt and the answer.
        #[schema(default = 0.1, minimum = 0.0, exclusive_maximum = 0.9)]
        window_reserve: f64,
        /// Exchanges a sliding window (and `combined`) keeps. Unset (`null`, the default), the
        /// window adapts: 10 exchanges, or 4 when a `combined` context recalls (a `query` is
        /// given and `recall_k` is above 0), since recall and entity memory bring back what
        /// the window leaves out. The context's `settings` report the value used.
        #[schema(minimum = 1, maximum = 1000)]
        max_turns: Option<usize>,
        /// A sliding window by tokens instead of turns, when set.
        #[schema(minimum = 1)]
        window_tokens: Option<u32>,
        /// Exchanges `history_depth` keeps in full; older ones become stubs.
        #[schema(default = 20, minimum = 1, maximum = 100)]
        session_history_depth: usize,
        overflow: Overflow,
        /// Older messages `combined` recalls for the query.
        #[schema(default = 4, maximum = 50)]
        recall_k: usize,
        recall_scope: RecallScope,
        /// Long-term memories a combined context pre-loads for the query.
        #[schema(default = 50, maximum = 200)]
        max_memories: usize,
        /// Most tokens the long-term memories may take.
        #[schema(default = 1000)]
        memory_tokens: u32,
        /// Whether `combined` pre-loads long-term memories.
        #[schema(default = true)]
        long_term_memory: bool,
        /// Whether `combined` loads the session memory of earlier conversations.
        #[schema(default = true)]
        session_memory: bool,
        /// Whether `combined` shows lessons from the user's episodes.
        #[schema(default = true)]
        lessons: bool,
        /// The kind of task the next turn is about: its recent lessons join the standing ones.
        task_type: Option<String>,
        /// Most recent lessons of the task type a context shows.
        #[schema(default = 5, maximum = 50)]
        max_lessons: usize,
        /// Most tokens the lessons may take.
        #[schema(default = 500)]
        lesson_tokens: u32,
        /// Replace e-mail addresses, phone numbers, card numbers, SSNs and IBANs in summaries
        /// (and in what a summarising model is sent) with placeholders.
        #[schema(default = true)]
        redact_pii: bool,
    }

    /// A partial settings document: any keys of `ContextSettings`, laid over the levels
    /// below it (`memlayer_memory::SettingsOverrides`).
    pub(crate) struct SettingsDocument;

    impl PartialSchema for SettingsDocument {
        fn schema() -> RefOr<Schema> {
            // `ContextSettings` with every key optional.
            let mut partial = match ContextSettings::schema() {
                RefOr::T(Schema::Object(object)) => object,
                _ => unreachable!("ContextSettings derives an object schema"),
            };
            partial.required.clear();
            partial.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
            partial.description = Some(
                "A partial settings document: any keys of ContextSettings; the rest come \
                 from the levels below"
                    .into(),
            );
            Schema::Object(partial).into()
        }
    }

    impl ToSchema for SettingsDocument {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            <ContextSettings as ToSchema>::schemas(schemas);
        }
    }

    /// One memory type of a memory configuration document (`memlayer_memory::MemoryType`).
    #[derive(ToSchema)]
    pub(crate) struct MemoryType {
        /// `working_memory`, `long_term` or `episodic`.
        #[schema(example = "long_term")]
        id: String,
        /// Whether its layer is in the context; `working_memory` cannot be turned off.
        enabled: Option<bool>,
        /// Its settings. `working_memory`: `max_tokens` (the context window),
        /// `compaction_strategy` (`summarize` or `drop`); `long_term`: `max_memories`,
        /// `max_tokens`; `episodic`: `max_lessons`, `max_tokens`, `task_type`.
        #[schema(value_type = Option<Object>)]
        config: (),
    }

    /// An agent's memory configuration: a view of its context settings
    /// (`memlayer_memory::MemoryConfig`). Every key is optional in a request.
    #[derive(ToSchema)]
    pub(crate) struct MemoryConfig {
        /// Whether the summary of the user's earlier conversations with the agent is loaded.
        session_memory: Option<bool>,
        types: Option<Vec<MemoryType>>,
    }

    /// A chat message of the OpenAI or Anthropic shape (`memlayer_memory::ChatMessage`).
    #[derive(ToSchema)]
    pub(crate) struct ChatMessage {
        /// `system`, `user`, `assistant` or `tool` (OpenAI); `user` or `assistant` (Anthropic).
        role: String,
        content: String,
    }

    /// The context in the requested format (`memlayer_memory::Rendered`): `messages` for
    /// `openai`; `system` and alternating `messages` for `anthropic`; `text` for `text`.
    pub(crate) struct Rendered;

    impl PartialSchema for Rendered {
        fn schema() -> RefOr<Schema> {
            let messages = || {
                ArrayBuilder::new().items(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ChatMessage",
                )))
            };
            let string = || ObjectBuilder::new().schema_type(Type::String);
            // `anyOf`, not `oneOf`: an Anthropic body also has an OpenAI body's `messages`.
            schema::AnyOfBuilder::new()
                .item(
                    ObjectBuilder::new()
                        .title(Some("openai"))
                        .property("messages", messages())
                        .required("messages"),
                )
                .item(
                    ObjectBuilder::new()
                        .title(Some("anthropic"))
                        .property("system", string())
                        .property("messages", messages())
                        .required("system")
                        .required("messages"),
                )
                .item(
                    ObjectBuilder::new()
                        .title(Some("text"))
                        .property("text", string())
                        .required("text"),
                )
                .description(Some(
                    "The context in the requested format: `messages` for `openai`; `system` \
                     and alternating `messages` for `anthropic`; `text` for `text`",
                ))
                .into()
        }
    }

    impl ToSchema for Rendered {
        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            schemas.push(("ChatMessage".into(), ChatMessage::schema()));
        }
    }

    /// Tokens spent on one layer (`memlayer_memory::LayerTokens`).
    #[derive(ToSchema)]
    pub(crate) struct LayerTokens {
        layer: Layer,
        pieces: usize,
        tokens: u32,
    }

    /// A piece left out, with the stored messages it stands for (`memlayer_memory::Dropped`).
    #[derive(ToSchema)]
    pub(crate) struct Dropped {
        layer: Layer,
        sources: Vec<u64>,
        tokens: u32,
        reason: DropReason,
    }

    /// A recalled message in the context (`memlayer_memory::RecalledRef`).
    #[derive(ToSchema)]
    pub(crate) struct RecalledRef {
        session_id: String,
        index: u64,
        score: f32,
    }

    /// What an assembly did and why (`memlayer_memory::Report`).
    #[derive(ToSchema)]
    pub(crate) struct Report {
        strategy: Strategy,
        /// Tokens the context could use.
        budget: u32,
        /// Tokens it uses (a recount of the output).
        total_tokens: u32,
        /// Per layer, in prompt order.
        layers: Vec<LayerTokens>,
        /// Indices of the stored messages in the window, in order.
        window: Vec<u64>,
        dropped: Vec<Dropped>,
        /// `[first, last]`: the message range the summary covers, when one was used.
        #[schema(value_type = Option<Vec<u64>>, min_items = 2, max_items = 2)]
        summary: Option<(u64, u64)>,
        /// Facts rendered.
        facts: usize,
        recalled: Vec<RecalledRef>,
        /// Ids of the long-term memories included.
        memories: Vec<u64>,
        /// Ids of the episodes whose lessons are included.
        lessons: Vec<u64>,
    }

    /// How the summary of a context came about (`memlayer_memory::SummaryNote`).
    #[derive(ToSchema)]
    pub(crate) struct SummaryNote {
        /// Whether this request wrote a new summary.
        written: bool,
        /// Which summariser wrote the summary in use.
        summarizer: String,
        /// Why the configured summariser was not used, when it failed.
        fallback_reason: Option<String>,
    }

    /// A value a correction replaced: `[value, source message index]`.
    pub(crate) struct Superseded;

    impl PartialSchema for Superseded {
        fn schema() -> RefOr<Schema> {
            ArrayBuilder::new()
                .schema_type(SchemaType::from(Type::Array))
                .prefix_items([
                    Schema::from(ObjectBuilder::new().schema_type(Type::String)),
                    Schema::from(
                        ObjectBuilder::new()
                            .schema_type(Type::Integer)
                            .minimum(Some(0)),
                    ),
                ])
                .items(schema::ArrayItems::False)
                .min_items(Some(2))
                .description(Some("`[value, source message index]`"))
                .into()
        }
    }

    impl ToSchema for Superseded {}

    /// The value of one fact key in force, where it came from and what it replaced
    /// (`memlayer_memory::FactEntry`).
    #[derive(ToSchema)]
    pub(crate) struct FactEntry {
        value: String,
        /// The message it came from.
        source: u64,
        /// Whether that message was an explicit correction.
        correction: bool,
        /// Superseded values, oldest first.
        history: Vec<Superseded>,
    }

    /// Facts by key (`name`, `email`, …) (`memlayer_memory::FactSheet`).
    #[derive(ToSchema)]
    pub(crate) struct FactSheet(BTreeMap<String, FactEntry>);
}
