//! Sessions and their messages, with the semantics of `memlayer_store::Sessions`: the same
//! validation, the same ownership rule (another user's session is not found), the same
//! answers for a taken id, a creating append, an idempotent retry and a reused key.

use memlayer_store::{
    Access, Append, Appended, MAX_MESSAGES_PER_SESSION, Message, Metadata, NewMessage, NewSession,
    Page, Role, SearchQuery, Session, SessionFilter, SessionState, SessionVersion, StoreError,
    Timestamp, metadata_to_text,
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

/// The columns [`session_from_row`] reads, besides the key.
const SESSION_COLUMNS: &str = "session_id, user_id, agent_id, flow_id, metadata, created_at, \
     updated_at, message_count, run_count, load_from, last_role";

/// The columns [`session_from_row`] reads, of `sessions s JOIN data_keys k` ([`WITH_KEY`]).
pub(crate) const SESSION_KEY_COLUMNS: &str = "s.session_id, s.user_id, s.agent_id, s.flow_id, s.metadata, \
     s.created_at, s.updated_at, s.message_count, s.run_count, s.load_from, s.last_role, \
     s.key_id, k.key";

/// Sessions with their data keys.
pub(crate) const WITH_KEY: &str =
    "sessions s JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id";

/// How many messages a search decrypts per round trip.
const SEARCH_BATCH: i32 = 256;

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
        let metadata = seal_session_metadata(&key, access.tenant(), &session_id, &new)?;
        let now = micros(Timestamp::now())?;
        let client = self.connection().await?;
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
                    &metadata,
                    &now,
                    &key.id,
                    &key.bytes(),
                ],
            )
            .await?;
        match row {
            Some(row) => session_from_row(&row, access.tenant(), &key),
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
        let request_digest = append
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
        let create_metadata = owner
            .zip(fresh.as_ref())
            .map(|(owner, key)| seal_session_metadata(key, tenant, session_id, owner))
            .transpose()?;
        let fresh_guess = || fresh.clone().map(|key| (key, 0));
        let mut guess = self.known.get(tenant, session_id).or_else(fresh_guess);

        let client = self.connection().await?;
        let statement = client.prepare_cached(APPEND).await?;
        for _ in 0..MAX_APPEND_ATTEMPTS {
            let sealed = guess
                .as_ref()
                .map(|(key, first)| {
                    seal_messages(key, tenant, session_id, *first, &append.messages, &columns)
                })
                .transpose()?;
            let (contents, sealed_metadata) = sealed.map(|s| (s.contents, s.metadata)).unzip();
            // Keyed with the guessed key: the statement compares digests only under the
            // session's current key.
            let digest = request_digest
                .zip(guess.as_ref())
                .map(|(request, (key, _))| key.idempotency_digest(&request));
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
                        &create_metadata,
                        &key_id,
                        &new_key,
                        &expected,
                        &append.idempotency_key,
                        &digest,
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
                        self.count_commit();
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
        access.check_session(session_id)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {SESSION_KEY_COLUMNS} FROM {WITH_KEY}
                     WHERE s.tenant = $1 AND s.session_id = $2
                       AND ($3::text IS NULL OR s.user_id = $3)"
                ),
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        row.as_ref()
            .map(|row| session_from_row(row, access.tenant(), &key_from_row(row)?))
            .transpose()
    }

    /// Whether `access` reaches a session with that id.
    pub async fn session_exists(&self, access: &Access, session_id: &str) -> Result<bool> {
        access.check_session(session_id)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT 1 FROM sessions
                 WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)",
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        Ok(row.is_some())
    }

    /// The session's version (surrogate key and erasure count), which a summary computed
    /// from what is read now is saved with; `None` if `access` reaches no session with that
    /// id.
    pub async fn version(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<Option<SessionVersion>> {
        access.check_session(session_id)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT sid, erased FROM sessions
                 WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)",
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        row.map(|row| {
            Ok(SessionVersion::new(
                unsigned(row.get("sid"))?,
                unsigned(row.get("erased"))?,
            ))
        })
        .transpose()
    }

    /// Starts later context loads after the session's current last message; the messages
    /// stay stored for audit and search. Returns the index loads now start from. Counts as
    /// activity.
    pub async fn clear_session(&self, access: &Access, session_id: &str) -> Result<u64> {
        access.check_session(session_id)?;
        let now = micros(Timestamp::now())?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "UPDATE sessions
                 SET load_from = message_count, updated_at = greatest(updated_at, $4)
                 WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
                 RETURNING load_from",
                &[&access.tenant(), &session_id, &access.user(), &now],
            )
            .await?;
        match row {
            Some(row) => unsigned(row.get("load_from")),
            None => Err(StoreError::session_not_found(session_id).into()),
        }
    }

    /// Up to `limit` messages of a session, newest first, whose content contains every word
    /// of `query` ignoring case ([`SearchQuery`]): the whole history, cleared and summarised
    /// parts included. Content is sealed, so the messages are read newest first in batches
    /// and opened here, until `limit` matched or none is left; one read-only transaction at
    /// one snapshot checks the session and reads them.
    pub async fn search_messages(
        &self,
        access: &Access,
        session_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Message>> {
        let query = SearchQuery::parse(query)?;
        access.check_session(session_id)?;
        let tenant = access.tenant();
        let mut client = self.connection().await?;
        let txn = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let Some(session) = txn
            .query_opt(
                &format!(
                    "SELECT s.message_count, s.key_id, k.key FROM {WITH_KEY}
                     WHERE s.tenant = $1 AND s.session_id = $2
                       AND ($3::text IS NULL OR s.user_id = $3)"
                ),
                &[&tenant, &session_id, &access.user()],
            )
            .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let key = key_from_row(&session)?;
        let mut hits = Vec::new();
        if limit == 0 {
            return Ok(hits);
        }
        let statement = txn
            .prepare(
                "SELECT idx, role, content, metadata, \"timestamp\", token_count FROM messages
                 WHERE tenant = $1 AND session_id = $2 ORDER BY idx DESC",
            )
            .await?;
        let portal = txn.bind(&statement, &[&tenant, &session_id]).await?;
        'batches: loop {
            let rows = txn.query_portal(&portal, SEARCH_BATCH).await?;
            for row in &rows {
                let index = unsigned(row.get("idx"))?;
                let content = open_content(&key, tenant, session_id, index, row)?;
                if query.matches(&content) {
                    hits.push(message_from_row(&key, tenant, session_id, row, content)?);
                    if hits.len() >= limit {
                        break 'batches;
                    }
                }
            }
            if rows.len() < SEARCH_BATCH as usize {
                break;
            }
        }
        Ok(hits)
    }

    /// One page of the sessions matching `filter` that `access` reaches, most recently
    /// active first (ties: greater session id first), with how many match in all; pages are
    /// numbered from 0 ([`SessionFilter::listing`] checks the request). One statement, so
    /// the page and the total agree.
    pub async fn list_sessions(
        &self,
        access: &Access,
        filter: &SessionFilter,
        page: u64,
        page_size: usize,
    ) -> Result<Page<Session>> {
        let Some(listing) = filter.listing(access, page, page_size)? else {
            return Ok(Page {
                items: Vec::new(),
                total: 0,
            });
        };
        let tenant = access.tenant();
        let skip = i64::try_from(listing.skip).unwrap_or(i64::MAX);
        let take = i64::try_from(listing.page_size).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT c.total, p.* FROM (
                         SELECT count(*) AS total FROM sessions
                         WHERE tenant = $1 AND ($2::text IS NULL OR user_id = $2)
                           AND ($3::text IS NULL OR agent_id = $3)
                     ) c
                     LEFT JOIN LATERAL (
                         SELECT {SESSION_KEY_COLUMNS} FROM {WITH_KEY}
                         WHERE s.tenant = $1 AND ($2::text IS NULL OR s.user_id = $2)
                           AND ($3::text IS NULL OR s.agent_id = $3)
                         ORDER BY s.updated_at DESC, s.session_id COLLATE \"C\" DESC
                         OFFSET $4 LIMIT $5
                     ) p ON true
                     ORDER BY p.updated_at DESC, p.session_id COLLATE \"C\" DESC"
                ),
                &[&tenant, &listing.user_id, &listing.agent_id, &skip, &take],
            )
            .await?;
        let total = rows
            .first()
            .map_or(Ok(0), |row| unsigned(row.get("total")))?;
        let items = rows
            .iter()
            .filter(|row| row.get::<_, Option<&str>>("session_id").is_some())
            .map(|row| session_from_row(row, tenant, &key_from_row(row)?))
            .collect::<Result<_>>()?;
        Ok(Page { items, total })
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
        access.check_session(session_id)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.connection().await?;
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
        let key = key_from_row(first)?;
        let tenant = access.tenant();
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(index) = row.get::<_, Option<i64>>("idx") else {
                continue;
            };
            let content = open_content(&key, tenant, session_id, unsigned(index)?, row)?;
            items.push(message_from_row(&key, tenant, session_id, row, content)?);
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

