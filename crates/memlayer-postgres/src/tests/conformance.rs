//! The backend contract: memlayer-store's conformance cases, each on a database of its own,
//! answered as the redb store answers them.

use std::sync::Arc;

use super::fresh_store;

memlayer_store::session_conformance!(Arc::new(fresh_store().await));
memlayer_store::eraser_conformance!(
    subject = Arc::new(fresh_store().await),
    // Through a store it serves: the eraser is what `Store::take_eraser` hands out.
    memlayer_store::Store::served_by(subject.clone())
        .take_eraser()
        .unwrap()
);
memlayer_store::model_conformance!(
    subject = Arc::new(fresh_store().await),
    memlayer_store::Store::served_by(subject.clone())
        .take_eraser()
        .unwrap()
);
