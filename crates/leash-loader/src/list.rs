//! One list task: every page of one kind (in one namespace), in order.
//!
//! # Invariants
//! 1. Complete or failed, never silently partial: the task returns `Ok` only
//!    after a page without a continue token; every other exit is an `Err`
//!    that the report carries for the kind.
//! 2. Exactly once: an object is handed to the stream only if its identity
//!    (uid, else namespace/name) was not handed out before by this task, so a
//!    list resumed or restarted after a 410 never repeats an object.
//! 3. A page counts only once it arrived whole and parsed; a failed attempt
//!    contributes nothing and is retried (see `fetch`). A page whose head
//!    (continue token) reads but whose items do not parse is fetched again
//!    with the same continue token, within the same retry budget, and must
//!    give the same continue token.
//! 4. Every wait (request, backoff, room in the object channel) is raced
//!    against the task's token.
//! 5. The next page is requested as soon as the previous one's continue
//!    token is read (from the page's head, before its items). Each page's
//!    items are parsed (once each) and built into objects by a task of the
//!    list's own scope, started when the page arrives, so that up to
//!    [`PARSING_AHEAD`] pages are parsed at once, on as many cores, while
//!    the next request is on its way; pages are still delivered one by one
//!    in the order they were listed (deduplication and the object channel
//!    see them in that order). The client's work, the server's and the
//!    consumer's overlap instead of adding up. The scope is joined before
//!    the task returns, on every path; a parse task holds no lock and waits
//!    on nothing, so the join takes at most one page's parse.
//! 6. The task's [`Tally`] is updated after each page under a short
//!    `std::sync::Mutex` (never held across an await), so a task dropped by
//!    cancellation still has its counts reported.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use http::StatusCode;
use leash_runtime::{Scope, ScopeHandle};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::fetch::{Fetcher, parse_status};
use crate::kind::ResolvedKind;
use crate::load::LoadTarget;
use crate::object::{ItemParser, LoadedObject, PageParser, RawPage, SeenSet, read_page_head};
use crate::report::Progress;

/// How many pages of one list are parsed at once (invariant 5): two, so
/// that one big kind keeps two cores busy; each costs one page of memory.
pub(crate) const PARSING_AHEAD: usize = 2;

/// What a task did so far.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tally {
    pub(crate) objects: u64,
    pub(crate) pages: u64,
    pub(crate) retries: u64,
    pub(crate) restarts: u32,
    pub(crate) across_snapshots: bool,
    pub(crate) started: Option<Instant>,
    pub(crate) finished: Option<Instant>,
}

/// What one task needs.
pub(crate) struct ListContext<'a> {
    pub(crate) fetcher: &'a Fetcher,
    pub(crate) target: &'a LoadTarget,
    /// `limit=...&labelSelector=...` (no continue).
    pub(crate) query: &'a str,
    pub(crate) consistent: bool,
    pub(crate) max_restarts: u32,
    pub(crate) tally: &'a Mutex<Tally>,
    pub(crate) progress: &'a Progress,
    /// Builds each item's value as its page is parsed.
    pub(crate) parser: Option<&'a Arc<dyn ItemParser>>,
}

/// A page received (its head read), whose items are being parsed into
/// objects by a task of the list's scope, with the continue token it was
/// fetched with (to fetch it again if its items do not parse).
struct Parsing {
    objects: JoinHandle<serde_json::Result<Vec<LoadedObject>>>,
    next: Option<String>,
    fetched_with: Option<String>,
}

impl Parsing {
    /// Start parsing `page`'s items in a task of `scope`.
    fn start(
        scope: &ScopeHandle,
        page: RawPage,
        fetched_with: Option<String>,
        kind: &Arc<ResolvedKind>,
        parser: Option<Arc<dyn ItemParser>>,
    ) -> Parsing {
        let next = page.next.clone();
        let kind = kind.clone();
        let objects = scope.spawn_with_output(async move {
            let parser = parser.as_deref().map(|parser| PageParser {
                parser,
                kind: &kind,
            });
            page.parse(parser).map(|index| index.into_objects(&kind))
        });
        Parsing {
            objects,
            next,
            fetched_with,
        }
    }
}

