//! The Kyverno CLI's input files: `Test` (`cli.kyverno.io/v1alpha1` and the
//! older untyped form), `Values`, `UserInfo` and `Context`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use leash_policy::{Bindings, PolicyBindings, Status, UserInfo};
use serde_json::Value;

use super::cluster::HttpAnswer;
use super::files::{self, Doc};

/// One expected result row.
#[derive(Debug, Clone)]
pub(crate) struct ExpectedRow {
    pub policy: String,
    pub rule: String,
    pub resources: Vec<String>,
    pub kind: String,
    /// `namespace`: only the resources of that namespace (empty: any), as
    /// Kyverno's CLI looks results up.
    pub namespace: String,
    pub result: Status,
    /// `generatedResource`: the file holding the downstream a generate rule
    /// must produce.
    pub generated_resource: Option<PathBuf>,
    /// `cloneSourceResource`: the source object a clone rule copies.
    pub clone_source: Option<PathBuf>,
    /// `patchedResources` (or the older `patchedResource`): the file with
    /// the expected resource after mutation.
    pub patched_resource: Option<PathBuf>,
}

/// A parsed test file.
#[derive(Debug, Clone)]
pub(crate) struct TestFile {
    pub name: String,
    /// The directory of the test file, which its paths are relative to.
    pub dir: PathBuf,
    pub policies: Vec<PathBuf>,
    pub resources: Vec<PathBuf>,
    pub exceptions: Vec<PathBuf>,
    pub values: Option<PathBuf>,
    pub userinfo: Option<PathBuf>,
    pub context: Option<PathBuf>,
    /// `targetResources`: existing resources for `mutate.targets` rules.
    pub target_resources: Vec<PathBuf>,
    /// `clusterResources`: `ClusterResource` files, the objects (and CRDs)
    /// that exist in the cluster the rules look things up in.
    pub cluster_resources: Vec<PathBuf>,
    /// `paramResources`: the parameter resources of Kubernetes admission
    /// policies (their bindings' `paramRef`s select among them).
    pub param_resources: Vec<PathBuf>,
    /// `apiCallResponses`: canned answers to `apiCall`s and CEL `http`
    /// calls.
    pub http_answers: Vec<HttpAnswer>,
    /// `globalContextEntries`: the data of global context entries, by
    /// name.
    pub global_entries: BTreeMap<String, Value>,
    /// `jsonPayloads`: (the path as the test names it, the file).
    pub json_payloads: Vec<(String, PathBuf)>,
    /// `httpPayloads`: HTTP authorization requests, as `json_payloads`.
    pub http_payloads: Vec<(String, PathBuf)>,
    /// `envoyPayloads`: Envoy authorization requests, as `json_payloads`.
    pub envoy_payloads: Vec<(String, PathBuf)>,
    pub results: Vec<ExpectedRow>,
}

fn paths(v: &Value, dir: &Path, field: &str, file: &Path) -> Result<Vec<PathBuf>> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![dir.join(s)]),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.as_str().map(|s| dir.join(s)).ok_or_else(|| {
                    anyhow::anyhow!("{}: {field}[{i}] must be a path", file.display())
                })
            })
            .collect(),
        _ => bail!("{}: {field} must be a list of paths", file.display()),
    }
}

/// The files a `paths` field names, each with its path as written.
fn named_files(v: &Value, field: &str, dir: &Path, file: &Path) -> Result<Vec<(String, PathBuf)>> {
    Ok(paths(&v[field], dir, field, file)?
        .into_iter()
        .zip(named_paths(&v[field]))
        .map(|(file, named)| (named, file))
        .collect())
}

/// The paths of a `paths` field as the test writes them.
fn named_paths(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|p| p.as_str().unwrap_or("").to_string())
            .collect(),
        _ => Vec::new(),
    }
}

fn one_path(v: &Value, dir: &Path, field: &str, file: &Path) -> Result<Option<PathBuf>> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(dir.join(s))),
        _ => bail!("{}: {field} must be a path", file.display()),
    }
}

impl TestFile {
    /// Parses a test file: every test it holds (a YAML stream may hold
    /// several, each run on its own, as Kyverno's CLI runs them).
    pub(crate) fn read_all(path: &Path) -> Result<Vec<TestFile>> {
        let docs = files::read_file(path)?;
        if docs.is_empty() {
            bail!("{}: the file holds no test", path.display());
        }
        docs.iter()
            .filter(|d| !d.value.is_null())
            .map(|d| TestFile::from_doc(&d.value, path))
            .collect()
    }

