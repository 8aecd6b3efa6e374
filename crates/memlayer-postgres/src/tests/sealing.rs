use memlayer_store::{Access, Append, NewMessage, Role};

use super::files::{data_directory, found_in_files};
use super::owner;
use crate::test_cluster;

#[tokio::test]
async fn sealed_text_reaches_no_file_of_the_cluster_while_plain_text_does() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    // Random, so that no earlier run's bytes (on a reused server) can match.
    let content = format!("content-canary-{}", uuid::Uuid::new_v4().simple());
    let metadata = format!("metadata-canary-{}", uuid::Uuid::new_v4().simple());
    let control = format!("control-canary-{}", uuid::Uuid::new_v4().simple());
    let mut message = NewMessage::new(Role::User, content.clone(), 1);
    message
        .metadata
        .insert("note".into(), metadata.clone().into());
    let append = Append {
        messages: vec![message],
        create: Some(owner("alice")),
        idempotency_key: None,
    };
    store
        .append(&Access::tenant_wide("t"), "s", append)
        .await
        .unwrap();
    let read = store
        .messages(&Access::tenant_wide("t"), "s", 0, 1)
        .await
        .unwrap();
    assert_eq!(read.items[0].content, content, "stored, and readable");

    let client = db.connect().await.unwrap();
    // The control: the same scan finds text stored as plain text, so a miss above means the
    // text is not there, not that the scan cannot see it.
    client
        .execute("CREATE TABLE scratch (text text)", &[])
        .await
        .unwrap();
    client
        .execute("INSERT INTO scratch VALUES ($1)", &[&control])
        .await
        .unwrap();
    let data_directory = data_directory(&client).await;
    let found = found_in_files(
        &data_directory,
        &[content.as_bytes(), metadata.as_bytes(), control.as_bytes()],
    );
    assert_eq!(
        found,
        [false, false, true],
        "content, metadata, control found in {}",
        data_directory.display()
    );
}