/// The answer to one page request.
enum PageAnswer {
    Page(RawPage),
    /// 410 Expired, with the fresh token if the server gave one.
    Expired(Option<String>),
}

impl ListContext<'_> {
    fn update(&self, f: impl FnOnce(&mut Tally)) {
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut tally);
    }

    /// List every page, handing objects to `pages` as they arrive.
    ///
    /// # Cancel safety
    /// Cancel-safe: objects already handed out stay handed out; the tally
    /// says how many.
    pub(crate) async fn run(
        &self,
        pages: mpsc::Sender<Vec<LoadedObject>>,
        token: &CancellationToken,
    ) -> Result<()> {
        self.update(|t| t.started = Some(Instant::now()));
        let result = self.pages(pages, token).await;
        self.update(|t| t.finished = Some(Instant::now()));
        result
    }

    async fn pages(
        &self,
        pages: mpsc::Sender<Vec<LoadedObject>>,
        token: &CancellationToken,
    ) -> Result<()> {
        // The parse tasks' scope (invariant 5), joined on every path.
        let parsers = Scope::with_parent_token(token);
        let result = self.pages_in(&parsers.handle(), pages, token).await;
        match (result, parsers.join().await) {
            (Err(err), _) => Err(err),
            (Ok(()), Err(err)) => Err(Error::Pool(format!("a page's parse failed: {err}"))),
            (Ok(()), Ok(())) => Ok(()),
        }
    }

    async fn pages_in(
        &self,
        parsers: &ScopeHandle,
        pages: mpsc::Sender<Vec<LoadedObject>>,
        token: &CancellationToken,
    ) -> Result<()> {
        let kind = &self.target.kind;
        let base = kind.list_path(self.target.namespace.as_deref());
        let operation = format!("list {}", self.target.label());
        let mut seen = SeenSet::default();
        let mut continue_token: Option<String> = None;
        // Pages received whose objects are not yet handed out, oldest first.
        let mut parsing: VecDeque<Parsing> = VecDeque::with_capacity(PARSING_AHEAD);
        loop {
            let fetch = self.fetch_page(&base, &operation, continue_token.as_deref(), token);
            // The oldest page is delivered once as many pages as may be
            // parsed at once are parsing; the others go on meanwhile.
            let oldest = if parsing.len() >= PARSING_AHEAD {
                parsing.pop_front()
            } else {
                None
            };
            let deliver = self.deliver(oldest, &mut seen, &pages, &base, &operation, token);
            // The request first: it is on its way while pages are parsed.
            let (fetched, delivered) = tokio::join!(fetch, deliver);
            delivered?;
            let (answer, retries) = fetched;
            self.progress.retried(retries);
            self.update(|t| t.retries += retries);
            match answer? {
                PageAnswer::Page(page) => {
                    self.update(|t| t.pages += 1);
                    self.progress.page();
                    let next = page.next.clone();
                    parsing.push_back(Parsing::start(
                        parsers,
                        page,
                        continue_token.clone(),
                        kind,
                        self.parser.cloned(),
                    ));
                    match next {
                        Some(next) if continue_token.as_deref() == Some(next.as_str()) => {
                            return Err(Error::InconsistentList {
                                kind: self.target.label(),
                                message: "the server returned the same continue token twice".into(),
                            });
                        }
                        Some(next) => continue_token = Some(next),
                        None => break,
                    }
                }
                PageAnswer::Expired(fresh) => {
                    tracing::debug!(kind = %self.target.label(), consistent = self.consistent, "list expired (410)");
                    match fresh {
                        Some(fresh) if !self.consistent => {
                            self.update(|t| t.across_snapshots = true);
                            continue_token = Some(fresh);
                        }
                        _ => {
                            let mut restarts = 0;
                            self.update(|t| {
                                t.restarts += 1;
                                restarts = t.restarts;
                                // Without a fresh token even the default mode
                                // restarts; objects already handed out came
                                // from the abandoned snapshot.
                                if !self.consistent {
                                    t.across_snapshots = true;
                                }
                            });
                            if restarts > self.max_restarts {
                                return Err(Error::ExpiredTooOften {
                                    kind: self.target.label(),
                                    restarts: restarts - 1,
                                });
                            }
                            continue_token = None;
                        }
                    }
                }
            }
        }
        // The last pages' objects, in order.
        while let Some(oldest) = parsing.pop_front() {
            self.deliver(Some(oldest), &mut seen, &pages, &base, &operation, token)
                .await?;
        }
        Ok(())
    }

    /// Wait for `page`'s objects (fetching the page again with the same
    /// continue token while its items do not parse, within the retry
    /// budget), drop those already handed out, and send the rest (waiting
    /// for room, raced against the token).
    async fn deliver(
        &self,
        page: Option<Parsing>,
        seen: &mut SeenSet,
        pages: &mpsc::Sender<Vec<LoadedObject>>,
        base: &str,
        operation: &str,
        token: &CancellationToken,
    ) -> Result<()> {
        let Some(Parsing {
            objects: parsed,
            next,
            fetched_with,
        }) = page
        else {
            return Ok(());
        };
        let mut parsed = match token.run_until_cancelled(parsed).await {
            None => return Err(Error::Cancelled),
            Some(Err(join)) => return Err(Error::Pool(format!("a page's parse failed: {join}"))),
            Some(Ok(parsed)) => parsed,
        };
        let mut attempts = 1;
        let mut objects = loop {
            let source = match parsed {
                Ok(objects) => break objects,
                Err(source) => source,
            };
            let malformed = |attempts| Error::MalformedResponse {
                operation: operation.to_owned(),
                attempts,
                source,
            };
            if attempts > self.fetcher.max_retries() {
                return Err(malformed(attempts));
            }
            attempts += 1;
            tracing::debug!(%operation, "a page's items did not parse; fetching it again");
            self.progress.retried(1);
            self.update(|t| t.retries += 1);
            let (again, retries) = self
                .fetch_page(base, operation, fetched_with.as_deref(), token)
                .await;
            self.progress.retried(retries);
            self.update(|t| t.retries += retries);
            let PageAnswer::Page(again) = again? else {
                return Err(malformed(attempts));
            };
            if again.next != next {
                return Err(Error::InconsistentList {
                    kind: self.target.label(),
                    message: "a page fetched again had another continue token".into(),
                });
            }
            // Rare: parsed here, in this task.
            let parser = self.parser.map(|p| PageParser {
                parser: &**p,
                kind: &self.target.kind,
            });
            parsed = again
                .parse(parser)
                .map(|index| index.into_objects(&self.target.kind));
        };
        objects.retain(|o| seen.insert(o));
        let count = objects.len() as u64;
        if objects.is_empty() {
            return Ok(());
        }
        match token.run_until_cancelled(pages.send(objects)).await {
            None => return Err(Error::Cancelled),
            Some(Err(_)) => return Err(Error::OutputClosed),
            Some(Ok(())) => {}
        }
        self.update(|t| t.objects += count);
        self.progress.objects(count);
        Ok(())
    }

    /// One page (with retries). Returns the retries made whatever the outcome.
    async fn fetch_page(
        &self,
        base: &str,
        operation: &str,
        continue_token: Option<&str>,
        token: &CancellationToken,
    ) -> (Result<PageAnswer>, u64) {
        let url = match continue_token {
            None => format!("{base}?{}", self.query),
            Some(c) => format!(
                "{base}?{}&continue={}",
                self.query,
                crate::options::percent_encode(c)
            ),
        };
        // A 410 is expected only when continuing; on a first page it is an error.
        let accepted: &[StatusCode] = if continue_token.is_some() {
            &[StatusCode::GONE]
        } else {
            &[]
        };
        let mut retries = 0;
        let answer = self
            .fetcher
            .get(
                &url,
                "application/json",
                operation,
                accepted,
                token,
                &mut retries,
                |answer| {
                    if answer.status == StatusCode::GONE {
                        Ok(PageAnswer::Expired(
                            parse_status(answer.status, &answer.body)
                                .metadata
                                .continue_token
                                .filter(|t| !t.is_empty()),
                        ))
                    } else {
                        read_page_head(&answer.body).map(PageAnswer::Page)
                    }
                },
            )
            .await;
        (answer, retries)
    }
}
