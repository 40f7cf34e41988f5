//! A subscriber's feed of a kind's changes ([`crate::hub`]): what the
//! watch has sent and the subscriber not yet taken, bounded by the kind's
//! objects, never by how far the subscriber lags.
//!
//! At most one change waits per object (its uid, else its namespace and
//! name): a later change of an object replaces the waiting one where it
//! stands, so the subscriber gets every object's latest state, in the
//! order the objects first changed; a `Listed` right after another is
//! merged into it (their `removed` joined). Both consumers (the scan and
//! generate) act on an object's latest state and queue by key, so nothing
//! they need is lost, and the watch never waits for a slow subscriber
//! (house rule 4: bounded, nothing dropped).
//!
//! # Invariants
//! 1. The state's mutex is held only for one push or one take, never
//!    across an await: [`Feed::push`] is called from the watch's
//!    synchronous callback (under the hub's map lock, which is always
//!    taken first), [`Taker::next`] takes the lock, then awaits the
//!    `Notify` with it released.
//! 2. Every waiting object is in `order` exactly once, and `changes` holds
//!    exactly the objects in `order`.
//! 3. The feed ends (`next` returns None once drained) when its [`Feed`]
//!    is dropped (the hub forgot the subscriber, or the hub is gone); a
//!    push after that cannot happen (the hub holds the only `Feed`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::watch::{Change, Seen};

/// Which object a change is of.
type Identity = (String, String, String);

fn identity(seen: &Seen) -> Identity {
    match seen.meta.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => (uid.to_string(), String::new(), String::new()),
        None => (
            String::new(),
            seen.namespace().to_string(),
            seen.name().to_string(),
        ),
    }
}

enum Slot {
    Object(Identity),
    Listed(Vec<Seen>),
}

#[derive(Default)]
struct State {
    order: VecDeque<Slot>,
    changes: HashMap<Identity, Change>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    ready: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Each section is one push or one take; a panic in one left the
        // state whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The hub's end of a feed: pushes changes.
pub(crate) struct Feed(Arc<Shared>);

/// The subscriber's end of a feed: takes them.
#[derive(Debug)]
pub(crate) struct Taker(Arc<Shared>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("waiting", &self.lock().order.len())
            .finish()
    }
}

/// A new feed's two ends.
pub(crate) fn feed() -> (Feed, Taker) {
    let shared = Arc::new(Shared::default());
    (Feed(shared.clone()), Taker(shared))
}

impl Feed {
    /// Adds `change` (see the module docs); never waits.
    pub(crate) fn push(&self, change: Change) {
        {
            let mut state = self.0.lock();
            match change {
                Change::Applied(ref seen) | Change::Deleted(ref seen) => {
                    let id = identity(seen);
                    if state.changes.insert(id.clone(), change).is_none() {
                        state.order.push_back(Slot::Object(id));
                    }
                }
                Change::Listed { removed } => match state.order.back_mut() {
                    Some(Slot::Listed(waiting)) => waiting.extend(removed),
                    _ => state.order.push_back(Slot::Listed(removed)),
                },
            }
        }
        self.0.ready.notify_one();
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.ready.notify_one();
    }
}

impl Taker {
    /// The next change, once there is one; None when the feed has ended
    /// and every change was taken.
    pub(crate) async fn next(&mut self) -> Option<Change> {
        loop {
            {
                let mut state = self.0.lock();
                if let Some(slot) = state.order.pop_front() {
                    return Some(match slot {
                        Slot::Object(id) => state
                            .changes
                            .remove(&id)
                            .expect("invariant 2: a waiting object has its change"),
                        Slot::Listed(removed) => Change::Listed { removed },
                    });
                }
                if state.closed {
                    return None;
                }
            }
            // A push between the unlock and here left a permit.
            self.0.ready.notified().await;
        }
    }

    /// How many changes wait (objects and list completions).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.0.lock().order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Seen;

    fn seen(name: &str, uid: &str, rv: &str) -> Seen {
        let json = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "ns", "uid": uid, "resourceVersion": rv}});
        Seen::from_stored(crate::cache::Stored::encode(&json))
    }

    fn describe(c: &Change) -> String {
        match c {
            Change::Applied(s) => format!(
                "applied {} {}",
                s.name(),
                s.meta.resource_version.as_deref().unwrap_or("")
            ),
            Change::Deleted(s) => format!("deleted {}", s.name()),
            Change::Listed { removed } => format!(
                "listed -{}",
                removed
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// However far the subscriber lags, one change waits per object (its
    /// latest, where the object first changed) and adjacent list
    /// completions are one: the feed stays as large as the kind.
    #[tokio::test]
    async fn a_lagging_subscriber_gets_each_objects_latest_state_in_bounded_memory() {
        let (feed, mut taker) = feed();
        for rv in 0..10_000 {
            for name in ["a", "b", "c"] {
                feed.push(Change::Applied(seen(
                    name,
                    &format!("uid-{name}"),
                    &rv.to_string(),
                )));
            }
        }
        feed.push(Change::Deleted(seen("b", "uid-b", "10000")));
        feed.push(Change::Listed {
            removed: vec![seen("x", "uid-x", "1")],
        });
        feed.push(Change::Listed {
            removed: vec![seen("y", "uid-y", "1")],
        });
        // A new object under an old name is another object.
        feed.push(Change::Applied(seen("b", "uid-b2", "1")));
        assert_eq!(taker.waiting(), 5);
        drop(feed);
        let mut got = Vec::new();
        while let Some(c) = taker.next().await {
            got.push(describe(&c));
        }
        assert_eq!(
            got,
            [
                "applied a 9999",
                "deleted b",
                "applied c 9999",
                "listed -x,y",
                "applied b 1"
            ]
        );
    }

    /// The subscriber waits for a change and ends when the hub drops the
    /// feed, after taking what waits.
    #[tokio::test]
    async fn the_subscriber_waits_for_changes_and_ends_with_the_feed() {
        let (feed, mut taker) = feed();
        let push = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            feed.push(Change::Applied(seen("a", "uid-a", "1")));
        };
        let take = tokio::time::timeout(std::time::Duration::from_secs(10), taker.next());
        let ((), first) = tokio::join!(push, take);
        assert_eq!(
            describe(&first.expect("the change arrives").unwrap()),
            "applied a 1"
        );
        feed.push(Change::Deleted(seen("a", "uid-a", "2")));
        drop(feed);
        assert_eq!(describe(&taker.next().await.unwrap()), "deleted a");
        assert!(taker.next().await.is_none());
    }
}
