//! Sessions and their messages, with the semantics of `memlayer_store::Sessions`: the same
//! validation, the same ownership rule (another user's session is not found), the same
//! answers for a taken id, a creating append, an idempotent retry and a reused key.

use memlayer_store::{
    Access, Append, Appended, MAX_MESSAGES_PER_SESSION, Message, Metadata, NewMessage, NewSession,
    Page, Role, Session, SessionState, StoreError, Timestamp, metadata_to_text, validate_id,
};
use tokio_postgres::Row;

use crate::seal::{DataKey, Field, Place};
use crate::{PgStore, PostgresError, Result};

/// Statements an append sends before it gives up on a session whose next index keeps moving.
/// Each attempt that loses did so because another append to the session won, so the session
/// progresses; the bound only keeps one caller from waiting forever behind a crowd.
const MAX_APPEND_ATTEMPTS: usize = 1_000;

/// The SQLSTATE `memlayer_append` raises when a concurrent append under the same idempotency
/// key committed first; the statement was undone, and its retry replays that append.
const CONCURRENT_IDEMPOTENCY_KEY: &str = "ML001";

const APPEND: &str = "SELECT outcome, first_index, count, created_session, key_id, key \
     FROM memlayer_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, \
                          $15, $16, $17, $18, $19)";

const SESSION_COLUMNS: &str = "session_id, user_id, agent_id, flow_id, metadata, created_at, \
     updated_at, message_count, run_count, load_from, last_role";