pub(crate) fn role_from_code(code: i16) -> Result<Role> {
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

/// The content of the message in `row` (columns `idx` and `content`), opened.
pub(crate) fn open_content(
    key: &DataKey,
    tenant: &str,
    session_id: &str,
    index: u64,
    row: &Row,
) -> Result<String> {
    let place = Place {
        tenant,
        session_id,
        index,
        field: Field::Content,
    };
    String::from_utf8(key.open(place, row.get("content"))?).map_err(|err| {
        PostgresError::Corrupted {
            what: "message",
            detail: format!("content of message {index} is not UTF-8: {err}"),
        }
    })
}

/// The message in `row` (the columns of `messages`), whose content was opened already.
pub(crate) fn message_from_row(
    key: &DataKey,
    tenant: &str,
    session_id: &str,
    row: &Row,
    content: String,
) -> Result<Message> {
    let index = unsigned(row.get("idx"))?;
    let place = Place {
        tenant,
        session_id,
        index,
        field: Field::Metadata,
    };
    let metadata = key.open(place, row.get("metadata"))?;
    Ok(Message {
        index,
        role: role_from_code(row.get("role"))?,
        content,
        timestamp: Timestamp::from_micros(unsigned(row.get("timestamp"))?),
        token_count: u32::try_from(row.get::<_, i64>("token_count")).map_err(|_| {
            PostgresError::Corrupted {
                what: "message",
                detail: format!("token count of message {index} out of range"),
            }
        })?,
        metadata: metadata_from_bytes(&metadata)?,
    })
}

/// Runs `lock`, a statement taking the row lock of session `$2` of tenant `$1` (of user `$3`
/// when not NULL) that returns its `key_id`, then reads that key in a statement of its own.
/// `None` when `access` reaches no such session.
///
/// Not one statement with the key joined: a lock that waited for a re-key (`rekey`) sees the
/// session's new key id, but a joined row of `data_keys` as the statement's snapshot had it,
/// the old key, so the session would look gone. The second statement's snapshot is taken
/// under the lock, after any re-key that committed first.
pub(crate) async fn locked_session_key(
    txn: &tokio_postgres::Transaction<'_>,
    lock: &str,
    access: &Access,
    session_id: &str,
) -> Result<Option<(Row, DataKey)>> {
    let tenant = access.tenant();
    let Some(row) = txn
        .query_opt(lock, &[&tenant, &session_id, &access.user()])
        .await?
    else {
        return Ok(None);
    };
    let key_id: uuid::Uuid = row.get("key_id");
    let key = txn
        .query_one(
            "SELECT key FROM data_keys WHERE tenant = $1 AND key_id = $2",
            &[&tenant, &key_id],
        )
        .await?;
    let key = DataKey::from_stored(key_id, key.get("key"))?;
    Ok(Some((row, key)))
}

/// The data key in `row`'s `key_id` and `key` columns.
pub(crate) fn key_from_row(row: &Row) -> Result<DataKey> {
    DataKey::from_stored(row.get("key_id"), row.get("key"))
}

/// Where a session's metadata is sealed.
fn session_metadata_place<'a>(tenant: &'a str, session_id: &'a str) -> Place<'a> {
    Place {
        tenant,
        session_id,
        index: 0,
        field: Field::SessionMetadata,
    }
}

/// The metadata of a new session, sealed under its key.
fn seal_session_metadata(
    key: &DataKey,
    tenant: &str,
    session_id: &str,
    new: &NewSession,
) -> Result<Vec<u8>> {
    key.seal(
        session_metadata_place(tenant, session_id),
        metadata_to_text(&new.metadata).as_bytes(),
    )
}

pub(crate) fn metadata_from_bytes(bytes: &[u8]) -> Result<Metadata> {
    serde_json::from_slice(bytes).map_err(|err| PostgresError::Corrupted {
        what: "metadata",
        detail: err.to_string(),
    })
}

/// A time as PostgreSQL's bigint holds it; times past the year 294,000 are refused.
pub(crate) fn micros(timestamp: Timestamp) -> Result<i64, StoreError> {
    i64::try_from(timestamp.as_micros()).map_err(|_| StoreError::InvalidInput {
        field: "timestamp",
        reason: "out of range".into(),
    })
}

/// An index, id or count as a bigint parameter; beyond `i64::MAX` means "all".
pub(crate) fn bigint(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored count, index or time, which the schema keeps non-negative.
pub(crate) fn unsigned(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| PostgresError::Corrupted {
        what: "session",
        detail: format!("negative count, index or time {value}"),
    })
}

/// The session in `row` ([`SESSION_COLUMNS`]) of `tenant`, whose metadata `key` opens.
pub(crate) fn session_from_row(row: &Row, tenant: &str, key: &DataKey) -> Result<Session> {
    let last_role = row
        .get::<_, Option<i16>>("last_role")
        .map(role_from_code)
        .transpose()?;
    let session_id: String = row.get("session_id");
    let metadata = key.open(
        session_metadata_place(tenant, &session_id),
        row.get("metadata"),
    )?;
    Ok(Session {
        id: session_id,
        user_id: row.get("user_id"),
        agent_id: row.get("agent_id"),
        flow_id: row.get("flow_id"),
        created_at: Timestamp::from_micros(unsigned(row.get("created_at"))?),
        updated_at: Timestamp::from_micros(unsigned(row.get("updated_at"))?),
        metadata: metadata_from_bytes(&metadata)?,
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
