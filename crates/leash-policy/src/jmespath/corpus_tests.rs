//! Every `{{ ... }}` variable of Kyverno's policy library must compile.
//!
//! Variables are found the way Kyverno finds them: the regular expression of
//! `pkg/engine/variables/regex`, innermost first; each one found is replaced
//! by a plain word so that an outer variable built around it (for example
//! `regex_match('...', '{{ request.object.spec.x || '''' }}')`) is then
//! seen and compiled too. No `{{-` escaping exists in Kyverno.

use std::path::Path;

use regex::Regex;
use serde_json::Value;

use crate::vpol::tests::{files_under, is_yaml};

const CORPUS: &str = "/work/shared/kyverno-policies";

fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                out.push(k);
                strings(x, out);
            }
        }
        _ => {}
    }
}

/// The variables in `text`, innermost first, braces and spaces removed.
fn variables(text: &str, re: &Regex) -> Vec<String> {
    let mut found = Vec::new();
    let mut s = text.to_string();
    for _ in 0..32 {
        let Some(c) = re.captures(&s) else { break };
        let Some(m) = c.get(2) else { break };
        let (range, var) = (m.range(), m.as_str().to_string());
        found.push(var[2..var.len() - 2].trim().to_string());
        s.replace_range(range, "placeholder");
    }
    found
}

#[test]
fn corpus_variables_compile() {
    let root = Path::new(CORPUS);
    if !root.is_dir() {
        eprintln!("{CORPUS} not present; skipping");
        return;
    }
    let re = Regex::new(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})")
        .expect("Kyverno's variable pattern");
    let mut files = files_under(root, is_yaml);
    files.sort();
    let mut exprs = std::collections::BTreeMap::<String, String>::new();
    let mut unparsed = 0;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        if !text.contains("{{") {
            continue;
        }
        let docs: Vec<Value> = match serde_saphyr::from_multiple(&text) {
            Ok(d) => d,
            Err(_) => {
                unparsed += 1;
                continue;
            }
        };
        for doc in &docs {
            let mut all = Vec::new();
            strings(doc, &mut all);
            for s in all {
                for v in variables(s, &re) {
                    exprs.entry(v).or_insert_with(|| file.display().to_string());
                }
            }
        }
    }
    let mut failures = Vec::new();
    let (mut ran_ok, mut ran_err) = (0, 0);
    for (expr, file) in &exprs {
        match super::compile(expr) {
            Ok(e) => match super::search(&e, &serde_json::json!({})) {
                Ok(_) => ran_ok += 1,
                Err(_) => ran_err += 1,
            },
            Err(err) => failures.push(format!("{expr}\n    in {file}\n    {err}")),
        }
    }
    eprintln!(
        "{} files, {} unparsable YAML, {} distinct variables, {} evaluate on {{}} ({} with an error)",
        files.len(),
        unparsed,
        exprs.len(),
        ran_ok + ran_err,
        ran_err
    );
    assert!(exprs.len() > 50, "too few variables found: {}", exprs.len());
    assert!(
        failures.is_empty(),
        "{} variables fail to compile:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn nested_variables_are_found_innermost_first() {
    let re = Regex::new(r"(^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})").expect("pattern");
    let got = variables(
        "{{ regex_match('^a$', '{{ request.object.x || '''' }}') }} \\{{ skip }}",
        &re,
    );
    assert_eq!(
        got,
        vec![
            "request.object.x || ''''".to_string(),
            "regex_match('^a$', 'placeholder')".to_string()
        ]
    );
}
