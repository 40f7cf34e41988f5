//! Kubernetes' URL library.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A parsed URL (Kubernetes' `url` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

impl Url {
    /// Parses an absolute URL or an absolute path, as Go's
    /// `url.ParseRequestURI`.
    pub(crate) fn parse(text: &str) -> Option<Url> {
        if text.chars().any(|c| c.is_ascii_control() || c == ' ') {
            return None;
        }
        let text = text.split('#').next().unwrap_or("");
        let (rest, query) = match text.split_once('?') {
            Some((r, q)) => (r, q.to_string()),
            None => (text, String::new()),
        };
        if rest.starts_with('/') {
            return Some(Url {
                scheme: String::new(),
                host: String::new(),
                path: rest.to_string(),
                query,
            });
        }
        let (scheme, after) = rest.split_once(':')?;
        let mut chars = scheme.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return None;
        }
        let (host, path) = match after.strip_prefix("//") {
            Some(a) => match a.find('/') {
                Some(i) => (a[..i].to_string(), a[i..].to_string()),
                None => (a.to_string(), String::new()),
            },
            None if after.starts_with('/') => (String::new(), after.to_string()),
            None => return None,
        };
        let host = host
            .rsplit_once('@')
            .map(|(_, h)| h.to_string())
            .unwrap_or(host);
        Some(Url {
            scheme: scheme.to_string(),
            host,
            path,
            query,
        })
    }

    fn hostname_port(&self) -> (&str, &str) {
        let h = self.host.as_str();
        if let Some(rest) = h.strip_prefix('[') {
            return match rest.split_once(']') {
                Some((ip, port)) => (ip, port.strip_prefix(':').unwrap_or("")),
                None => (rest, ""),
            };
        }
        match h.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => (name, port),
            _ => (h, ""),
        }
    }
}

overload!(url_new, |args| {
    let t = str_arg(args, 0, "url")?;
    Url::parse(t).map(opaque).ok_or_else(|| {
        ferr(
            "url",
            format!("URL parse error during conversion from string: {t}"),
        )
    })
});
overload!(url_is, |args| Ok(Value::Bool(
    Url::parse(str_arg(args, 0, "isURL")?).is_some()
)));

pub(super) fn this_url<'a>(args: &'a [Value], function: &str) -> Result<&'a Url, ExecutionError> {
    as_opaque::<Url>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not a URL"))
}

overload!(url_scheme, |args| Ok(s(
    &this_url(args, "getScheme")?.scheme
)));
overload!(url_host, |args| Ok(s(&this_url(args, "getHost")?.host)));
overload!(url_hostname, |args| Ok(s(this_url(args, "getHostname")?
    .hostname_port()
    .0)));
overload!(url_port, |args| Ok(s(this_url(args, "getPort")?
    .hostname_port()
    .1)));
overload!(url_path, |args| Ok(s(
    &this_url(args, "getEscapedPath")?.path
)));
overload!(url_query, |args| {
    let u = this_url(args, "getQuery")?;
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for pair in u.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match out.iter_mut().find(|(key, _)| key == k) {
            Some((_, vals)) => vals.push(s(v)),
            None => out.push((k.to_string(), vec![s(v)])),
        }
    }
    Ok(Value::Map(Map {
        map: Arc::new(
            out.into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k)), Value::List(Arc::new(v))))
                .collect(),
        ),
    }))
});
