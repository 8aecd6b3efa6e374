//! The backend contract as tests: every backend of [`crate::backend`] runs these cases and
//! must answer as the redb store does. A backend's test crate instantiates them with one
//! macro per concern ([`session_conformance!`](crate::session_conformance),
//! [`tenant_conformance!`](crate::tenant_conformance),
//! [`key_conformance!`](crate::key_conformance),
//! [`memory_conformance!`](crate::memory_conformance)), one `#[tokio::test]` per case, each on
//! a store the given expression opens, and random programs checked against a model of the
//! sessions ([`model_conformance!`](crate::model_conformance)); every case works in a tenant of its own, so the cases
//! may share a database. What is not per tenant (every tenant's retention rules, operator and
//! bootstrap keys, every tenant's memories in id order) the cases read filtered to their own.
//!
//! The cases check what callers see: results, their order and paging, and the error
//! variant of each refusal (messages are the backends' own).

use crate::StoreError;

pub mod erasure;
pub mod feed;
pub mod keys;
pub mod memories;
pub mod model;
pub mod sessions;
pub mod tenants;

/// A tenant no other case uses.
fn tenant() -> String {
    format!("conformance-{}", uuid::Uuid::new_v4().simple())
}

/// The variant of a refusal, for comparing refusals without their messages.
fn refusal<T: std::fmt::Debug>(result: crate::Result<T>) -> std::mem::Discriminant<StoreError> {
    match result {
        Err(err) => std::mem::discriminant(&err),
        Ok(value) => panic!("expected a refusal, got {value:?}"),
    }
}

fn not_found() -> std::mem::Discriminant<StoreError> {
    std::mem::discriminant(&StoreError::session_not_found("x"))
}

fn conflict() -> std::mem::Discriminant<StoreError> {
    std::mem::discriminant(&StoreError::Conflict(String::new()))
}

fn invalid_input() -> std::mem::Discriminant<StoreError> {
    std::mem::discriminant(&StoreError::InvalidInput {
        field: "",
        reason: String::new(),
    })
}

fn invalid_id() -> std::mem::Discriminant<StoreError> {
    std::mem::discriminant(&StoreError::InvalidId {
        kind: "",
        reason: String::new(),
    })
}

/// Runs two futures at once (each polled in turn on one task, as two requests are served
/// at once), for the cases about racing callers.
async fn both<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    use std::task::Poll;
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    let (mut first, mut second) = (None, None);
    std::future::poll_fn(|cx| {
        if first.is_none()
            && let Poll::Ready(out) = a.as_mut().poll(cx)
        {
            first = Some(out);
        }
        if second.is_none()
            && let Poll::Ready(out) = b.as_mut().poll(cx)
        {
            second = Some(out);
        }
        if first.is_some() && second.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    (
        first.expect("polled to the end"),
        second.expect("polled to the end"),
    )
}