    /// Parses one test document of the file at `path`.
    fn from_doc(v: &Value, path: &Path) -> Result<TestFile> {
        if let Some(kind) = v["kind"].as_str()
            && kind != "Test"
        {
            bail!("{}: kind {kind:?} is not a Test", path.display());
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let name = v["metadata"]["name"]
            .as_str()
            .or_else(|| v["name"].as_str())
            .unwrap_or("")
            .to_string();
        let mut results = Vec::new();
        match &v["results"] {
            Value::Array(rows) => {
                for (i, row) in rows.iter().enumerate() {
                    results.push(parse_row(row, i, path, dir)?);
                }
            }
            Value::Null => {}
            _ => bail!("{}: results must be a list", path.display()),
        }
        Ok(TestFile {
            name,
            dir: dir.to_path_buf(),
            policies: paths(&v["policies"], dir, "policies", path)?,
            resources: paths(&v["resources"], dir, "resources", path)?,
            exceptions: paths(&v["exceptions"], dir, "exceptions", path)?,
            values: one_path(&v["variables"], dir, "variables", path)?,
            userinfo: one_path(&v["userinfo"], dir, "userinfo", path)?,
            context: one_path(&v["context"], dir, "context", path)?,
            target_resources: paths(&v["targetResources"], dir, "targetResources", path)?,
            cluster_resources: paths(&v["clusterResources"], dir, "clusterResources", path)?,
            param_resources: paths(&v["paramResources"], dir, "paramResources", path)?,
            http_answers: http_answers(&v["apiCallResponses"], path)?,
            global_entries: global_entries(&v["globalContextEntries"], dir, path)?,
            json_payloads: named_files(v, "jsonPayloads", dir, path)?,
            http_payloads: named_files(v, "httpPayloads", dir, path)?,
            envoy_payloads: named_files(v, "envoyPayloads", dir, path)?,
            results,
        })
    }
}

/// A JSON payload: the file's one document, which must be an object.
pub(crate) fn read_json_payload(name: &str, file: &Path) -> Result<Value> {
    let docs =
        files::read_file(file).with_context(|| format!("failed to load JSON payload {name}"))?;
    match <[Doc; 1]>::try_from(docs) {
        Ok([doc]) if doc.value.is_object() => Ok(doc.value),
        Ok([doc]) if doc.value.is_null() => bail!("JSON payload {name} is empty or nil"),
        Ok(_) => bail!("JSON payload {name} must be a top-level object (map)"),
        Err(docs) if docs.is_empty() => bail!("JSON payload {name} is empty or nil"),
        Err(_) => bail!("JSON payload {name} must hold one document"),
    }
}

/// A test's `apiCallResponses`, checked as Kyverno's CLI checks them: each
/// has a `url` (absolute http or https) or a `urlPath` (from `/`), not
/// both; `method` GET, POST or none; a `response.body` object; a
/// `response.statusCode` from 100 to 599 (200 when absent); no two answer
/// the same method and URL.
fn http_answers(v: &Value, file: &Path) -> Result<Vec<HttpAnswer>> {
    let entries = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(a) => a,
        _ => bail!("{}: apiCallResponses must be a list", file.display()),
    };
    let mut out: Vec<HttpAnswer> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("{}: apiCallResponses[{i}]", file.display());
        let text = |f: &str| e[f].as_str().map(str::trim).filter(|s| !s.is_empty());
        let url = match (text("url"), text("urlPath")) {
            (Some(_), Some(_)) => bail!("{at}: url and urlPath are mutually exclusive"),
            (None, None) => bail!("{at}: either url or urlPath is required"),
            (Some(u), None) => {
                let host = u
                    .strip_prefix("https://")
                    .or_else(|| u.strip_prefix("http://"));
                if host.is_none_or(|h| h.is_empty() || h.starts_with('/')) {
                    bail!("{at}: url {u:?} must be an absolute https/http URL");
                }
                u
            }
            (None, Some(p)) if !p.starts_with('/') => {
                bail!("{at}: urlPath {p:?} must be an absolute path starting with '/'")
            }
            (None, Some(p)) => p,
        };
        let method = match text("method").map(str::to_ascii_uppercase) {
            None => None,
            Some(m) if m == "GET" || m == "POST" => Some(m),
            Some(_) => bail!("{at}: method must be GET or POST"),
        };
        let body = &e["response"]["body"];
        if !body.is_object() {
            bail!("{at} {url:?}: response.body must be a JSON object");
        }
        let status = match &e["response"]["statusCode"] {
            Value::Null => 200,
            s => match s.as_u64().filter(|c| (100..=599).contains(c)) {
                Some(c) => c as u16,
                None => bail!("{at} {url:?}: statusCode {s} must be between 100 and 599"),
            },
        };
        if out.iter().any(|a| a.url == url && a.method == method) {
            bail!("{at}: duplicate entry for {url:?}: each method+url combination must be unique");
        }
        out.push(HttpAnswer {
            url: url.to_string(),
            method,
            status,
            body: body.clone(),
        });
    }
    Ok(out)
}