impl PgStore {
    /// Creates a session under `session_id`, or under a new UUIDv4 when `None`, with a new
    /// data key. An id in use is a [`StoreError::Conflict`] whoever's session holds it.
    pub async fn create_session(
        &self,
        access: &Access,
        session_id: Option<&str>,
        new: NewSession,
    ) -> Result<Session> {
        let session_id = new.checked_session_id(access, session_id)?;
        let key = DataKey::generate()?;
        let now = micros(Timestamp::now())?;
        let client = self.pool.get().await?;
        // One statement: the key is stored only if the session is.
        let row = client
            .query_opt(
                &format!(
                    "WITH created AS (
                         INSERT INTO sessions (tenant, session_id, user_id, agent_id, flow_id,
                                               metadata, created_at, updated_at, key_id)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)
                         ON CONFLICT DO NOTHING
                         RETURNING {SESSION_COLUMNS}, tenant, key_id
                     ), key AS (
                         INSERT INTO data_keys (tenant, key_id, key)
                         SELECT tenant, key_id, $9 FROM created
                     )
                     SELECT {SESSION_COLUMNS} FROM created"
                ),
                &[
                    &access.tenant(),
                    &session_id,
                    &new.user_id,
                    &new.agent_id,
                    &new.flow_id,
                    &metadata_to_text(&new.metadata),
                    &now,
                    &key.id,
                    &key.bytes(),
                ],
            )
            .await?;
        match row {
            Some(row) => session_from_row(&row),
            None => Err(StoreError::session_id_taken(&session_id).into()),
        }
    }

    /// Appends messages to a session, creating it first when `append.create` says who owns
    /// it, in one statement (see `memlayer_append` in the migration) that checks ownership and
    /// the idempotency key, gives the messages the next consecutive indices and records the
    /// change in the feed. With a user-scoped `access` the session must be that user's.
    ///
    /// The messages are sealed for their indices before the statement, so the store guesses
    /// the session's key and next index: one round trip when it created the session or
    /// appended to it last; one more each time the guess is wrong (the first append of this
    /// store to an existing session, or another writer appended in between), as the statement
    /// answers with the current key and index instead of writing.
    pub async fn append(
        &self,
        access: &Access,
        session_id: &str,
        append: Append,
    ) -> Result<Appended> {
        append.check(access, session_id)?;
        let tenant = access.tenant();
        let digest = append
            .idempotency_key
            .as_ref()
            .map(|_| append.request_digest());
        let now = Timestamp::now();
        let columns = Columns::of(&append.messages, now)?;
        let now = micros(now)?;
        let max_messages = i64::try_from(MAX_MESSAGES_PER_SESSION).unwrap_or(i64::MAX);
        let owner = append.create.as_ref();
        // A creating append brings the key of the session it may create; a key is never
        // taken from `known` for that, so a key destroyed with an erased session is never
        // reused by a new one under the same id.
        let fresh = owner.map(|_| DataKey::generate()).transpose()?;
        let fresh_guess = || fresh.clone().map(|key| (key, 0));
        let mut guess = self.known.get(tenant, session_id).or_else(fresh_guess);

        let client = self.pool.get().await?;
        let statement = client.prepare_cached(APPEND).await?;
        for _ in 0..MAX_APPEND_ATTEMPTS {
            let sealed = guess
                .as_ref()
                .map(|(key, first)| {
                    seal_messages(key, tenant, session_id, *first, &append.messages, &columns)
                })
                .transpose()?;
            let (contents, sealed_metadata) = sealed.map(|s| (s.contents, s.metadata)).unzip();
            let (key_id, new_key, expected) = match &guess {
                Some((key, first)) => {
                    // The key's bytes go along only for the key made for this append.
                    let is_fresh = fresh.as_ref().is_some_and(|f| f.id == key.id);
                    (
                        Some(key.id),
                        is_fresh.then(|| key.bytes().to_vec()),
                        i64::try_from(*first).unwrap_or(i64::MAX),
                    )
                }
                None => (None, None, 0),
            };
            let result = client
                .query_one(
                    &statement,
                    &[
                        &tenant,
                        &session_id,
                        &access.user(),
                        &owner.map(|o| o.user_id.as_str()),
                        &owner.map(|o| o.agent_id.as_str()),
                        &owner.and_then(|o| o.flow_id.as_deref()),
                        &owner.map(|o| metadata_to_text(&o.metadata)),
                        &key_id,
                        &new_key,
                        &expected,
                        &append.idempotency_key,
                        &digest.as_ref().map(|d| d.as_slice()),
                        &now,
                        &max_messages,
                        &columns.roles,
                        &contents,
                        &sealed_metadata,
                        &columns.timestamps,
                        &columns.token_counts,
                    ],
                )
                .await;
            let row = match result {
                Ok(row) => row,
                Err(err) if err.code().map(|c| c.code()) == Some(CONCURRENT_IDEMPOTENCY_KEY) => {
                    continue;
                }
                Err(err) => return Err(err.into()),
            };
            match Outcome::of(&row)? {
                Outcome::Done(appended) => {
                    if let (false, Some((key, _))) = (appended.replayed, guess) {
                        self.known
                            .put(tenant, session_id, key, appended.indices().end);
                    }
                    return Ok(appended);
                }
                Outcome::Retry(current) => guess = current.or_else(fresh_guess),
                Outcome::NotFound => {
                    self.known.forget(tenant, session_id);
                    return Err(StoreError::session_not_found(session_id).into());
                }
                Outcome::Taken => return Err(StoreError::session_id_taken(session_id).into()),
                Outcome::KeyReused => {
                    let key = append.idempotency_key.as_deref().unwrap_or_default();
                    return Err(StoreError::idempotency_key_reused(key).into());
                }
                Outcome::TooMany => return Err(StoreError::session_full(session_id).into()),
            }
        }
        Err(PostgresError::Contention {
            session_id: session_id.to_owned(),
        })
    }

    /// The session, or `None` if `access` reaches no session with that id.
    pub async fn session(&self, access: &Access, session_id: &str) -> Result<Option<Session>> {
        access.validate()?;
        validate_id("session_id", session_id)?;
        let client = self.pool.get().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {SESSION_COLUMNS} FROM sessions
                     WHERE tenant = $1 AND session_id = $2
                       AND ($3::text IS NULL OR user_id = $3)"
                ),
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    /// Up to `limit` messages of a session from index `from` on, in index order, and the
    /// session's message count as the page's total. Read in one statement, so one snapshot.
    pub async fn messages(
        &self,
        access: &Access,
        session_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Page<Message>> {
        access.validate()?;
        validate_id("session_id", session_id)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.pool.get().await?;
        let rows = client
            .query(
                "SELECT s.message_count, s.key_id, k.key, m.idx, m.role, m.content, m.metadata,
                        m.\"timestamp\", m.token_count
                 FROM sessions s
                 JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
                 LEFT JOIN LATERAL (
                     SELECT * FROM messages
                     WHERE messages.tenant = s.tenant AND messages.session_id = s.session_id
                       AND messages.idx >= $4
                     ORDER BY messages.idx
                     LIMIT $5
                 ) m ON true
                 WHERE s.tenant = $1 AND s.session_id = $2
                   AND ($3::text IS NULL OR s.user_id = $3)
                 ORDER BY m.idx",
                &[&access.tenant(), &session_id, &access.user(), &from, &limit],
            )
            .await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let total = unsigned(first.get("message_count"))?;
        let key = DataKey::from_stored(first.get("key_id"), first.get("key"))?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(index) = row.get::<_, Option<i64>>("idx") else {
                continue;
            };
            let index = unsigned(index)?;
            let place = |field| Place {
                tenant: access.tenant(),
                session_id,
                index,
                field,
            };
            let content = key.open(place(Field::Content), row.get("content"))?;
            let metadata = key.open(place(Field::Metadata), row.get("metadata"))?;
            items.push(Message {
                index,
                role: role_from_code(row.get("role"))?,
                content: String::from_utf8(content).map_err(|err| PostgresError::Corrupted {
                    what: "message",
                    detail: format!("content of message {index} is not UTF-8: {err}"),
                })?,
                timestamp: Timestamp::from_micros(unsigned(row.get("timestamp"))?),
                token_count: u32::try_from(row.get::<_, i64>("token_count")).map_err(|_| {
                    PostgresError::Corrupted {
                        what: "message",
                        detail: format!("token count of message {index} out of range"),
                    }
                })?,
                metadata: metadata_from_bytes(&metadata)?,
            });
        }
        Ok(Page { items, total })
    }
}

