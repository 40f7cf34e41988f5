//! `leash jp`: Kyverno's JMESPath, as `kyverno jp` offers it: `query`
//! evaluates expressions on a document with every function a policy can
//! call, `parse` prints an expression's syntax tree, `function` lists and
//! documents the functions.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use serde_json::Value;

use crate::cli_error::usage;

/// `leash jp`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:
  echo '{\"name\": \"nginx:latest\"}' | leash jp query \"ends_with(name, ':latest')\"
  leash jp query -i pod.yaml \"spec.containers[].image\"
  leash jp parse \"request.object.metadata.labels.app\"
  leash jp function time_add")]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Jp,
}

#[derive(Debug, Subcommand)]
enum Jp {
    /// Evaluate JMESPath expressions (with Kyverno's functions) on a JSON or YAML document.
    Query {
        /// The document (JSON or YAML); standard input when not given.
        #[arg(short = 'i', long = "input", value_name = "FILE")]
        input: Option<PathBuf>,
        /// Files holding expressions, one per file (repeatable).
        #[arg(short = 'q', long = "query", value_name = "FILE")]
        query_files: Vec<PathBuf>,
        /// Print each result on one line.
        #[arg(short = 'c', long)]
        compact: bool,
        /// Print a string result without quotes.
        #[arg(short = 'u', long)]
        unquoted: bool,
        /// The expressions, evaluated in order.
        expressions: Vec<String>,
    },
    /// Print the syntax tree of JMESPath expressions.
    Parse {
        /// Files holding expressions, one per file (repeatable).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        files: Vec<PathBuf>,
        /// The expressions.
        expressions: Vec<String>,
    },
    /// List the functions a policy's JMESPath can call, with their arguments and what they do.
    Function {
        /// Only these functions (all when none are given).
        names: Vec<String>,
    },
}

