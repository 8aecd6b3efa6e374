//! Backups while serving, for the operator: a consistent copy of the whole store, streamed.

use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use memlayer_store::StoreError;

use crate::api::read;
use crate::extract::Operator;
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// Header with the number of entries the backup holds.
const ENTRIES_HEADER: &str = "x-memlayer-backup-entries";

errors!(
    BackupErrors = [
        KEYED,
        WRITES,
        &[
            fails(
                403,
                "forbidden",
                "Not an operator key: no tenant's key may take a backup"
            ),
            fails(
                501,
                "not_implemented",
                "The store is a PostgreSQL database: back it up with its own tools"
            )
        ]
    ]
);

/// Back up the whole store
///
/// A consistent copy of every tenant's data as committed when the request began: a redb file
/// that `memlayer serve` opens as its store (`memlayer backup` saves one). Reads and writes go
/// on meanwhile, and the copy carries no bytes of data erased before it began (data erased
/// later stays in the backup: rotate backups). It holds every tenant's data, so it needs an
/// `operator` key (`memlayer keys create --role operator`, on the data directory); every
/// tenant's key, its admins' and the configured admin key included, is refused.
#[utoipa::path(
    post,
    path = "/v1/admin/backup",
    tag = "admin",
    responses(
        (
            status = 200,
            description = "The backup file (`x-memlayer-backup-entries`: the entries it holds)",
            content_type = "application/octet-stream",
            body = Vec<u8>,
        ),
        BackupErrors,
    ),
    security(("bearerAuth" = ["operator"])),
)]
pub(crate) async fn backup(
    State(state): State<AppState>,
    _operator: Operator,
) -> Result<impl IntoResponse, ApiError> {
    let (file, backup) = read(&state, |store| {
        let failed = |err| StoreError::Backup(std::sync::Arc::new(err));
        // Beside the store (same file system, so the same room) and anonymous: the copy has
        // no name, so nothing of it outlives the download, even after a crash.
        let directory = store
            .path()
            .and_then(std::path::Path::parent)
            .unwrap_or(std::path::Path::new("."));
        let file = tempfile::tempfile_in(directory).map_err(failed)?;
        let backup = store.backup(file.try_clone().map_err(failed)?)?;
        Ok((file, backup))
    })
    .await?;
    // `backup` wrote through its own handle; this one still reads from the start.
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(
        tokio::fs::File::from_std(file),
    ));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, backup.bytes.to_string()),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"memlayer-backup.redb\"".to_owned(),
            ),
            (
                header::HeaderName::from_static(ENTRIES_HEADER),
                backup.entries.to_string(),
            ),
        ],
        body,
    ))
}