/// The columns of an append's messages that are stored as they are, one array each, and
/// their metadata as JSON text, to seal.
struct Columns {
    roles: Vec<i16>,
    timestamps: Vec<i64>,
    token_counts: Vec<i64>,
    metadata: Vec<String>,
}

impl Columns {
    /// `messages`' columns; messages without a time get `now`.
    fn of(messages: &[NewMessage], now: Timestamp) -> Result<Self, StoreError> {
        Ok(Self {
            roles: messages.iter().map(|m| role_code(m.role)).collect(),
            timestamps: messages
                .iter()
                .map(|m| micros(m.timestamp.unwrap_or(now)))
                .collect::<Result<_, _>>()?,
            token_counts: messages.iter().map(|m| i64::from(m.token_count)).collect(),
            metadata: messages
                .iter()
                .map(|m| metadata_to_text(&m.metadata))
                .collect(),
        })
    }
}

/// What `memlayer_append` answered.
enum Outcome {
    /// Appended, or replayed from the idempotency record.
    Done(Appended),
    /// Nothing written: the messages were sealed for another key or index. The session's
    /// current key and next index, or `None` when there is no session (any more, or yet).
    Retry(Option<(DataKey, u64)>),
    /// No session, or another user's.
    NotFound,
    /// The id belongs to another owner.
    Taken,
    /// The idempotency key was used for a different request.
    KeyReused,
    /// The session would exceed [`MAX_MESSAGES_PER_SESSION`].
    TooMany,
}

