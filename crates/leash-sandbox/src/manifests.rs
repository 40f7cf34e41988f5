//! Loading YAML and JSON manifests for `--data PATH`.
//!
//! [`load_manifests`] reads each path in order:
//! - a **file** is parsed as a JSON stream when its name ends in `.json`
//!   (one or more concatenated JSON values), and as multi-document YAML
//!   otherwise;
//! - a **directory** contributes its `*.yaml`, `*.yml` and `*.json` files
//!   (extension in any case), sorted by file name, **not recursively**
//!   (subdirectories and hidden files, whose names start with `.`, are
//!   skipped), as `kubectl apply -f DIR` does without `-R`. A directory with
//!   no such file is an error, since it is almost certainly the wrong path.
//!
//! Empty documents (nothing, only comments, or `null`) are skipped. A `List`
//! (`kind: List`, as `kubectl get -o yaml` prints, or a typed list such as
//! `PodList` with an `items` array) is replaced by its items, recursively;
//! items of a typed list that lack `apiVersion`/`kind` get the list's
//! `apiVersion` and the kind without `List`, as the API server omits them.
//! Every remaining document must be a Kubernetes object: a mapping with
//! string `apiVersion` and `kind` and a `metadata.name` or
//! `metadata.generateName`.
//!
//! Errors name the file and the document (counted from 1 in file order,
//! empty documents included, so the number matches what an editor shows
//! between `---` lines) and, for YAML syntax errors, the line and column.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Error, Result};

/// Parse every manifest under `paths` (files or directories, in order) into
/// objects, in file and document order, with `List`s flattened.
///
/// # Errors
/// [`Error::ReadFailed`] when a path cannot be read;
/// [`Error::ManifestInvalid`] naming the file and document when a document
/// does not parse or is not a Kubernetes object, or when a directory holds
/// no manifest.
pub fn load_manifests(paths: &[PathBuf]) -> Result<Vec<Value>> {
    let mut objects = Vec::new();
    for path in paths {
        let metadata = fs::metadata(path).map_err(|source| read_failed(path, source))?;
        if metadata.is_dir() {
            let files = manifest_files(path)?;
            if files.is_empty() {
                return Err(invalid(
                    path,
                    "the directory holds no *.yaml, *.yml or *.json file".to_owned(),
                ));
            }
            for file in files {
                load_file(&file, &mut objects)?;
            }
        } else {
            load_file(path, &mut objects)?;
        }
    }
    Ok(objects)
}

/// The manifest files directly in `dir`, sorted by name.
fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|source| read_failed(dir, source))? {
        let entry = entry.map_err(|source| read_failed(dir, source))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || !has_manifest_extension(&path) {
            continue;
        }
        // Follow symlinks: a link to a file counts, a link to a directory does not.
        let metadata = fs::metadata(&path).map_err(|source| read_failed(&path, source))?;
        if metadata.is_file() {
            files.push(path);
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

fn has_manifest_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|ext| ext.to_str())
        .is_some_and(|ext| {
            ["yaml", "yml", "json"]
                .iter()
                .any(|e| ext.eq_ignore_ascii_case(e))
        })
}

fn is_json(path: &Path) -> bool {
    path.extension()
        .and_then(|ext| ext.to_str())
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"))
}

/// Parse one file and append its objects.
fn load_file(path: &Path, objects: &mut Vec<Value>) -> Result<()> {
    let text = fs::read_to_string(path).map_err(|source| read_failed(path, source))?;
    let documents = if is_json(path) {
        parse_json_stream(path, &text)?
    } else {
        parse_yaml(path, &text)?
    };
    for (document, value) in documents {
        flatten(path, document, value, objects)?;
    }
    Ok(())
}

