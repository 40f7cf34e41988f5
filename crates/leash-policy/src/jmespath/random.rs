//! `random(pattern)`: a random string matching a regular expression, like
//! Kyverno's use of `goregen`.
//!
//! Supported: literals and escapes, `.`, classes (`[a-z0-9_]`, `[^...]`,
//! `\d \w \s \D \W \S`), groups `(...)`/`(?:...)`, alternation `|`,
//! quantifiers `* + ? {n} {n,} {n,m}` (lazy forms too), anchors `^ $`
//! (ignored). Unbounded repeats stop at 10, as goregen's default. Anything
//! else (backreferences, lookaround, Unicode classes) is an error.
//!
//! # Invariants
//! 1. The one shared state is a process-wide `AtomicU64` counter (relaxed:
//!    only its distinctness matters) mixed into each call's seed with the
//!    process's random hasher keys and the time, so concurrent calls get
//!    different streams; each call owns its generator. No lock, no task.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use jmespath::{Rcvar, Runtime};

use super::ty::s;
use super::{arg_str, register, string};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "random", vec![s()], random);
}

fn random(x: &[Rcvar]) -> Result<Rcvar, String> {
    let pattern = arg_str(x, 0);
    if pattern.is_empty() {
        return Err("no pattern provided".to_string());
    }
    let node = Parser {
        chars: pattern.chars().collect(),
        pos: 0,
    }
    .parse()?;
    let mut rng = Rng::new();
    let mut out = String::new();
    generate(&node, &mut rng, &mut out);
    Ok(string(out))
}

const MAX_UNBOUNDED: u32 = 10;