/// A test's `globalContextEntries`, each resolved as Kyverno's CLI
/// resolves its mocks: the root is `data`, or the list of `resources`
/// (inline, or the documents of `resourceFiles` relative to the test), one
/// of the three at most (none: null); `fieldPath` (JMESPath) narrows it;
/// with `projections` the entry is an object of each projection's name and
/// its `path` (JMESPath) searched on the root.
fn global_entries(v: &Value, dir: &Path, file: &Path) -> Result<BTreeMap<String, Value>> {
    let entries = match v {
        Value::Null => return Ok(BTreeMap::new()),
        Value::Array(a) => a,
        _ => bail!("{}: globalContextEntries must be a list", file.display()),
    };
    let mut out = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let at = format!("{}: globalContextEntries[{i}]", file.display());
        let Some(name) = e["name"].as_str().map(str::trim).filter(|n| !n.is_empty()) else {
            bail!("{at}: name is required");
        };
        if out.contains_key(name) {
            bail!("{at}: duplicate name {name:?}");
        }
        let sources = ["data", "resources", "resourceFiles"]
            .into_iter()
            .filter(|k| !e[*k].is_null())
            .count();
        if sources > 1 {
            bail!("{at} {name:?}: data, resources and resourceFiles are mutually exclusive");
        }
        let mut root = if let Some(files) = e["resourceFiles"].as_array() {
            let mut items = Vec::new();
            for f in files {
                let Some(f) = f.as_str() else {
                    bail!("{at} {name:?}: resourceFiles must be paths");
                };
                let docs = files::read_file(&dir.join(f))
                    .with_context(|| format!("{at} {name:?}: resourceFiles {f:?}"))?;
                items.extend(
                    docs.into_iter()
                        .map(|d| d.value)
                        .filter(|d| d.as_object().is_some_and(|o| !o.is_empty())),
                );
            }
            Value::Array(items)
        } else if let Some(resources) = e["resources"].as_array() {
            if let Some(j) = resources.iter().position(|r| !r.is_object()) {
                bail!("{at} {name:?}: resources[{j}] must be an object");
            }
            Value::Array(resources.clone())
        } else {
            e["data"].clone()
        };
        let search = |path: &str, data: &Value, what: &str| -> Result<Value> {
            let expr = leash_policy::jmespath::compile(path)
                .map_err(|err| anyhow::anyhow!("{at} {name:?} {what} {path:?}: {err}"))?;
            leash_policy::jmespath::search(&expr, data)
                .map_err(|err| anyhow::anyhow!("{at} {name:?} {what} {path:?}: {err}"))
        };
        if let Some(path) = e["fieldPath"].as_str().filter(|p| !p.is_empty()) {
            root = search(path, &root, "fieldPath")?;
        }
        let value = match e["projections"].as_array() {
            Some(projections) if !projections.is_empty() => {
                let mut object = serde_json::Map::new();
                for p in projections {
                    let (Some(pname), Some(path)) = (
                        p["name"].as_str().filter(|s| !s.trim().is_empty()),
                        p["path"].as_str().filter(|s| !s.trim().is_empty()),
                    ) else {
                        bail!("{at} {name:?}: each projection needs a name and a path");
                    };
                    object.insert(pname.to_string(), search(path, &root, "projection")?);
                }
                Value::Object(object)
            }
            _ => root,
        };
        out.insert(name.to_string(), value);
    }
    Ok(out)
}