/// The values of a stream of concatenated JSON documents, numbered from 1.
fn parse_json_stream(path: &Path, text: &str) -> Result<Vec<(usize, Value)>> {
    let mut documents = Vec::new();
    for (i, value) in serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .enumerate()
    {
        let value = value.map_err(|err| invalid(path, format!("document {}: {err}", i + 1)))?;
        documents.push((i + 1, value));
    }
    Ok(documents)
}

/// The non-empty documents of a YAML stream, with their document numbers.
fn parse_yaml(path: &Path, text: &str) -> Result<Vec<(usize, Value)>> {
    let starts = document_start_lines(text);
    // Manifest files are local and trusted; the default budget (1,024
    // documents, 250,000 nodes) is sized for config files and would refuse
    // an exported cluster. Nesting depth stays bounded.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: usize::MAX,
            max_events: usize::MAX,
            max_nodes: usize::MAX,
            max_total_scalar_bytes: usize::MAX,
            max_reader_input_bytes: None,
        },
        with_snippet: false,
        // `0644` is 420, as kube-apiserver and kubectl read YAML (1.1).
        legacy_octal_numbers: true,
    };
    let documents =
        serde_saphyr::from_multiple_with_options::<serde_saphyr::Spanned<Value>>(text, options)
            .map_err(|err| {
                let message = err.to_string();
                let position = match err.location() {
                    // The message usually gives the line and column itself.
                    Some(at) if message.contains(&format!("line {}", at.line())) => {
                        format!("document {}", document_at(&starts, at.line()))
                    }
                    Some(at) => format!(
                        "document {} (line {}, column {})",
                        document_at(&starts, at.line()),
                        at.line(),
                        at.column()
                    ),
                    None => "YAML".to_owned(),
                };
                invalid(path, format!("{position}: {message}"))
            })?;
    Ok(documents
        .into_iter()
        .map(|doc| (document_at(&starts, doc.referenced.line()), doc.value))
        .collect())
}

/// The 1-based lines where documents start: each `---` marker line, and
/// line 1 when content precedes the first marker (an implicit document).
/// A `---` at column 0 followed by a space or the line end is always a
/// document marker in YAML, even inside a multi-line scalar.
fn document_start_lines(text: &str) -> Vec<u64> {
    let mut starts = Vec::new();
    let mut content_before_marker = false;
    for (i, line) in text.lines().enumerate() {
        let line_number = i as u64 + 1;
        let is_marker = line
            .strip_prefix("---")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        if is_marker {
            starts.push(line_number);
        } else if starts.is_empty() {
            let trimmed = line.trim();
            if !trimmed.is_empty() && !trimmed.starts_with('#') && !trimmed.starts_with('%') {
                content_before_marker = true;
            }
        }
    }
    if content_before_marker || starts.is_empty() {
        starts.insert(0, 1);
    }
    starts
}

/// The number (from 1) of the document holding `line`.
fn document_at(starts: &[u64], line: u64) -> usize {
    starts
        .iter()
        .take_while(|start| **start <= line)
        .count()
        .max(1)
}

/// Append `value` (document `document` of `path`) to `objects`: skipped if
/// empty, replaced by its items if a list, checked to be an object otherwise.
fn flatten(path: &Path, document: usize, value: Value, objects: &mut Vec<Value>) -> Result<()> {
    if value.is_null() {
        return Ok(());
    }
    let Value::Object(mut map) = value else {
        return Err(invalid(
            path,
            format!(
                "document {document}: not a Kubernetes object (expected a mapping, found {})",
                type_name(&value)
            ),
        ));
    };
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if kind.ends_with("List") && map.get("items").is_some_and(Value::is_array) {
        let api_version = map.get("apiVersion").cloned();
        let item_kind = kind.strip_suffix("List").unwrap_or_default().to_owned();
        let Some(Value::Array(items)) = map.remove("items") else {
            unreachable!("items was just checked to be an array");
        };
        for mut item in items {
            if let Value::Object(fields) = &mut item
                && !item_kind.is_empty()
            {
                if let Some(api_version) = &api_version {
                    fields
                        .entry("apiVersion")
                        .or_insert_with(|| api_version.clone());
                }
                fields
                    .entry("kind")
                    .or_insert_with(|| Value::String(item_kind.clone()));
            }
            flatten(path, document, item, objects)?;
        }
        return Ok(());
    }
    let object = Value::Object(map);
    check_object(&object).map_err(|problem| {
        invalid(
            path,
            format!("document {document}: not a Kubernetes object: {problem}"),
        )
    })?;
    objects.push(object);
    Ok(())
}

