//! After each restart: settle what the clients could not know (the operation each had in
//! flight when the server died) the way a real client would, then compare everything the
//! server serves with what the clients were told.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::Method;
use serde_json::Value;

use super::client::{Answer, ClientState, Http, Op, SHARED_SESSIONS};

/// Settles `state.uncertain`: an append is retried with its idempotency key (so it must end
/// up stored exactly once), any other operation is looked up. An erasure found applied must
/// be complete, which the byte scan and the index check verify; one found not applied is
/// repeated, as a client repeats a request left unanswered. It may not be applied *yet*:
/// when the database dies alone, the commit recording its job can land while the answer is
/// lost, and the still running server finishes that job by itself a little later, so
/// "not applied" cannot be a settled state of an erasure.
pub(crate) async fn settle(http: &Http, state: &mut ClientState) {
    let Some(op) = state.uncertain.take() else {
        return;
    };
    if let Some(erasure) = state.recorded_erasure.take()
        && let Err(violation) = finished(http, state, erasure).await
    {
        state
            .violations
            .push(format!("client {}: {violation}", state.id));
        return;
    }
    let violation = match op {
        Op::Append { .. } => retry(http, state, op).await,
        Op::EraseMessage { ref session, index } => match messages(http, state, session).await {
            Ok(Some(stored)) if stored.iter().any(|(i, _)| *i == index) => {
                retry(http, state, op).await
            }
            Ok(Some(_)) => {
                state.message_erased(session, index);
                None
            }
            Ok(None) => Some(format!("{session} is gone")),
            Err(err) => Some(err),
        },
        Op::DeleteSession { ref session } => {
            match get(http, state, &format!("/v1/sessions/{session}")).await {
                Ok(None) => {
                    state.session_deleted(session);
                    None
                }
                Ok(Some(_)) => retry(http, state, op).await,
                Err(err) => Some(err),
            }
        }
        Op::Remember {
            ref text,
            ref token,
        } => match memories(http, state).await {
            Ok(found) => {
                for memory in found.iter().filter(|m| m["text"] == text.as_str()) {
                    state.remembered(text, token, memory);
                }
                None
            }
            Err(err) => Some(err),
        },
        Op::Forget { id } => match get(http, state, &format!("/v1/memories/{id}")).await {
            Ok(None) => {
                state.forgotten(id);
                None
            }
            Ok(Some(_)) => retry(http, state, op).await,
            Err(err) => Some(err),
        },
        Op::Purge => match session_ids(http, state).await {
            Ok(listed) => {
                let known = written_sessions(state);
                let left: BTreeSet<String> = known.intersection(&listed).cloned().collect();
                if left.is_empty() {
                    state.acknowledge(Op::Purge, &Value::Null);
                    None
                } else if left == known {
                    retry(http, state, op).await
                } else {
                    Some(format!(
                        "half a purge: {left:?} of {known:?} are left after the restart"
                    ))
                }
            }
            Err(err) => Some(err),
        },
        Op::Context => None,
    };
    if let Some(violation) = violation {
        state.violations.push(format!(
            "client {}: settling the operation in flight at the kill: {violation}",
            state.id
        ));
    }
}

/// Sends `op` again; a repeated erasure whose target is gone already (the job the lost answer
/// recorded got there first) is applied all the same.
async fn retry(http: &Http, state: &mut ClientState, op: Op) -> Option<String> {
    let erasure = !matches!(op, Op::Append { .. });
    match http.perform(state, &op).await {
        Answer::Done(answer) => {
            state.acknowledge(op, &answer);
            None
        }
        Answer::Refused(404, _) if erasure => {
            state.acknowledge(op, &Value::Null);
            None
        }
        Answer::Recorded(id) => {
            let unfinished = finished(http, state, id).await.err();
            if unfinished.is_none() {
                state.acknowledge(op, &Value::Null);
            }
            unfinished
        }
        Answer::Refused(status, body) => Some(format!("retry refused ({status}): {body}")),
        Answer::Lost => Some("retry unanswered".to_owned()),
    }
}

