//! What a load reads and how.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::resolve::KindSelection;
use crate::retry::RetryPolicy;

/// The namespaces a load reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NamespaceSelection {
    /// The client's default namespace (the kubeconfig context's namespace,
    /// or `default`), as kubectl does without `-n`/`-A`.
    #[default]
    Default,
    /// Every namespace (`-A`): one list per kind.
    All,
    /// These namespaces: one list per (kind, namespace) for namespaced kinds.
    Only(Vec<String>),
}

/// Options of a load. `Default` is the CLI's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Which kinds.
    pub kinds: KindSelection,
    /// Which namespaces (ignored for cluster-scoped kinds).
    pub namespaces: NamespaceSelection,
    /// `labelSelector` sent with every list.
    pub label_selector: Option<String>,
    /// `fieldSelector` sent with every list.
    pub field_selector: Option<String>,
    /// List requests in flight at once (1..=32); the pool runs twice as many
    /// list tasks so that kinds waiting to retry leave their slot to others.
    pub concurrency: usize,
    /// Objects per page (`limit`).
    pub page_size: u32,
    /// Retries per request.
    pub retry: RetryPolicy,
    /// On 410 Expired, restart the kind from a new snapshot instead of
    /// continuing with the server's fresh token. Objects already handed out
    /// from the abandoned snapshot are not handed out again (nor retracted):
    /// the pages read after a restart all come from one snapshot, but an
    /// object deleted between the snapshots may still have been handed out.
    pub consistent: bool,
    /// Restarts per kind before it fails (410s in consistent mode, or
    /// expiries without a fresh token).
    pub max_restarts: u32,
    /// Cancel the whole load at the first failed kind.
    pub fail_fast: bool,
    /// One deadline for the whole load.
    pub timeout: Option<Duration>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            kinds: KindSelection::default(),
            namespaces: NamespaceSelection::Default,
            label_selector: None,
            field_selector: None,
            concurrency: 4,
            page_size: 500,
            retry: RetryPolicy::default(),
            consistent: false,
            max_restarts: 3,
            fail_fast: true,
            timeout: None,
        }
    }
}

/// The largest `concurrency`.
pub const MAX_CONCURRENCY: usize = 32;

impl LoadOptions {
    /// Check the values.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_CONCURRENCY).contains(&self.concurrency) {
            return Err(Error::InvalidOptions(format!(
                "concurrency must be between 1 and {MAX_CONCURRENCY}, not {}",
                self.concurrency
            )));
        }
        if self.page_size == 0 {
            return Err(Error::InvalidOptions("page size must be at least 1".into()));
        }
        if let KindSelection::Names(names) = &self.kinds
            && names.is_empty()
        {
            return Err(Error::InvalidOptions("no kinds given".into()));
        }
        if let NamespaceSelection::Only(namespaces) = &self.namespaces {
            if namespaces.is_empty() {
                return Err(Error::InvalidOptions("no namespaces given".into()));
            }
            if let Some(bad) = namespaces.iter().find(|n| !is_dns_label(n)) {
                return Err(Error::InvalidOptions(format!(
                    "invalid namespace name \"{bad}\""
                )));
            }
        }
        Ok(())
    }

    /// The query of a list request (without `continue`).
    pub(crate) fn list_query(&self) -> String {
        let mut query = format!("limit={}", self.page_size);
        for (key, value) in [
            ("labelSelector", &self.label_selector),
            ("fieldSelector", &self.field_selector),
        ] {
            if let Some(value) = value {
                query.push('&');
                query.push_str(key);
                query.push('=');
                query.push_str(&percent_encode(value));
            }
        }
        query
    }
}

/// RFC 1123 label: what namespace names must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Percent-encode a query value (everything but RFC 3986 unreserved characters).
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_cli_defaults_and_valid() {
        let o = LoadOptions::default();
        assert_eq!(
            (o.concurrency, o.page_size, o.retry.max_retries),
            (4, 500, 5)
        );
        o.validate().unwrap();
    }

    #[test]
    fn bad_values_are_rejected() {
        for concurrency in [0, 33] {
            let o = LoadOptions {
                concurrency,
                ..LoadOptions::default()
            };
            assert!(
                o.validate()
                    .unwrap_err()
                    .to_string()
                    .contains("concurrency")
            );
        }
        let o = LoadOptions {
            page_size: 0,
            ..LoadOptions::default()
        };
        assert!(o.validate().is_err());
        let o = LoadOptions {
            namespaces: NamespaceSelection::Only(vec!["Bad_NS".into()]),
            ..LoadOptions::default()
        };
        assert!(o.validate().unwrap_err().to_string().contains("Bad_NS"));
        let o = LoadOptions {
            kinds: KindSelection::Names(vec![]),
            ..LoadOptions::default()
        };
        assert!(o.validate().is_err());
    }

    #[test]
    fn selectors_are_encoded() {
        let o = LoadOptions {
            page_size: 100,
            label_selector: Some("app in (a,b),tier!=db".into()),
            field_selector: Some("metadata.name=x".into()),
            ..LoadOptions::default()
        };
        assert_eq!(
            o.list_query(),
            "limit=100&labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb&fieldSelector=metadata.name%3Dx"
        );
    }
}