/// Why `object` is not a Kubernetes object, if it is not.
fn check_object(object: &Value) -> std::result::Result<(), String> {
    for field in ["apiVersion", "kind"] {
        match object.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            Some(other) => {
                return Err(format!(
                    "{field} must be a non-empty string, found {}",
                    type_name(other)
                ));
            }
            None => return Err(format!("{field} is missing")),
        }
    }
    let named = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !named("name") && !named("generateName") {
        return Err("metadata.name is missing".to_owned());
    }
    Ok(())
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

fn read_failed(path: &Path, source: std::io::Error) -> Error {
    Error::ReadFailed {
        path: path.to_owned(),
        source,
    }
}

fn invalid(path: &Path, message: String) -> Error {
    Error::ManifestInvalid {
        path: path.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use serde_json::json;

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, text).expect("write test manifest");
        path
    }

    fn names(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    }

    fn error_text(paths: &[PathBuf]) -> String {
        format!("{}", load_manifests(paths).unwrap_err())
    }

    #[test]
    fn multi_document_yaml_skips_empty_documents() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "app.yaml",
            "# leading comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: default\ndata:\n  k: v\n\
             ---\n---\n# only a comment\n---\nnull\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\n\
             spec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: c\n        image: nginx\n...\n",
        );
        let objects = load_manifests(&[file]).unwrap();
        assert_eq!(names(&objects), ["ConfigMap/a", "Deployment/b"]);
        assert_eq!(objects[0]["data"], json!({"k": "v"}));
        assert_eq!(objects[1]["spec"]["replicas"], 3);
        assert_eq!(
            objects[1]["spec"]["template"]["spec"]["containers"][0]["image"],
            "nginx"
        );
    }

    #[test]
    fn lists_are_flattened_and_typed_list_items_get_their_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "list.yaml",
            "apiVersion: v1\nkind: List\nitems:\n\
             - apiVersion: v1\n  kind: Namespace\n  metadata: {name: team-a}\n\
             - apiVersion: v1\n  kind: PodList\n  items:\n  - metadata: {name: p1, namespace: team-a}\n\
             ---\napiVersion: v1\nkind: List\nitems: []\n",
        );
        let objects = load_manifests(&[file]).unwrap();
        assert_eq!(names(&objects), ["Namespace/team-a", "Pod/p1"]);
        assert_eq!(objects[1]["apiVersion"], "v1");
    }

    #[test]
    fn json_files_hold_one_object_a_list_or_a_stream() {
        let dir = tempfile::tempdir().unwrap();
        let one = write(
            dir.path(),
            "one.json",
            r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#,
        );
        let list = write(
            dir.path(),
            "list.json",
            r#"{"apiVersion":"v1","kind":"List","items":[
                {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1"}},
                {"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"c-"}}]}
               {"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"}}"#,
        );
        let objects = load_manifests(&[one, list]).unwrap();
        assert_eq!(objects.len(), 4);
        assert_eq!(objects[0]["kind"], "Secret");
        assert_eq!(objects[2]["metadata"]["generateName"], "c-");
        assert_eq!(objects[3]["kind"], "Service");
    }

    #[test]
    fn directories_load_manifest_files_sorted_by_name_without_recursing() {
        let dir = tempfile::tempdir().unwrap();
        let cm =
            |name: &str| format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
        write(dir.path(), "b.yml", &cm("from-b"));
        write(dir.path(), "a.yaml", &cm("from-a"));
        write(
            dir.path(),
            "c.JSON",
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"from-c"}}"#,
        );
        write(dir.path(), "notes.txt", "not a manifest");
        write(dir.path(), ".hidden.yaml", "{{{ not yaml");
        fs::create_dir(dir.path().join("nested")).unwrap();
        write(&dir.path().join("nested"), "z.yaml", &cm("nested"));
        let objects = load_manifests(&[dir.path().to_owned()]).unwrap();
        assert_eq!(
            names(&objects),
            ["ConfigMap/from-a", "ConfigMap/from-b", "ConfigMap/from-c"]
        );

        let empty = tempfile::tempdir().unwrap();
        write(empty.path(), "readme.md", "# nothing");
        let message = error_text(&[empty.path().to_owned()]);
        assert!(
            message.contains("no *.yaml, *.yml or *.json file"),
            "{message}"
        );
    }

    #[test]
    fn bad_yaml_names_the_file_document_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let file = write(
            dir.path(),
            "broken.yaml",
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
        );
        let message = error_text(std::slice::from_ref(&file));
        assert!(message.contains("broken.yaml"), "{message}");
        assert!(message.contains("document 3: "), "{message}");
        assert!(message.contains("line 9"), "{message}");
        assert!(!message.contains('\n'), "one line expected: {message}");
    }

    #[test]
    fn documents_that_are_not_objects_are_rejected_with_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "scalar.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\njust text\n",
                "document 2: not a Kubernetes object (expected a mapping, found a string)",
            ),
            (
                "nokind.yaml",
                "apiVersion: v1\nmetadata: {name: a}\n",
                "document 1: not a Kubernetes object: kind is missing",
            ),
            (
                "noname.yaml",
                "---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
                "document 2: not a Kubernetes object: metadata.name is missing",
            ),
            (
                "number.yaml",
                "apiVersion: 1\nkind: X\nmetadata: {name: a}\n",
                "apiVersion must be a non-empty string, found a number",
            ),
            (
                "bad.json",
                "{\"apiVersion\":\"v1\"} {\"kind\": }",
                "document 2: ",
            ),
            (
                "listitem.yaml",
                "apiVersion: v1\nkind: List\nitems:\n- 7\n",
                "document 1: not a Kubernetes object (expected a mapping, found a number)",
            ),
        ];
        for (name, text, expected) in cases {
            let file = write(dir.path(), name, text);
            let message = error_text(&[file]);
            assert!(message.contains(name), "{message}");
            assert!(message.contains(expected), "{name}: {message}");
        }
    }

    #[test]
    fn missing_path_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.yaml");
        let err = load_manifests(std::slice::from_ref(&missing)).unwrap_err();
        assert!(
            matches!(&err, Error::ReadFailed { path, .. } if *path == missing),
            "{err:?}"
        );
    }

    #[test]
    fn large_files_are_not_refused_by_the_yaml_budget() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (0..2_000)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n"))
            .collect();
        let file = write(dir.path(), "many.yaml", &text);
        assert_eq!(load_manifests(&[file]).unwrap().len(), 2_000);
    }

    #[test]
    fn document_numbers_count_markers_and_implicit_first_documents() {
        assert_eq!(document_start_lines("a: 1\n---\nb: 2\n"), [1, 2]);
        assert_eq!(
            document_start_lines("# c\n%YAML 1.2\n---\nb: 2\n--- {c: 3}\n"),
            [3, 5]
        );
        assert_eq!(document_start_lines(""), [1]);
        assert_eq!(document_start_lines("a: '---'\n----\n"), [1]);
        assert_eq!(document_at(&[3, 5], 1), 1);
        assert_eq!(document_at(&[3, 5], 4), 1);
        assert_eq!(document_at(&[3, 5], 5), 2);
    }
}
