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
//!    give the same continue token. If that token expired meanwhile (410),
//!    the list goes on as after any 410: from the 410's fresh token (unless
//!    `consistent`), else from the start (a restart); the pages received
//!    after that page are dropped unseen, to be listed again.
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
use crate::fetch::{Fetcher, ParseResult, StatusBody};
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

/// What became of a page handed to `deliver`.
enum Delivered {
    /// Its new objects were sent (or there was no page, or nothing new).
    Sent,
    /// It was fetched again and answered 410 Expired (with the fresh token
    /// if the server gave one): nothing was sent.
    Expired(Option<String>),
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
        // The last page was received (it had no continue token): only the
        // pages still parsing remain to be delivered.
        let mut listed = false;
        // Pages received whose objects are not yet handed out, oldest first.
        let mut parsing: VecDeque<Parsing> = VecDeque::with_capacity(PARSING_AHEAD);
        loop {
            // The oldest page is delivered once as many pages as may be
            // parsed at once are parsing (the others go on meanwhile), or
            // one by one once every page was received.
            let oldest = if parsing.len() >= PARSING_AHEAD || listed {
                parsing.pop_front()
            } else {
                None
            };
            if listed && oldest.is_none() {
                return Ok(());
            }
            let fetch = async {
                if listed {
                    None
                } else {
                    Some(
                        self.fetch_page(&base, &operation, continue_token.as_deref(), token)
                            .await,
                    )
                }
            };
            let deliver = self.deliver(oldest, &mut seen, &pages, &base, &operation, token);
            // The request first: it is on its way while pages are parsed.
            let (fetched, delivered) = tokio::join!(fetch, deliver);
            let answer = fetched.map(|(answer, retries)| {
                self.progress.retried(retries);
                self.update(|t| t.retries += retries);
                answer
            });
            if let Delivered::Expired(fresh) = delivered? {
                // The page delivered had to be fetched again and its continue
                // token had expired meanwhile: the pages after it (parsing, or
                // the answer just fetched) are read again from its position
                // (or from the start), so they are dropped unseen; nothing
                // handed out is handed out again (invariant 2).
                for later in parsing.drain(..) {
                    later.objects.abort();
                }
                continue_token = self.expired(fresh)?;
                listed = false;
                continue;
            }
            let Some(answer) = answer else {
                continue;
            };
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
                        None => listed = true,
                    }
                }
                PageAnswer::Expired(fresh) => continue_token = self.expired(fresh)?,
            }
        }
    }

    /// After a 410 Expired answer to a request with a continue token: the
    /// continue token to list on with (the server's fresh token, unless
    /// `consistent`), or `None` to restart the list, counted against
    /// `max_restarts`.
    fn expired(&self, fresh: Option<String>) -> Result<Option<String>> {
        tracing::debug!(kind = %self.target.label(), consistent = self.consistent, "list expired (410)");
        match fresh {
            Some(fresh) if !self.consistent => {
                self.update(|t| t.across_snapshots = true);
                Ok(Some(fresh))
            }
            _ => {
                let mut restarts = 0;
                self.update(|t| {
                    t.restarts += 1;
                    restarts = t.restarts;
                    // Without a fresh token even the default mode restarts;
                    // objects already handed out came from the abandoned
                    // snapshot.
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
                Ok(None)
            }
        }
    }

    /// Wait for `page`'s objects (fetching the page again with the same
    /// continue token while its items do not parse, within the retry
    /// budget), drop those already handed out, and send the rest (waiting
    /// for room, raced against the token). If the page had to be fetched
    /// again and its continue token expired meanwhile, nothing is sent and
    /// the 410's fresh token (if any) is returned: the caller lists on from
    /// there (or restarts), as after any other 410.
    async fn deliver(
        &self,
        page: Option<Parsing>,
        seen: &mut SeenSet,
        pages: &mpsc::Sender<Vec<LoadedObject>>,
        base: &str,
        operation: &str,
        token: &CancellationToken,
    ) -> Result<Delivered> {
        let Some(Parsing {
            objects: parsed,
            next,
            fetched_with,
        }) = page
        else {
            return Ok(Delivered::Sent);
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
            if attempts > self.fetcher.max_retries() {
                return Err(Error::MalformedResponse {
                    operation: operation.to_owned(),
                    attempts,
                    source,
                });
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
            let again = match again? {
                PageAnswer::Page(again) => again,
                PageAnswer::Expired(fresh) => return Ok(Delivered::Expired(fresh)),
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
            return Ok(Delivered::Sent);
        }
        match token.run_until_cancelled(pages.send(objects)).await {
            None => return Err(Error::Cancelled),
            Some(Err(_)) => return Err(Error::OutputClosed),
            Some(Ok(())) => {}
        }
        self.update(|t| t.objects += count);
        self.progress.objects(count);
        Ok(Delivered::Sent)
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
                        expired_answer(&answer.body)
                    } else {
                        read_page_head(&answer.body).map(PageAnswer::Page)
                    }
                },
            )
            .await;
        (answer, retries)
    }
}

/// A 410 answer to a page request: expired, with the Status's fresh continue
/// token if it has one. A body that is JSON cut short (a Status truncated on
/// its way) is an error, so that the request is made again (within the
/// retry budget) rather than the list restarted for want of the token it
/// lost; any other body (not JSON, or a Status without a token) means no
/// fresh token.
fn expired_answer(body: &[u8]) -> ParseResult<PageAnswer> {
    match serde_json::from_slice::<StatusBody>(body) {
        Ok(status) => Ok(PageAnswer::Expired(
            status.metadata.continue_token.filter(|t| !t.is_empty()),
        )),
        Err(cut) if cut.is_eof() && !body.trim_ascii().is_empty() => Err(cut),
        Err(_) => Ok(PageAnswer::Expired(None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(answer: ParseResult<PageAnswer>) -> Option<String> {
        match answer {
            Ok(PageAnswer::Expired(fresh)) => fresh,
            Ok(PageAnswer::Page(_)) => panic!("a 410 read as a page"),
            Err(err) => panic!("not an expiry: {err}"),
        }
    }

    #[test]
    fn an_expired_status_gives_its_fresh_token_or_none() {
        let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"abc"},"status":"Failure","reason":"Expired","code":410}"#;
        assert_eq!(fresh(expired_answer(status)).as_deref(), Some("abc"));
        let no_token = br#"{"kind":"Status","metadata":{},"reason":"Expired","code":410}"#;
        assert_eq!(fresh(expired_answer(no_token)), None);
        let empty_token = br#"{"kind":"Status","metadata":{"continue":""},"code":410}"#;
        assert_eq!(fresh(expired_answer(empty_token)), None);
        // Not JSON at all (a proxy's page), or no body: expired, no token.
        assert_eq!(fresh(expired_answer(b"410 Gone\n")), None);
        assert_eq!(fresh(expired_answer(b"")), None);
    }

    /// A Status cut to its first half (`leash sandbox --truncate-rate`)
    /// would lose its fresh token: it is fetched again, not read as an
    /// expiry without a token (which restarts the kind).
    #[test]
    fn a_truncated_expired_status_is_fetched_again() {
        let status = br#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"abc"},"status":"Failure","reason":"Expired","code":410}"#;
        for cut in [1, 20, status.len() / 2, status.len() - 1] {
            assert!(
                expired_answer(&status[..cut]).is_err(),
                "cut at {cut} read as an expiry"
            );
        }
    }
}
