//! Kyverno's wildcards: `*` matches any run of characters (including none),
//! `?` exactly one character. Everything else is literal.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return pattern == text;
    }
    if pattern == "*" {
        return true;
    }
    // On the hot path (kinds, images, labels) both sides are ASCII, where
    // a byte is a character; otherwise `?` must consume a whole character.
    if pattern.is_ascii() && text.is_ascii() {
        glob(pattern.as_bytes(), text.as_bytes(), b'*', b'?')
    } else {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        glob(&p, &t, '*', '?')
    }
}

/// Iterative glob matching with one backtrack point (linear in practice).
fn glob<T: Copy + PartialEq>(p: &[T], t: &[T], any_run: T, any_one: T) -> bool {
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == any_one || (p[pi] != any_run && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == any_run {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == any_run {
        pi += 1;
    }
    pi == p.len()
}

/// Whether `s` contains a wildcard character.
pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?'])
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn wildcard_table() {
        for (pattern, text, want) in [
            ("*", "", true),
            ("*", "anything", true),
            ("?*", "", false),
            ("?*", "a", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*:latest", "nginx:latest", true),
            ("*:latest", "nginx:1.2", false),
            ("kube-*", "kube-system", true),
            ("*-system", "kube-system", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("exact", "exact", true),
            ("exact", "exacT", false),
            ("registry.io/*", "registry.io/app:1", true),
            ("*/*", "a/b", true),
            ("?", "é", true),
            ("a?c", "aéc", true),
            ("a*é", "abcé", true),
            ("é*", "e", false),
        ] {
            assert_eq!(matches(pattern, text), want, "{pattern:?} vs {text:?}");
        }
    }
}