/// Waits for erasure `id`, which the server recorded and could not finish at a fault, to
/// finish by itself, as the server promised: a minute at most, polling its receipt.
async fn finished(http: &Http, state: &ClientState, id: u64) -> Result<(), String> {
    let path = format!("/v1/admin/erasures/{id}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match http.send(&state.key, Method::GET, &path, None, None).await {
            // `202` with `status: running` until its receipt is written.
            Answer::Done(body) if body["status"] != "running" => return Ok(()),
            Answer::Done(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Answer::Done(_) => {
                return Err(format!(
                    "erasure {id} is still pending a minute after the fault"
                ));
            }
            Answer::Refused(status, body) => return Err(format!("GET {path}: {status} {body}")),
            Answer::Lost | Answer::Recorded(_) => return Err(format!("GET {path}: no answer")),
        }
    }
}

/// Compares what the server serves with every client's model; returns the contradictions.
pub(crate) async fn check(http: &Http, states: &[ClientState]) -> Vec<String> {
    let mut violations = Vec::new();
    let mut shared: BTreeMap<&str, BTreeMap<u64, (usize, u64, &str)>> = BTreeMap::new();
    for state in states {
        let who = format!("client {}", state.id);
        for (session, expected) in state.sessions.iter().filter(|(_, m)| !m.is_empty()) {
            let expected: BTreeMap<u64, &str> = expected
                .iter()
                .map(|m| (m.index, m.sent.content.as_str()))
                .collect();
            match messages(http, state, session).await {
                Ok(Some(stored)) => compare(&mut violations, &who, session, &expected, &stored),
                Ok(None) => violations.push(format!(
                    "{who}: {session} with {} acknowledged messages is gone",
                    expected.len()
                )),
                Err(err) => violations.push(format!("{who}: {err}")),
            }
        }
        for session in &state.deleted {
            match get(http, state, &format!("/v1/sessions/{session}")).await {
                Ok(None) => {}
                Ok(Some(_)) => violations.push(format!("{who}: deleted {session} is served")),
                Err(err) => violations.push(format!("{who}: {err}")),
            }
        }
        if state.purger {
            match session_ids(http, state).await {
                Ok(listed) if listed == written_sessions(state) => {}
                Ok(listed) => violations.push(format!(
                    "{who}: the tenant lists {listed:?}, the client wrote {:?}",
                    written_sessions(state)
                )),
                Err(err) => violations.push(format!("{who}: {err}")),
            }
        } else {
            match memories(http, state).await {
                Ok(found) => {
                    let served: BTreeMap<u64, &str> = found
                        .iter()
                        .filter_map(|m| Some((m["memory_id"].as_u64()?, m["text"].as_str()?)))
                        .collect();
                    let expected: BTreeMap<u64, &str> = state
                        .memories
                        .iter()
                        .map(|(id, m)| (*id, m.text.as_str()))
                        .collect();
                    if served != expected {
                        violations.push(format!(
                            "{who}: memories served {served:?}, acknowledged {expected:?}"
                        ));
                    }
                }
                Err(err) => violations.push(format!("{who}: {err}")),
            }
        }
        for (session, stored) in &state.shared {
            let messages = shared.entry(session.as_str()).or_default();
            for m in stored {
                let entry = (state.id, m.sent.seq, m.sent.content.as_str());
                if messages.insert(m.index, entry).is_some() {
                    violations.push(format!(
                        "{who}: index {} of {session} acknowledged to two messages",
                        m.index
                    ));
                }
            }
        }
    }
    let Some(reader) = states.iter().find(|s| !s.purger) else {
        return violations;
    };
    for session in SHARED_SESSIONS {
        let Some(acknowledged) = shared.get(session) else {
            continue;
        };
        let expected = acknowledged
            .iter()
            .map(|(index, (_, _, content))| (*index, *content))
            .collect();
        match messages(http, reader, session).await {
            Ok(Some(stored)) => compare(&mut violations, "shared", session, &expected, &stored),
            Ok(None) => violations.push(format!("shared {session} is gone")),
            Err(err) => violations.push(err),
        }
        // Each client's messages in the order it sent them.
        let mut last_seq: BTreeMap<usize, u64> = BTreeMap::new();
        for (index, (client, seq, _)) in acknowledged {
            if last_seq
                .insert(*client, *seq)
                .is_some_and(|last| last >= *seq)
            {
                violations.push(format!(
                    "shared {session}: client {client}'s message {seq} stored out of order at {index}"
                ));
            }
        }
    }
    violations
}