fn parse_row(row: &Value, i: usize, path: &Path, dir: &Path) -> Result<ExpectedRow> {
    let field = |f: &str| row[f].as_str().unwrap_or("").to_string();
    if !row.is_object() {
        bail!("{}: results[{i}] must be a mapping", path.display());
    }
    // `status` is the older name of `result`.
    let result_value = match (&row["result"], &row["status"]) {
        (Value::Null, Value::Null) => {
            bail!("{}: results[{i}]: missing field `result`", path.display())
        }
        (Value::Null, status) => status,
        (result, _) => result,
    };
    let Some(result) = result_value.as_str().and_then(Status::parse) else {
        bail!(
            "{}: results[{i}].result {result_value} is not pass, fail, warn, error or skip",
            path.display()
        );
    };
    let mut resources: Vec<String> = row["resources"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    if let Some(r) = row["resource"].as_str() {
        resources.push(r.to_string());
    }
    let policy = field("policy");
    if policy.is_empty() {
        bail!("{}: results[{i}]: missing field `policy`", path.display());
    }
    let generated_resource = one_path(
        &row["generatedResource"],
        dir,
        &format!("results[{i}].generatedResource"),
        path,
    )?;
    let clone_source = one_path(
        &row["cloneSourceResource"],
        dir,
        &format!("results[{i}].cloneSourceResource"),
        path,
    )?;
    let patched_resource = match row["patchedResources"]
        .as_str()
        .or_else(|| row["patchedResource"].as_str())
    {
        Some(f) if !f.trim().is_empty() => Some(dir.join(f.trim())),
        _ => None,
    };
    Ok(ExpectedRow {
        policy,
        rule: field("rule"),
        resources,
        kind: field("kind"),
        namespace: field("namespace"),
        result,
        generated_resource,
        clone_source,
        patched_resource,
    })
}

/// A `Values` file.
#[derive(Debug, Default, Clone)]
pub(crate) struct Values {
    pub bindings: Bindings,
    /// Labels of namespaces (from `namespaceSelector` and `namespaces`).
    pub namespace_labels: HashMap<String, BTreeMap<String, String>>,
    /// Namespace objects given in full.
    pub namespaces: HashMap<String, Value>,
    /// `subresources`: (apiVersion, kind) of a subresource's objects →
    /// the resource requests for them name (`pods/binding` for a v1
    /// `Binding`), as Kyverno's CLI learns them from a Values file.
    pub subresources: HashMap<(String, String), String>,
}

impl Values {
    /// The resource a request for `object` names, when the Values file
    /// says its kind is a subresource's (`subresources`).
    pub(crate) fn request_resource(&self, object: &Value) -> Option<String> {
        let av = object["apiVersion"].as_str().unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("");
        self.subresources
            .get(&(av.to_string(), kind.to_string()))
            .cloned()
    }
}

fn value_pairs(v: &Value) -> Vec<(String, Value)> {
    v.as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn labels_of(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Values {
    pub(crate) fn read(path: &Path) -> Result<Values> {
        let docs = files::read_file(path)?;
        let Some(doc) = docs.into_iter().next() else {
            return Ok(Values::default());
        };
        Values::from_doc(&doc)
    }

    pub(crate) fn from_doc(doc: &Doc) -> Result<Values> {
        let v = &doc.value;
        let mut out = Values::default();
        out.bindings.global = value_pairs(&v["globalValues"]);
        if let Some(list) = v["namespaceSelector"].as_array() {
            for ns in list {
                if let Some(name) = ns["name"].as_str() {
                    out.namespace_labels
                        .insert(name.to_string(), labels_of(&ns["labels"]));
                }
            }
        }
        if let Some(list) = v["namespaces"].as_array() {
            for ns in list {
                if let Some(name) = ns["metadata"]["name"].as_str() {
                    out.namespace_labels
                        .insert(name.to_string(), labels_of(&ns["metadata"]["labels"]));
                    out.namespaces.insert(name.to_string(), ns.clone());
                }
            }
        }
        for (i, s) in v["subresources"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let sub = &s["subresource"];
            let (Some(kind), Some(name)) = (sub["kind"].as_str(), sub["name"].as_str()) else {
                bail!(
                    "{}: subresources[{i}].subresource needs kind and name",
                    doc.origin()
                );
            };
            let group = sub["group"].as_str().unwrap_or("");
            let version = sub["version"].as_str().unwrap_or("v1");
            let av = if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            };
            out.subresources
                .insert((av, kind.to_string()), name.to_string());
        }
        if let Some(list) = v["policies"].as_array() {
            for (i, p) in list.iter().enumerate() {
                let Some(name) = p["name"].as_str() else {
                    bail!("{}: policies[{i}].name is required", doc.origin());
                };
                let entry = out
                    .bindings
                    .policies
                    .entry(name.to_string())
                    .or_insert_with(PolicyBindings::default);
                for r in p["resources"].as_array().into_iter().flatten() {
                    if let Some(rn) = r["name"].as_str() {
                        entry
                            .resources
                            .entry(rn.to_string())
                            .or_default()
                            .extend(value_pairs(&r["values"]));
                    }
                }
                for r in p["rules"].as_array().into_iter().flatten() {
                    if let Some(rn) = r["name"].as_str() {
                        entry
                            .rules
                            .entry(rn.to_string())
                            .or_default()
                            .extend(value_pairs(&r["values"]));
                        let foreach = entry.foreach.entry(rn.to_string()).or_default();
                        for (k, v) in value_pairs(&r["foreachValues"]) {
                            let Value::Array(values) = v else {
                                bail!(
                                    "{}: policies[{i}] rule {rn}: foreachValues.{k} must be a list",
                                    doc.origin()
                                );
                            };
                            foreach.push((k, values));
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// A `UserInfo` file.
pub(crate) fn read_userinfo(path: &Path) -> Result<UserInfo> {
    let docs = files::read_file(path)?;
    let Some(doc) = docs.into_iter().next() else {
        return Ok(UserInfo::default());
    };
    let v = &doc.value;
    let strings = |x: &Value| -> Vec<String> {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let user = if v["userInfo"].is_object() {
        &v["userInfo"]
    } else {
        v
    };
    Ok(UserInfo {
        username: user["username"].as_str().unwrap_or("").to_string(),
        uid: user["uid"].as_str().unwrap_or("").to_string(),
        groups: strings(&user["groups"]),
        roles: strings(&v["roles"]),
        cluster_roles: strings(&v["clusterRoles"]),
    })
}

/// What a `Context` file gives the rules: the objects of `spec.resources`
/// (cluster data), and the image metadata of `spec.images` by reference.
#[derive(Debug, Default)]
pub(crate) struct ContextData {
    pub(crate) objects: Vec<Value>,
    pub(crate) images: HashMap<String, Value>,
}

/// Reads a `Context` file (or a plain file of objects).
pub(crate) fn read_context(path: &Path) -> Result<ContextData> {
    let docs = files::read_file(path).with_context(|| "reading the test's context file")?;
    let mut out = ContextData::default();
    for doc in docs {
        if let Some(images) = doc.value["spec"]["images"].as_array() {
            for entry in images {
                if let Some(image) = entry["image"].as_str() {
                    out.images.insert(image.to_string(), image_data(entry));
                }
            }
        }
        match doc.value["spec"]["resources"].as_array() {
            Some(list) => out.objects.extend(list.iter().cloned()),
            None if files::is_object(&doc.value) && doc.value["kind"] != "Context" => {
                out.objects.push(doc.value)
            }
            None => {}
        }
    }
    Ok(out)
}

/// Reads a test's `ClusterResource` file: the objects of `spec.resources`,
/// and the CustomResourceDefinitions of the files `spec.crds` names
/// (relative to `test_dir`, the test file's directory, as Kyverno's CLI
/// resolves them), which exist in the cluster too. A document of another
/// kind is an object of the cluster itself.
pub(crate) fn read_cluster_resources(path: &Path, test_dir: &Path) -> Result<Vec<Value>> {
    let docs = files::read_file(path).with_context(|| "reading the test's clusterResources")?;
    let mut out = Vec::new();
    for doc in docs {
        let v = &doc.value;
        if v["kind"] != "ClusterResource" {
            if !files::is_object(v) {
                bail!(
                    "{}: neither a ClusterResource nor a Kubernetes object",
                    doc.origin()
                );
            }
            out.push(doc.value);
            continue;
        }
        match &v["spec"]["resources"] {
            Value::Null => {}
            Value::Array(list) => {
                for (i, object) in list.iter().enumerate() {
                    if !files::is_object(object) {
                        bail!(
                            "{}: spec.resources[{i}] is not a Kubernetes object (apiVersion, kind and metadata.name)",
                            doc.origin()
                        );
                    }
                    out.push(object.clone());
                }
            }
            _ => bail!("{}: spec.resources must be a list", doc.origin()),
        }
        let crds = paths(&v["spec"]["crds"], test_dir, "spec.crds", &doc.file)?;
        for crd in
            files::read_paths(&crds).with_context(|| format!("{}: spec.crds", doc.origin()))?
        {
            if crd.value["kind"] != "CustomResourceDefinition" {
                bail!("{}: not a CustomResourceDefinition", crd.origin());
            }
            out.push(crd.value);
        }
    }
    Ok(out)
}

/// A `spec.images` entry as Kyverno's CLI hands it to `image.GetMetadata`:
/// its `ImageData` fields only, through JSON, so `image`, `resolvedImage`,
/// `registry` and `repository` are always there ("" when not given),
/// `tag` and `digest` only when not empty, `imageIndex`, `manifest` and
/// `config` only when given; any other key is dropped.
fn image_data(entry: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["image", "resolvedImage", "registry", "repository"] {
        let text = entry[key].as_str().unwrap_or("");
        out.insert(key.to_string(), Value::String(text.to_string()));
    }
    for key in ["tag", "digest"] {
        match entry[key].as_str() {
            Some(text) if !text.is_empty() => {
                out.insert(key.to_string(), Value::String(text.to_string()));
            }
            _ => {}
        }
    }
    for key in ["imageIndex", "manifest", "config"] {
        match &entry[key] {
            Value::Null => {}
            v => {
                out.insert(key.to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{
        TestFile, global_entries, http_answers, image_data, read_cluster_resources,
        read_json_payload,
    };

    /// A file may hold several tests (each its own run); `jsonPayloads`
    /// keep the names the test gives them.
    #[test]
    fn test_files_with_several_tests_and_json_payloads() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kyverno-test.yaml");
        std::fs::write(
            &file,
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: a}\npolicies: [p.yaml]\njsonPayloads: [in/one.json]\nresults: []\n---\napiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: b}\npolicies: [p.yaml]\nresults: []\n",
        )
        .unwrap();
        let tests = TestFile::read_all(&file).unwrap();
        let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            tests[0].json_payloads,
            [("in/one.json".to_string(), dir.path().join("in/one.json"))]
        );
        let payload = dir.path().join("payload.json");
        std::fs::write(&payload, r#"{"data": {"value": 1}}"#).unwrap();
        assert_eq!(
            read_json_payload("payload.json", &payload).unwrap(),
            json!({"data": {"value": 1}})
        );
        std::fs::write(&payload, "[1, 2]").unwrap();
        let err = format!(
            "{:#}",
            read_json_payload("payload.json", &payload).unwrap_err()
        );
        assert!(err.contains("payload.json"), "{err}");
    }

    #[test]
    fn global_context_entries_resolve_as_kyverno_mocks_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("deployments.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b}\n",
        )
        .unwrap();
        let file = dir.path().join("kyverno-test.yaml");
        let entries = global_entries(
            &json!([
                {"name": "files", "resourceFiles": ["deployments.yaml"]},
                {"name": "inline", "resources": [{"kind": "Pod", "metadata": {"name": "p"}}],
                 "fieldPath": "[].metadata.name"},
                {"name": "projected", "data": {"team": {"size": 3, "lead": "ann"}},
                 "fieldPath": "team", "projections": [{"name": "size", "path": "size"}]},
                {"name": "empty"}
            ]),
            dir.path(),
            &file,
        )
        .unwrap();
        let names: Vec<&serde_json::Value> = entries["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["metadata"]["name"])
            .collect();
        assert_eq!(
            names,
            [&json!("a"), &json!("b")],
            "empty documents are skipped"
        );
        assert_eq!(entries["inline"], json!(["p"]));
        assert_eq!(entries["projected"], json!({"size": 3}));
        assert_eq!(entries["empty"], serde_json::Value::Null);
        let err = global_entries(
            &json!([{"name": "x", "data": {}, "resources": []}]),
            dir.path(),
            &file,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("mutually exclusive"), "{err}");
        let err = global_entries(&json!([{"name": "x"}, {"name": "x"}]), dir.path(), &file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate"), "{err}");
    }

    #[test]
    fn api_call_responses_are_checked_as_kyverno_checks_them() {
        let file = std::path::Path::new("kyverno-test.yaml");
        let answers = http_answers(
            &json!([
                {"url": "https://svc.example/check", "method": "post", "response": {"body": {"ok": true}}},
                {"urlPath": "/api/v1/namespaces", "response": {"statusCode": 404, "body": {}}}
            ]),
            file,
        )
        .unwrap();
        assert_eq!(answers[0].method.as_deref(), Some("POST"));
        assert_eq!((answers[0].status, answers[1].status), (200, 404));
        assert_eq!(answers[1].url, "/api/v1/namespaces");
        for (bad, why) in [
            (json!({"response": {"body": {}}}), "either url or urlPath"),
            (
                json!({"url": "https://a", "urlPath": "/b", "response": {"body": {}}}),
                "mutually exclusive",
            ),
            (
                json!({"url": "ftp://a", "response": {"body": {}}}),
                "absolute https/http",
            ),
            (
                json!({"urlPath": "b", "response": {"body": {}}}),
                "starting with '/'",
            ),
            (
                json!({"url": "https://a", "method": "PUT", "response": {"body": {}}}),
                "GET or POST",
            ),
            (
                json!({"url": "https://a", "response": {"body": [1]}}),
                "JSON object",
            ),
            (
                json!({"url": "https://a", "response": {"statusCode": 99, "body": {}}}),
                "between 100 and 599",
            ),
        ] {
            let err = http_answers(&json!([bad]), file).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        let twice = json!({"url": "https://a", "response": {"body": {}}});
        let err = http_answers(&json!([twice, twice]), file)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate"), "{err}");
    }

    #[test]
    fn cluster_resources_hold_spec_resources_crds_and_plain_objects() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        std::fs::create_dir(dir.path().join("crds")).unwrap();
        write(
            "crds/widget.yaml",
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.io}\n",
        );
        write(
            "cluster.yaml",
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: ClusterResource\nmetadata: {name: c}\nspec:\n  crds: [crds/widget.yaml]\n  resources:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: x}}\n  - {apiVersion: example.io/v1, kind: Widget, metadata: {name: w}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
        );
        let objects = read_cluster_resources(&dir.path().join("cluster.yaml"), dir.path()).unwrap();
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "Widget",
                "CustomResourceDefinition",
                "Namespace"
            ]
        );
        // Nothing is defaulted: a cluster-scoped object keeps no namespace.
        assert!(objects[1]["metadata"]["namespace"].is_null());
    }

    #[test]
    fn cluster_resources_errors_name_the_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster.yaml");
        let cases = [
            (
                "kind: ClusterResource\nspec:\n  resources:\n  - {kind: ConfigMap}\n",
                "spec.resources[0] is not a Kubernetes object",
            ),
            (
                "kind: ClusterResource\nspec:\n  resources: {a: 1}\n",
                "spec.resources must be a list",
            ),
            (
                "kind: ClusterResource\nspec:\n  crds: [missing.yaml]\n",
                "spec.crds",
            ),
            (
                "just: data\n",
                "neither a ClusterResource nor a Kubernetes object",
            ),
        ];
        for (text, want) in cases {
            std::fs::write(&file, text).unwrap();
            let err = format!(
                "{:#}",
                read_cluster_resources(&file, dir.path()).unwrap_err()
            );
            assert!(err.contains(want), "{text}: {err}");
            assert!(err.contains("cluster.yaml"), "{text}: {err}");
        }
        // A CRD file that holds something else.
        std::fs::write(
            dir.path().join("crd.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        )
        .unwrap();
        std::fs::write(&file, "kind: ClusterResource\nspec:\n  crds: [crd.yaml]\n").unwrap();
        let err = format!(
            "{:#}",
            read_cluster_resources(&file, dir.path()).unwrap_err()
        );
        assert!(
            err.contains("crd.yaml") && err.contains("not a CustomResourceDefinition"),
            "{err}"
        );
    }

    #[test]
    fn context_images_as_kyverno_image_data() {
        let cases = [
            (
                json!({"image": "a:1", "manifest": {"annotations": {"k": "v"}}}),
                json!({"image": "a:1", "resolvedImage": "", "registry": "", "repository": "",
                       "manifest": {"annotations": {"k": "v"}}}),
            ),
            (
                json!({"image": "a:1", "registry": "r.io", "tag": "1", "digest": "",
                       "config": {"architecture": "amd64"}, "imageIndex": null, "extra": 1}),
                json!({"image": "a:1", "resolvedImage": "", "registry": "r.io", "repository": "",
                       "tag": "1", "config": {"architecture": "amd64"}}),
            ),
        ];
        for (entry, want) in cases {
            assert_eq!(image_data(&entry), want, "{entry}");
        }
    }
}
