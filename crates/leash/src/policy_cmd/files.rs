//! Reading policy, resource and test files: YAML (multi-document) or JSON,
//! files or directories (recursively, dot-directories included), with
//! `List`s flattened. Errors name the file and the document.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One document and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Doc {
    pub value: Value,
    pub file: PathBuf,
    /// 1-based document number within the file.
    pub index: usize,
}

impl Doc {
    /// `file (document N)`.
    pub(crate) fn origin(&self) -> String {
        format!("{} (document {})", self.file.display(), self.index)
    }
}

fn is_manifest(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "yaml" | "yml" | "json"))
}

/// Every manifest file under `path` (itself if a file), sorted by path.
pub(crate) fn manifest_files(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir)
            .with_context(|| format!("cannot read directory {}", dir.display()))?;
        for entry in entries {
            let entry =
                entry.with_context(|| format!("cannot read directory {}", dir.display()))?;
            let p = entry.path();
            let ft = entry
                .file_type()
                .with_context(|| format!("cannot read {}", p.display()))?;
            if ft.is_dir() {
                stack.push(p);
            } else if is_manifest(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Parses one file into documents (empty documents dropped, Lists flattened).
pub(crate) fn read_file(path: &Path) -> Result<Vec<Doc>> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    parse_text(&text, path)
}

/// Parses text (YAML stream or JSON) into documents.
pub(crate) fn parse_text(text: &str, path: &Path) -> Result<Vec<Doc>> {
    let is_json = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let values: Vec<Value> = if is_json {
        let mut out = Vec::new();
        for (i, v) in serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .enumerate()
        {
            out.push(v.with_context(|| {
                format!("{} (document {}): invalid JSON", path.display(), i + 1)
            })?);
        }
        out
    } else {
        // Policy and resource files are the user's own; the default
        // budget (1,024 documents, 250,000 nodes) is sized for config
        // files and refused a 10,000-pod manifest (found by
        // bench/vs-kyverno). Nesting depth stays bounded.
        let options = serde_saphyr::options! {
            budget: serde_saphyr::budget! {
                max_documents: usize::MAX,
                max_events: usize::MAX,
                max_nodes: usize::MAX,
                max_total_scalar_bytes: usize::MAX,
                max_reader_input_bytes: None,
            },
            // `defaultMode: 0644` is 420, as kubectl and Kyverno read it
            // (sigs.k8s.io/yaml: YAML 1.1's octal), not 644.
            legacy_octal_numbers: true,
        };
        serde_saphyr::from_multiple_with_options::<Value>(text, options)
            .map_err(|e| anyhow::anyhow!("{}: invalid YAML: {e}", path.display()))?
    };
    let mut docs = Vec::new();
    for (i, v) in values.into_iter().enumerate() {
        flatten(v, path, i + 1, &mut docs)?;
    }
    Ok(docs)
}

fn flatten(v: Value, path: &Path, index: usize, out: &mut Vec<Doc>) -> Result<()> {
    match v {
        Value::Null => Ok(()),
        Value::Object(ref m)
            if m.get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && m.get("items").is_some_and(Value::is_array) =>
        {
            let Value::Object(mut m) = v else {
                unreachable!()
            };
            let Some(Value::Array(items)) = m.remove("items") else {
                unreachable!()
            };
            for item in items {
                flatten(item, path, index, out)?;
            }
            Ok(())
        }
        Value::Object(_) => {
            out.push(Doc {
                value: v,
                file: path.to_path_buf(),
                index,
            });
            Ok(())
        }
        other => bail!(
            "{} (document {index}): expected a mapping, found {}",
            path.display(),
            match other {
                Value::Array(_) => "a list",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                _ => "a scalar",
            }
        ),
    }
}

/// Reads every document under each path.
pub(crate) fn read_paths(paths: &[PathBuf]) -> Result<Vec<Doc>> {
    let mut docs = Vec::new();
    for p in paths {
        for file in manifest_files(p)? {
            docs.extend(read_file(&file)?);
        }
    }
    Ok(docs)
}

/// Whether a document is a Kubernetes object (apiVersion, kind, metadata.name).
pub(crate) fn is_object(v: &Value) -> bool {
    v["apiVersion"].is_string()
        && v["kind"].is_string()
        && (v["metadata"]["name"].is_string() || v["metadata"]["generateName"].is_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A manifest stream longer than serde-saphyr's default budget (1,024
    /// documents) is read whole.
    #[test]
    fn a_stream_of_many_documents_is_read_whole() {
        let text: String = (0..3000)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n"))
            .collect();
        let docs = super::parse_text(&text, Path::new("many.yaml")).unwrap();
        assert_eq!(docs.len(), 3000);
    }

    /// Numbers as kubectl and Kyverno read YAML (1.1, sigs.k8s.io/yaml):
    /// a leading zero is octal (`defaultMode: 0644` is 420), a digit 8 or
    /// 9 after it makes a decimal; quoted stays text.
    #[test]
    fn numbers_with_a_leading_zero_are_octal_as_kubectl_reads_them() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n\
                    spec: {a: 0644, b: 0777, c: -017, d: 08, e: '0644', f: 0, g: 0x1F}\n";
        let docs = super::parse_text(text, Path::new("pod.yaml")).unwrap();
        let spec = &docs[0].value["spec"];
        assert_eq!(spec["a"], 420);
        assert_eq!(spec["b"], 511);
        assert_eq!(spec["c"], -15);
        assert_eq!(spec["d"], 8.0);
        assert_eq!(spec["e"], "0644");
        assert_eq!(spec["f"], 0);
        assert_eq!(spec["g"], 31);
    }
}