#[derive(Debug)]
enum Node {
    Lit(char),
    /// Inclusive ranges to choose from (already resolved negations).
    Class(Vec<(char, char)>),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat(Box<Node>, u32, u32),
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

fn printable() -> Vec<(char, char)> {
    vec![(' ', '~')]
}

fn digits() -> Vec<(char, char)> {
    vec![('0', '9')]
}

fn word() -> Vec<(char, char)> {
    vec![('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')]
}

fn space() -> Vec<(char, char)> {
    vec![('\t', '\n'), ('\u{c}', '\r'), (' ', ' ')]
}

/// Printable ASCII minus the given ranges.
fn negate(set: &[(char, char)]) -> Vec<(char, char)> {
    let mut out = Vec::new();
    let mut start: Option<char> = None;
    for c in ' '..='~' {
        let inside = set.iter().any(|(a, b)| (*a..=*b).contains(&c));
        match (inside, start) {
            (false, None) => start = Some(c),
            (true, Some(s)) => {
                out.push((s, char::from_u32(c as u32 - 1).unwrap_or(s)));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, '~'));
    }
    out
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn err(&self, what: &str) -> String {
        format!("random: {what} at position {} in pattern", self.pos)
    }

    fn parse(mut self) -> Result<Node, String> {
        let n = self.alt()?;
        if self.pos < self.chars.len() {
            return Err(self.err("unexpected ')'"));
        }
        Ok(n)
    }

    fn alt(&mut self) -> Result<Node, String> {
        let mut branches = vec![self.concat()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            branches.push(self.concat()?);
        }
        Ok(if branches.len() == 1 {
            branches.remove(0)
        } else {
            Node::Alt(branches)
        })
    }

    fn concat(&mut self) -> Result<Node, String> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quantifier(atom)?;
            items.push(atom);
        }
        Ok(Node::Concat(items))
    }

    fn atom(&mut self) -> Result<Node, String> {
        let c = self.peek().ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(match c {
            '^' | '$' => Node::Concat(vec![]),
            '.' => Node::Class(printable()),
            '(' => {
                if self.chars[self.pos..].starts_with(&['?', ':']) {
                    self.pos += 2;
                } else if self.peek() == Some('?') {
                    return Err(self.err("unsupported group"));
                }
                let inner = self.alt()?;
                if self.peek() != Some(')') {
                    return Err(self.err("missing ')'"));
                }
                self.pos += 1;
                inner
            }
            '[' => self.class()?,
            '\\' => match self.escape()? {
                Esc::Char(c) => Node::Lit(c),
                Esc::Set(s) => Node::Class(s),
            },
            '*' | '+' | '?' | '{' => {
                return Err(self.err("missing argument to repetition operator"));
            }
            c => Node::Lit(c),
        })
    }

    fn escape(&mut self) -> Result<Esc, String> {
        let c = self.peek().ok_or_else(|| self.err("trailing backslash"))?;
        self.pos += 1;
        Ok(match c {
            'd' => Esc::Set(digits()),
            'D' => Esc::Set(negate(&digits())),
            'w' => Esc::Set(word()),
            'W' => Esc::Set(negate(&word())),
            's' => Esc::Set(space()),
            'S' => Esc::Set(negate(&space())),
            'n' => Esc::Char('\n'),
            't' => Esc::Char('\t'),
            'r' => Esc::Char('\r'),
            c if c.is_ascii_alphanumeric() => return Err(self.err("unsupported escape")),
            c => Esc::Char(c),
        })
    }

    fn class(&mut self) -> Result<Node, String> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut set = Vec::new();
        let mut first = true;
        loop {
            let c = self.peek().ok_or_else(|| self.err("missing ']'"))?;
            self.pos += 1;
            if c == ']' && !first {
                break;
            }
            first = false;
            let lo = match c {
                '\\' => match self.escape()? {
                    Esc::Char(c) => c,
                    Esc::Set(s) => {
                        set.extend(s);
                        continue;
                    }
                },
                c => c,
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|n| *n != ']') {
                self.pos += 1;
                let hi = self.peek().ok_or_else(|| self.err("missing ']'"))?;
                self.pos += 1;
                let hi = if hi == '\\' {
                    match self.escape()? {
                        Esc::Char(c) => c,
                        Esc::Set(_) => return Err(self.err("bad range")),
                    }
                } else {
                    hi
                };
                if hi < lo {
                    return Err(self.err("invalid character class range"));
                }
                set.push((lo, hi));
            } else {
                set.push((lo, lo));
            }
        }
        let set = if negated { negate(&set) } else { set };
        if set.is_empty() {
            return Err(self.err("empty character class"));
        }
        Ok(Node::Class(set))
    }

    fn number(&mut self) -> Option<u32> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        self.chars[start..self.pos]
            .iter()
            .collect::<String>()
            .parse()
            .ok()
    }

    fn quantifier(&mut self, atom: Node) -> Result<Node, String> {
        let (min, max) = match self.peek() {
            Some('*') => (0, MAX_UNBOUNDED),
            Some('+') => (1, MAX_UNBOUNDED),
            Some('?') => (0, 1),
            Some('{') => {
                let save = self.pos;
                self.pos += 1;
                let Some(min) = self.number() else {
                    // Not a repetition: `{` is a literal, as in RE2.
                    self.pos = save;
                    return Ok(atom);
                };
                let max = if self.peek() == Some(',') {
                    self.pos += 1;
                    self.number().unwrap_or(min.max(MAX_UNBOUNDED))
                } else {
                    min
                };
                if self.peek() != Some('}') || max < min || max > 1000 {
                    return Err(self.err("invalid repeat count"));
                }
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.pos += 1;
        if self.peek() == Some('?') {
            self.pos += 1;
        }
        Ok(Node::Repeat(Box::new(atom), min, max))
    }
}

enum Esc {
    Char(char),
    Set(Vec<(char, char)>),
}

fn generate(node: &Node, rng: &mut Rng, out: &mut String) {
    match node {
        Node::Lit(c) => out.push(*c),
        Node::Class(set) => {
            let total: u64 = set
                .iter()
                .map(|(a, b)| u64::from(*b as u32 - *a as u32) + 1)
                .sum();
            let mut pick = rng.below(total);
            for (a, b) in set {
                let size = u64::from(*b as u32 - *a as u32) + 1;
                if pick < size {
                    if let Some(c) = char::from_u32(*a as u32 + pick as u32) {
                        out.push(c);
                    }
                    return;
                }
                pick -= size;
            }
        }
        Node::Concat(items) => items.iter().for_each(|n| generate(n, rng, out)),
        Node::Alt(branches) => generate(
            &branches[rng.below(branches.len() as u64) as usize],
            rng,
            out,
        ),
        Node::Repeat(inner, min, max) => {
            let n = min + rng.below(u64::from(max - min) + 1) as u32;
            for _ in 0..n {
                generate(inner, rng, out);
            }
        }
    }
}

/// xorshift64*, seeded per call from the process's random hasher keys.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut h = RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(d.as_nanos());
        }
        Rng(h.finish() | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n <= 1 { 0 } else { self.next() % n }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};
    use super::super::{compile, search};
    use regex::Regex;

    #[test]
    fn matches_pattern() {
        let patterns = [
            "[a-z0-9]{6}",
            "^ab(c|d)+\\d{2,4}$",
            "[^a-z]{3}",
            "x?y*z+",
            "(?:foo|bar)-[A-F]{1,3}\\.\\w",
            "a{2,}",
            "\\s\\S\\D\\W.",
        ];
        for p in patterns {
            let re = Regex::new(&format!("^(?:{p})$")).unwrap();
            for _ in 0..50 {
                let e = compile(&format!("random('{}')", p.replace('\'', "\\'"))).unwrap();
                let v = search(&e, &serde_json::json!({})).unwrap();
                let s = v.as_str().unwrap();
                assert!(re.is_match(s), "{p} produced {s:?}");
            }
        }
    }

    #[test]
    fn errors() {
        let cases: &[Case] = &[
            ("random('')", "{}", Err("no pattern provided")),
            ("random('(a')", "{}", Err("missing ')'")),
            ("random('[a-')", "{}", Err("missing ']'")),
            ("random('*a')", "{}", Err("repetition")),
            ("random(`1`)", "{}", Err("string")),
            ("length(random('[a-z]{8}'))", "{}", Json("8")),
        ];
        run(cases);
    }
}