impl Outcome {
    fn of(row: &Row) -> Result<Self> {
        let outcome: &str = row.get("outcome");
        Ok(match outcome {
            "appended" | "replayed" => Self::Done(Appended {
                first_index: unsigned(row.get("first_index"))?,
                count: unsigned(row.get("count"))?,
                created_session: row.get("created_session"),
                replayed: outcome == "replayed",
            }),
            "retry" => Self::Retry(
                row.get::<_, Option<uuid::Uuid>>("key_id")
                    .map(|id| {
                        let key = DataKey::from_stored(id, row.get("key"))?;
                        Ok::<_, PostgresError>((key, unsigned(row.get("first_index"))?))
                    })
                    .transpose()?,
            ),
            "not_found" => Self::NotFound,
            "taken" => Self::Taken,
            "idempotency_conflict" => Self::KeyReused,
            "too_many" => Self::TooMany,
            other => {
                return Err(PostgresError::Corrupted {
                    what: "append outcome",
                    detail: format!("memlayer_append answered {other:?}"),
                });
            }
        })
    }
}

/// Each message's content and metadata sealed for its index, counting from `first`.
fn seal_messages(
    key: &DataKey,
    tenant: &str,
    session_id: &str,
    first: u64,
    messages: &[NewMessage],
    columns: &Columns,
) -> Result<Sealed> {
    let mut sealed = Sealed {
        contents: Vec::with_capacity(messages.len()),
        metadata: Vec::with_capacity(messages.len()),
    };
    for (offset, (message, metadata)) in messages.iter().zip(&columns.metadata).enumerate() {
        let place = |field| Place {
            tenant,
            session_id,
            index: first + offset as u64,
            field,
        };
        sealed
            .contents
            .push(key.seal(place(Field::Content), message.content.as_bytes())?);
        sealed
            .metadata
            .push(key.seal(place(Field::Metadata), metadata.as_bytes())?);
    }
    Ok(sealed)
}

/// The sealed contents and metadata of an append's messages, in order.
struct Sealed {
    contents: Vec<Vec<u8>>,
    metadata: Vec<Vec<u8>>,
}

/// Roles as stored; never renumber (stored rows and `sessions.last_role` hold these).
fn role_code(role: Role) -> i16 {
    match role {
        Role::System => 0,
        Role::User => 1,
        Role::Assistant => 2,
        Role::Tool => 3,
    }
}

fn role_from_code(code: i16) -> Result<Role> {
    Ok(match code {
        0 => Role::System,
        1 => Role::User,
        2 => Role::Assistant,
        3 => Role::Tool,
        other => {
            return Err(PostgresError::Corrupted {
                what: "message",
                detail: format!("unknown role {other}"),
            });
        }
    })
}

fn metadata_from_bytes(bytes: &[u8]) -> Result<Metadata> {
    serde_json::from_slice(bytes).map_err(|err| PostgresError::Corrupted {
        what: "metadata",
        detail: err.to_string(),
    })
}

/// A time as PostgreSQL's bigint holds it; times past the year 294,000 are refused.
fn micros(timestamp: Timestamp) -> Result<i64, StoreError> {
    i64::try_from(timestamp.as_micros()).map_err(|_| StoreError::InvalidInput {
        field: "timestamp",
        reason: "out of range".into(),
    })
}

/// A stored count, index or time, which the schema keeps non-negative.
pub(crate) fn unsigned(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| PostgresError::Corrupted {
        what: "session",
        detail: format!("negative count, index or time {value}"),
    })
}

fn session_from_row(row: &Row) -> Result<Session> {
    let last_role = row
        .get::<_, Option<i16>>("last_role")
        .map(role_from_code)
        .transpose()?;
    let metadata: &str = row.get("metadata");
    Ok(Session {
        id: row.get("session_id"),
        user_id: row.get("user_id"),
        agent_id: row.get("agent_id"),
        flow_id: row.get("flow_id"),
        created_at: Timestamp::from_micros(unsigned(row.get("created_at"))?),
        updated_at: Timestamp::from_micros(unsigned(row.get("updated_at"))?),
        metadata: metadata_from_bytes(metadata.as_bytes())?,
        message_count: unsigned(row.get("message_count"))?,
        run_count: unsigned(row.get("run_count"))?,
        load_from: unsigned(row.get("load_from"))?,
        state: if last_role == Some(Role::User) {
            SessionState::IncompleteTurn
        } else {
            SessionState::Active
        },
    })
}