/// Runs `leash jp`.
pub(crate) fn run(args: Args) -> Result<()> {
    match args.command {
        Jp::Query {
            input,
            query_files,
            compact,
            unquoted,
            expressions,
        } => {
            // With a document file and no expression, the expression comes
            // on standard input (`cat query | kyverno jp query -i doc.yaml`).
            let from_stdin = input.is_some() && expressions.is_empty() && query_files.is_empty();
            let expressions = if from_stdin {
                let mut text = String::new();
                std::io::stdin()
                    .read_to_string(&mut text)
                    .context("reading the expression from standard input")?;
                vec![text.trim().to_string()]
            } else {
                gather(expressions, &query_files)?
            };
            let text = match &input {
                Some(path) => std::fs::read_to_string(path)
                    .with_context(|| format!("reading --input {}", path.display()))?,
                None => {
                    let mut text = String::new();
                    std::io::stdin()
                        .read_to_string(&mut text)
                        .context("reading the document from standard input")?;
                    text
                }
            };
            let name = input
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "standard input".into());
            // `0644` is 420, as Kyverno's CLI reads YAML (1.1).
            let options = serde_saphyr::options! { legacy_octal_numbers: true };
            let data: Value = serde_saphyr::from_str_with_options(&text, options)
                .map_err(|e| usage(format!("{name} is not a JSON or YAML document: {e}")))?;
            for expr in &expressions {
                println!("# {expr}\n{}", query(expr, &data, compact, unquoted)?);
            }
            Ok(())
        }
        Jp::Parse { files, expressions } => {
            for expr in gather(expressions, &files)? {
                let compiled = leash_policy::jmespath::compile(&expr)
                    .map_err(|e| usage(format!("{expr:?} does not parse: {e}")))?;
                println!("# {expr}\n{:#?}", compiled.as_ast());
            }
            Ok(())
        }
        Jp::Function { names } => {
            let unknown: Vec<&String> = names
                .iter()
                .filter(|n| {
                    !FUNCTIONS.iter().any(|f| f.name == n.as_str())
                        && !BUILTINS.contains(&n.as_str())
                })
                .collect();
            if !unknown.is_empty() {
                return Err(usage(format!(
                    "no such function: {} (`leash jp function` lists them)",
                    unknown
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let wanted = |n: &str| names.is_empty() || names.iter().any(|w| w == n);
            // As `kyverno jp function` prints them, with an example.
            for f in FUNCTIONS.iter().filter(|f| wanted(f.name)) {
                println!("Name: {}", f.name);
                println!("  Signature: {}({}) {}", f.name, f.arguments, f.returns);
                println!("  Note:      {}", f.description);
                if let Some((expr, result)) = f.example {
                    println!("  Example:   {expr} => {result}");
                }
                println!();
            }
            let builtins: Vec<&str> = BUILTINS.iter().copied().filter(|n| wanted(n)).collect();
            if !builtins.is_empty() {
                println!(
                    "JMESPath's own functions (https://jmespath.org/specification.html#built-in-functions):\n  {}",
                    builtins.join(", ")
                );
            }
            Ok(())
        }
    }
}

/// The expressions given inline, then those of the files.
fn gather(mut expressions: Vec<String>, files: &[PathBuf]) -> Result<Vec<String>> {
    for path in files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the expression file {}", path.display()))?;
        expressions.push(text.trim().to_string());
    }
    if expressions.is_empty() {
        return Err(usage("no expression given (as an argument, or a file)"));
    }
    Ok(expressions)
}

/// One expression's result, printed as `kyverno jp query` prints it (Go's
/// JSON: `<`, `>` and `&` escaped in strings).
fn query(expr: &str, data: &Value, compact: bool, unquoted: bool) -> Result<String> {
    let compiled = leash_policy::jmespath::compile(expr)
        .map_err(|e| usage(format!("{expr:?} does not parse: {e}")))?;
    let result = leash_policy::jmespath::search(&compiled, data)
        .map_err(|e| anyhow::anyhow!("{expr:?}: {e}"))?;
    let json = |text: String| {
        text.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    };
    Ok(match (&result, unquoted) {
        (Value::String(s), true) => s.clone(),
        _ if compact => json(result.to_string()),
        _ => json(serde_json::to_string_pretty(&result)?),
    })
}

/// A function of Kyverno's, documented.
struct Function {
    name: &'static str,
    arguments: &'static str,
    returns: &'static str,
    description: &'static str,
    /// An expression on `{}` and its result (checked by a test).
    example: Option<(&'static str, &'static str)>,
}

const fn f(
    name: &'static str,
    arguments: &'static str,
    returns: &'static str,
    description: &'static str,
    example: Option<(&'static str, &'static str)>,
) -> Function {
    Function {
        name,
        arguments,
        returns,
        description,
        example,
    }
}

/// JMESPath's built-in functions (Kyverno's `sum` and `to_string` replace
/// JMESPath's, and are listed with Kyverno's).
const BUILTINS: &[&str] = &[
    "abs",
    "avg",
    "ceil",
    "contains",
    "ends_with",
    "floor",
    "join",
    "keys",
    "length",
    "map",
    "max",
    "max_by",
    "merge",
    "min",
    "min_by",
    "not_null",
    "reverse",
    "sort",
    "sort_by",
    "starts_with",
    "to_array",
    "to_number",
    "type",
    "values",
];

/// Kyverno's functions, as leash implements them.
const FUNCTIONS: &[Function] = &[
    f(
        "add",
        "number|quantity|duration, number|quantity|duration",
        "number|string",
        "Adds two numbers, Kubernetes quantities or Go durations (a quantity or duration keeps its unit).",
        Some(("add(`1`, `2`)", "3")),
    ),
    f(
        "subtract",
        "number|quantity|duration, number|quantity|duration",
        "number|string",
        "Subtracts the second number, quantity or duration from the first.",
        Some(("subtract('1Gi', '512Mi')", "\"512Mi\"")),
    ),
    f(
        "multiply",
        "number|quantity|duration, number",
        "number|string",
        "Multiplies a number, quantity or duration by a number.",
        Some(("multiply('250m', `4`)", "\"1\"")),
    ),
    f(
        "divide",
        "number|quantity|duration, number|quantity|duration",
        "number|string",
        "Divides the first by the second; two quantities or durations give a number.",
        Some(("divide('1Gi', '256Mi')", "4")),
    ),
    f(
        "modulo",
        "number|quantity|duration, number|quantity|duration",
        "number|string",
        "The remainder of dividing the first by the second.",
        Some(("modulo(`7`, `3`)", "1")),
    ),
    f(
        "sum",
        "array[number|quantity|duration]",
        "number|string",
        "Adds every element of a list of numbers, quantities or durations.",
        Some(("sum(['1Gi', '1Gi'])", "\"2Gi\"")),
    ),
    f(
        "round",
        "number, number",
        "number",
        "Rounds the first number to the number of decimal places the second gives.",
        Some(("round(`3.14159`, `2`)", "3.14")),
    ),
    f(
        "compare",
        "string, string",
        "number",
        "Compares two strings: -1, 0 or 1, as Go's strings.Compare.",
        Some(("compare('a', 'b')", "-1")),
    ),
    f(
        "equal_fold",
        "string, string",
        "boolean",
        "Whether two strings are equal ignoring case (Unicode case folding).",
        Some(("equal_fold('Go', 'GO')", "true")),
    ),
    f(
        "replace",
        "string, string, string, number",
        "string",
        "Replaces the first N occurrences of the second string in the first with the third (N < 0: all).",
        Some(("replace('a-b-c', '-', '+', `1`)", "\"a+b-c\"")),
    ),
    f(
        "replace_all",
        "string, string, string",
        "string",
        "Replaces every occurrence of the second string in the first with the third.",
        Some(("replace_all('a-b-c', '-', '+')", "\"a+b+c\"")),
    ),
    f(
        "to_upper",
        "string",
        "string",
        "The string in upper case.",
        Some(("to_upper('abc')", "\"ABC\"")),
    ),
    f(
        "to_lower",
        "string",
        "string",
        "The string in lower case.",
        Some(("to_lower('ABC')", "\"abc\"")),
    ),
    f(
        "trim",
        "string, string",
        "string",
        "Removes the characters of the second string from both ends of the first.",
        Some(("trim('--a--', '-')", "\"a\"")),
    ),
    f(
        "trim_prefix",
        "string, string",
        "string",
        "Removes the second string from the start of the first, once.",
        Some(("trim_prefix('v1.2', 'v')", "\"1.2\"")),
    ),
    f(
        "split",
        "string, string",
        "array[string]",
        "Splits the first string at each occurrence of the second.",
        Some(("split('a,b', ',')", "[\"a\",\"b\"]")),
    ),
    f(
        "regex_replace_all",
        "string, string|number, string|number",
        "string",
        "Replaces every match of the regular expression (first argument) in the second with the third, which may use $1.",
        Some((
            "regex_replace_all('([0-9])', 'a1b2', '[$1]')",
            "\"a[1]b[2]\"",
        )),
    ),
    f(
        "regex_replace_all_literal",
        "string, string|number, string|number",
        "string",
        "As regex_replace_all, with the replacement taken literally.",
        Some((
            "regex_replace_all_literal('[0-9]', 'a1b2', '#')",
            "\"a#b#\"",
        )),
    ),
    f(
        "regex_match",
        "string, string|number",
        "boolean",
        "Whether the regular expression (first argument) matches the second.",
        Some(("regex_match('^[a-z]+$', 'abc')", "true")),
    ),
    f(
        "pattern_match",
        "string, string|number",
        "boolean",
        "Whether the wildcard pattern (first argument: * and ?) matches the second.",
        Some(("pattern_match('nginx:*', 'nginx:1.27')", "true")),
    ),
    f(
        "label_match",
        "object, object",
        "boolean",
        "Whether every label of the first object (a selector's labels) is in the second, with the same value.",
        Some(("label_match({app: 'a'}, {app: 'a', tier: 'b'})", "true")),
    ),
    f(
        "to_boolean",
        "string",
        "boolean",
        "'true' or 'false' (any case) as a boolean; other strings are an error.",
        Some(("to_boolean('True')", "true")),
    ),
    f(
        "base64_decode",
        "string",
        "string",
        "Decodes standard base64.",
        Some(("base64_decode('aGk=')", "\"hi\"")),
    ),
    f(
        "base64_encode",
        "string",
        "string",
        "Encodes as standard base64.",
        Some(("base64_encode('hi')", "\"aGk=\"")),
    ),
    f(
        "path_canonicalize",
        "string",
        "string",
        "A file path cleaned as Go's filepath.Clean cleans it.",
        Some(("path_canonicalize('/a/./b/../c')", "\"/a/c\"")),
    ),
    f(
        "truncate",
        "string, number",
        "string",
        "The string cut to at most N characters.",
        Some(("truncate('abcdef', `3`)", "\"abc\"")),
    ),
    f(
        "parse_json",
        "string",
        "any",
        "Decodes a JSON text.",
        Some(("parse_json('{\"a\": 1}').a", "1")),
    ),
    f(
        "parse_yaml",
        "string",
        "any",
        "Decodes a YAML text.",
        Some(("parse_yaml('a: 1').a", "1")),
    ),
    f(
        "lookup",
        "object|array, string|number",
        "any",
        "The value of a key of an object, or of an index of a list (null when absent).",
        Some(("lookup({a: 'x'}, 'a')", "\"x\"")),
    ),
    f(
        "items",
        "object|array, string, string",
        "array[object]",
        "An object's entries (or a list's elements) as objects with the two given field names.",
        Some((
            "items({a: 'x'}, 'key', 'value')",
            "[{\"key\":\"a\",\"value\":\"x\"}]",
        )),
    ),
    f(
        "object_from_lists",
        "array, array",
        "object",
        "An object from a list of keys and a list of values.",
        Some(("object_from_lists(['a'], [`1`])", "{\"a\":1}")),
    ),
    f(
        "to_string",
        "any",
        "string",
        "A value as Go's fmt prints it (a string unchanged, a number without trailing zeros).",
        Some(("to_string(`1`)", "\"1\"")),
    ),
    f(
        "md5",
        "string",
        "string",
        "The hex MD5 digest of the string.",
        Some(("md5('a')", "\"0cc175b9c0f1b6a831c399e269772661\"")),
    ),
    f(
        "sha1",
        "string",
        "string",
        "The hex SHA-1 digest of the string.",
        Some(("sha1('a')", "\"86f7e437faa5a7fce15d1ddcb9eaeaea377667b8\"")),
    ),
    f(
        "sha256",
        "string",
        "string",
        "The hex SHA-256 digest of the string (Kyverno: for names that must stay short).",
        Some((
            "sha256('a')",
            "\"ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb\"",
        )),
    ),
    f(
        "random",
        "string",
        "string",
        "A random string matching the regular expression (character classes and counts).",
        None,
    ),
    f(
        "semver_compare",
        "string, string",
        "boolean",
        "Whether the version (first argument) satisfies the semver range (second: '>1.0.0 <2.0.0', '1.x || >=3.0').",
        Some(("semver_compare('1.2.3', '>=1.0.0 <2.0.0')", "true")),
    ),
    f(
        "image_normalize",
        "string",
        "string",
        "An image reference in full: registry, repository and tag (docker.io, :latest).",
        Some(("image_normalize('nginx')", "\"docker.io/nginx:latest\"")),
    ),
    f(
        "x509_decode",
        "string",
        "object",
        "Decodes a PEM certificate (RSA key) into Go's x509.Certificate fields (Subject, NotAfter, PublicKey.N, DNSNames, ...).",
        None,
    ),
    f(
        "time_now",
        "",
        "string",
        "The current time (RFC 3339, local offset).",
        None,
    ),
    f(
        "time_now_utc",
        "",
        "string",
        "The current time in UTC (RFC 3339).",
        None,
    ),
    f(
        "time_since",
        "string, string, string",
        "string",
        "The Go duration from the second time to the third (now when empty), both in the layout given first (RFC 3339 when empty).",
        Some((
            "time_since('', '2024-01-01T00:00:00Z', '2024-01-01T01:30:00Z')",
            "\"1h30m0s\"",
        )),
    ),
    f(
        "time_to_cron",
        "string",
        "string",
        "A cron schedule for the time (RFC 3339): minute hour day month weekday.",
        Some(("time_to_cron('2024-05-06T07:08:00Z')", "\"8 7 6 5 1\"")),
    ),
    f(
        "time_add",
        "string, string",
        "string",
        "The time (RFC 3339) plus a Go duration.",
        Some((
            "time_add('2024-01-01T00:00:00Z', '1h')",
            "\"2024-01-01T01:00:00Z\"",
        )),
    ),
    f(
        "time_parse",
        "string, string",
        "string",
        "A time in the Go layout (first argument) as RFC 3339.",
        Some((
            "time_parse('2006-01-02', '2024-03-04')",
            "\"2024-03-04T00:00:00Z\"",
        )),
    ),
    f(
        "time_utc",
        "string",
        "string",
        "An RFC 3339 time converted to UTC.",
        Some((
            "time_utc('2024-01-01T02:00:00+02:00')",
            "\"2024-01-01T00:00:00Z\"",
        )),
    ),
    f(
        "time_diff",
        "string, string",
        "string",
        "The Go duration from the first RFC 3339 time to the second.",
        Some((
            "time_diff('2024-01-01T00:00:00Z', '2024-01-01T00:00:30Z')",
            "\"30s\"",
        )),
    ),
    f(
        "time_before",
        "string, string",
        "boolean",
        "Whether the first RFC 3339 time is before the second.",
        Some((
            "time_before('2024-01-01T00:00:00Z', '2024-01-02T00:00:00Z')",
            "true",
        )),
    ),
    f(
        "time_after",
        "string, string",
        "boolean",
        "Whether the first RFC 3339 time is after the second.",
        Some((
            "time_after('2024-01-01T00:00:00Z', '2024-01-02T00:00:00Z')",
            "false",
        )),
    ),
    f(
        "time_between",
        "string, string, string",
        "boolean",
        "Whether the first RFC 3339 time is between the second and the third.",
        Some((
            "time_between('2024-01-02T00:00:00Z', '2024-01-01T00:00:00Z', '2024-01-03T00:00:00Z')",
            "true",
        )),
    ),
    f(
        "time_truncate",
        "string, string",
        "string",
        "The RFC 3339 time rounded down to a multiple of the Go duration.",
        Some((
            "time_truncate('2024-01-01T10:35:00Z', '1h')",
            "\"2024-01-01T10:00:00Z\"",
        )),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function listed is one the engine calls, and every example
    /// gives the result the listing promises.
    #[test]
    fn every_function_listed_exists_and_its_example_holds() {
        let rt = leash_policy::jmespath::runtime();
        for f in FUNCTIONS {
            assert!(
                rt.get_function(f.name).is_some(),
                "{} is not registered",
                f.name
            );
            if let Some((expr, want)) = f.example {
                let got = query(expr, &serde_json::json!({}), true, false)
                    .unwrap_or_else(|e| panic!("{}: {expr}: {e:#}", f.name));
                assert_eq!(got, want, "{}: {expr}", f.name);
            }
        }
        for name in BUILTINS {
            assert!(rt.get_function(name).is_some(), "{name} is not registered");
        }
    }

    #[test]
    fn query_prints_as_kyverno_jp_prints() {
        let data = serde_json::json!({"a": {"b": "x"}, "n": [1, 2]});
        assert_eq!(query("a.b", &data, false, false).unwrap(), "\"x\"");
        assert_eq!(query("a.b", &data, false, true).unwrap(), "x");
        assert_eq!(query("n", &data, true, false).unwrap(), "[1,2]");
        assert_eq!(query("n", &data, false, false).unwrap(), "[\n  1,\n  2\n]");
        let html = serde_json::json!({"s": "a<b"});
        assert_eq!(query("s", &html, true, false).unwrap(), "\"a\\u003cb\"");
        assert_eq!(query("s", &html, true, true).unwrap(), "a<b");
        let err = format!("{:#}", query("a.[", &data, false, false).unwrap_err());
        assert!(err.contains("does not parse"), "{err}");
    }
}