/// The stored messages must be the acknowledged ones, each once, at its index, whole.
fn compare(
    violations: &mut Vec<String>,
    who: &str,
    session: &str,
    expected: &BTreeMap<u64, &str>,
    stored: &[(u64, String)],
) {
    let mut seen = BTreeSet::new();
    for (index, content) in stored {
        if !seen.insert(*index) {
            violations.push(format!("{who}: {session} serves index {index} twice"));
        }
        match expected.get(index) {
            Some(want) if want == content => {}
            Some(want) => violations.push(format!(
                "{who}: {session}[{index}] is {content:?}, acknowledged {want:?}"
            )),
            None => violations.push(format!(
                "{who}: {session}[{index}] = {content:?} was never acknowledged (or was erased)"
            )),
        }
    }
    for (index, want) in expected {
        if !seen.contains(index) {
            violations.push(format!(
                "{who}: acknowledged {session}[{index}] = {want:?} is lost"
            ));
        }
    }
}

/// Sessions the client wrote to and has not seen deleted.
fn written_sessions(state: &ClientState) -> BTreeSet<String> {
    state
        .sessions
        .iter()
        .filter(|(_, m)| !m.is_empty())
        .map(|(s, _)| s.clone())
        .collect()
}

/// `GET path`: `None` for a 404.
async fn get(http: &Http, state: &ClientState, path: &str) -> Result<Option<Value>, String> {
    match http.send(&state.key, Method::GET, path, None, None).await {
        Answer::Done(body) => Ok(Some(body)),
        Answer::Refused(404, _) => Ok(None),
        Answer::Refused(status, body) => Err(format!("GET {path}: {status} {body}")),
        Answer::Lost | Answer::Recorded(_) => Err(format!("GET {path}: no answer")),
    }
}

/// Every live message of a session as `(index, content)`, page by page; `None` if the
/// session does not exist.
async fn messages(
    http: &Http,
    state: &ClientState,
    session: &str,
) -> Result<Option<Vec<(u64, String)>>, String> {
    let mut all = Vec::new();
    let mut from = 0;
    loop {
        let path = format!("/v1/sessions/{session}/messages?from={from}&limit=100");
        let Some(page) = get(http, state, &path).await? else {
            return Ok(None);
        };
        for message in page["messages"].as_array().into_iter().flatten() {
            let index = message["index"].as_u64();
            let content = message["content"].as_str();
            let (Some(index), Some(content)) = (index, content) else {
                return Err(format!(
                    "{path}: a message without index or content: {message}"
                ));
            };
            all.push((index, content.to_owned()));
        }
        match page["next_from"].as_u64() {
            Some(next) => from = next,
            None => return Ok(Some(all)),
        }
    }
}

async fn memories(http: &Http, state: &ClientState) -> Result<Vec<Value>, String> {
    let path = format!("/v1/users/{}/memories", state.user);
    let body = get(http, state, &path).await?.unwrap_or_default();
    Ok(body["memories"].as_array().cloned().unwrap_or_default())
}

/// The ids of every session of the client's tenant.
async fn session_ids(http: &Http, state: &ClientState) -> Result<BTreeSet<String>, String> {
    let mut ids = BTreeSet::new();
    for page in 0.. {
        let path = format!("/v1/sessions?page={page}&page_size=100");
        let body = get(http, state, &path).await?.unwrap_or_default();
        let content = body["content"].as_array().cloned().unwrap_or_default();
        if content.is_empty() {
            break;
        }
        ids.extend(
            content
                .iter()
                .filter_map(|s| s["session_id"].as_str().map(str::to_owned)),
        );
    }
    Ok(ids)
}
