use memlayer_store::{Access, Append, NewMessage, NewRun, Role, RunStatus};

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
    let canary = |what: &str| format!("{what}-canary-{}", uuid::Uuid::new_v4().simple());
    let (session_metadata, created_metadata) = (canary("session"), canary("created"));
    let (run_content, run_error, run_tool, run_metadata) = (
        canary("run"),
        canary("error"),
        canary("tool"),
        canary("runmeta"),
    );
    let summary = canary("summary");
    let mut message = NewMessage::new(Role::User, content.clone(), 1);
    message
        .metadata
        .insert("note".into(), metadata.clone().into());
    let mut new = owner("alice");
    new.metadata
        .insert("note".into(), session_metadata.clone().into());
    let append = Append {
        messages: vec![message],
        create: Some(new.clone()),
        idempotency_key: None,
    };
    let tenant = Access::tenant_wide("t");
    store.append(&tenant, "s", append).await.unwrap();
    // A session created without an append seals its metadata too.
    new.metadata
        .insert("note".into(), created_metadata.clone().into());
    store
        .create_session(&tenant, Some("created"), new)
        .await
        .unwrap();
    let mut run = NewRun {
        run_id: None,
        status: RunStatus::Failed,
        content: Some(run_content.clone()),
        tool_calls: vec![run_tool.clone().into()],
        error: Some(run_error.clone()),
        metadata: Default::default(),
    };
    run.metadata
        .insert("note".into(), run_metadata.clone().into());
    let recorded = store.record_run(&tenant, "s", run).await.unwrap();
    let read = store.version(&tenant, "s").await.unwrap().unwrap();
    store
        .save_summary(&tenant, "s", read, summary.clone(), 0, 0)
        .await
        .unwrap();
    assert_eq!(
        store.session(&tenant, "s").await.unwrap().unwrap().metadata["note"],
        session_metadata.as_str()
    );
    assert_eq!(
        store
            .session(&tenant, "created")
            .await
            .unwrap()
            .unwrap()
            .metadata["note"],
        created_metadata.as_str()
    );
    assert_eq!(store.runs(&tenant, "s", 0, 1).await.unwrap(), [recorded]);
    assert_eq!(
        store.summary(&tenant, "s").await.unwrap().unwrap().text,
        summary
    );
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
    let sealed = [
        &content,
        &metadata,
        &session_metadata,
        &created_metadata,
        &run_content,
        &run_error,
        &run_tool,
        &run_metadata,
        &summary,
    ];
    let needles: Vec<&[u8]> = sealed
        .iter()
        .chain([&&control])
        .map(|text| text.as_bytes())
        .collect();
    let found = found_in_files(&data_directory, &needles);
    let mut expected = vec![false; sealed.len()];
    expected.push(true);
    assert_eq!(
        found,
        expected,
        "{sealed:?} and the control found in {}",
        data_directory.display()
    );
}
