//! Table-driven tests of the CEL environment and libraries.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::request::NoClusterData;

/// A request for the Pod `p`.
fn pod_request() -> EvalRequest {
    EvalRequest::create(Arc::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
    ))
}

fn eval_in(expr: &str, act: &Activation<'_, '_>) -> Result<Value, String> {
    Expr::compile(expr)?.eval(act)
}

fn eval(expr: &str) -> Result<Value, String> {
    eval_in(expr, &Activation::new(&pod_request(), &NoClusterData))
}

/// Each of `cases` is true in `act`.
#[track_caller]
fn assert_true_in(act: &Activation<'_, '_>, cases: &[&str]) {
    for expr in cases {
        assert_eq!(eval_in(expr, act), Ok(Value::Bool(true)), "{expr}");
    }
}

/// `expr` fails in `act` with an error that contains `want`.
#[track_caller]
fn assert_fails_in(act: &Activation<'_, '_>, expr: &str, want: &str) {
    let got = eval_in(expr, act);
    assert!(
        got.as_ref().is_err_and(|e| e.contains(want)),
        "{expr}: {got:?}"
    );
}

#[test]
fn true_expressions() {
    let cases = [
        // activation
        "object.metadata.name == 'p'",
        "oldObject == null",
        "params == null",
        "request.operation == 'CREATE'",
        "request.kind.kind == 'Pod' && request.kind.version == 'v1' && request.kind.group == ''",
        "request.resource.resource == 'pods'",
        "request.name == 'p' && request.namespace == ''",
        "namespaceObject == null",
        // optional syntax
        "object.?spec.?containers.orValue([]) == []",
        "!object.metadata.?labels.hasValue()",
        "object.metadata[?'name'].orValue('') == 'p'",
        "optional.of(1).value() == 1",
        "optional.of(1).orValue(2) == 1 && optional.none().orValue(2) == 2",
        "!optional.none().hasValue()",
        "optional.of([1]).orValue([]) == [1] && optional.none().orValue([]) == []",
        // orValue on a plain value returns it (cel-go before v0.28, Kyverno's compat)
        "[1].orValue([]) == [1]",
        "'a'.orValue('b') == 'a'",
        "1.orValue(2) == 1",
        "{'a': ['x']}.a.orValue([]).size() == 1",
        "object.metadata.name.orValue('') == 'p'",
        "has(object.metadata.name) && !has(object.metadata.labels)",
        // strings extension
        "'a,b'.split(',') == ['a', 'b']",
        "['a', 'b'].join('-') == 'a-b'",
        "' x '.trim() == 'x'",
        "'AbC'.lowerAscii() == 'abc' && 'abc'.upperAscii() == 'ABC'",
        "'aaa'.replace('a', 'b') == 'bbb'",
        "'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3",
        "'hello'.substring(1, 3) == 'el' && 'hello'.charAt(1) == 'e'",
        "'%s-%d'.format(['a', 1]) == 'a-1'",
        "'abc'.matches('^a.c$')",
        // lists
        "[1, 2, 3].isSorted() && ![3, 1].isSorted()",
        "[1, 2, 3].sum() == 6",
        "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3",
        "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1",
        "[1, 2, 3].exists_one(x, x == 2)",
        "[1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]",
        // sets, jsonpatch
        "sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [1, 2]) && sets.contains([1], [])",
        "sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 2])",
        "sets.intersects(['a', 'b'], ['b']) && !sets.intersects(['a'], ['c']) && !sets.intersects([], [])",
        "jsonpatch.escapeKey('a.io/b~c') == 'a.io~1b~0c'",
        "cel.bind(x, [1, 2], x.size() + x[0]) == 3",
        "cel.bind(c, object.metadata, cel.bind(n, c.name, n + n)) == 'pp'",
        "cel.bind(e, [], e.size()) == 0",
        // regex
        "'abc123'.find('[0-9]+') == '123'",
        "'a1b2'.findAll('[0-9]') == ['1', '2']",
        "'a1b2c3'.findAll('[0-9]', 2) == ['1', '2']",
        // quantity
        "quantity('1Gi').isGreaterThan(quantity('1G'))",
        "quantity('500m').isLessThan(quantity('1'))",
        "quantity('1k').compareTo(quantity('1000')) == 0",
        "quantity('2').asInteger() == 2",
        "quantity('1.5').asApproximateFloat() == 1.5",
        "!quantity('1.5').isInteger()",
        "quantity('1').add(quantity('500m')) == quantity('1500m')",
        "quantity('1').sub(1).asInteger() == 0",
        "quantity('1').add(2).asInteger() == 3",
        "isQuantity('10Mi') && !isQuantity('ten')",
        "quantity('1e3').asInteger() == 1000",
        "quantity('-1').sign() == -1",
        // semver
        "semver('1.2.3').isLessThan(semver('1.10.0'))",
        "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
        "isSemver('1.0.0') && !isSemver('v1.0') && isSemver('v1.0', true)",
        "semver('2.0.0').compareTo(semver('1.0.0')) == 1",
        // url
        "url('https://example.com:8080/path?a=1&a=2').getHost() == 'example.com:8080'",
        "url('https://example.com:8080/path').getHostname() == 'example.com'",
        "url('https://example.com:8080/path').getPort() == '8080'",
        "url('https://example.com/path').getScheme() == 'https'",
        "url('https://example.com/path').getEscapedPath() == '/path'",
        "url('https://example.com/?a=1&a=2&b=3').getQuery() == {'a': ['1', '2'], 'b': ['3']}",
        "isURL('/absolute') && !isURL('relative')",
        // ip, cidr
        "ip('10.0.0.1').family() == 4 && ip('::1').family() == 6",
        "ip('127.0.0.1').isLoopback() && ip('0.0.0.0').isUnspecified()",
        "ip('8.8.8.8').isGlobalUnicast() && !ip('169.254.1.1').isGlobalUnicast()",
        "ip('169.254.1.1').isLinkLocalUnicast() && ip('224.0.0.1').isLinkLocalMulticast()",
        "isIP('1.2.3.4') && !isIP('1.2.3') && !isIP('::ffff:1.2.3.4')",
        "cidr('10.0.0.0/8').containsIP(ip('10.1.2.3')) && !cidr('10.0.0.0/8').containsIP('11.0.0.1')",
        "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
        "cidr('10.1.2.3/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.0/8').prefixLength() == 8",
        "cidr('10.1.2.3/8').ip() == ip('10.1.2.3')",
        "isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0')",
        // image
        "image('nginx').registry() == 'index.docker.io' && image('nginx').repository() == 'library/nginx'",
        "image('nginx').tag() == 'latest' && !image('nginx').containsDigest()",
        "image('ghcr.io/kyverno/kyverno:v1.0').registry() == 'ghcr.io' && image('ghcr.io/kyverno/kyverno:v1.0').tag() == 'v1.0'",
        "image('localhost:5000/app@sha256:a0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde').containsDigest()",
        "isImage('nginx:1.2') && !isImage('UPPER:case')",
        // base64
        "base64.encode(b'hi') == 'aGk='",
        // math
        "math.greatest(1, 3, 2) == 3",
        // Kyverno's hash library: lowercase hex digests of the UTF-8 bytes
        "md5('a') == '0cc175b9c0f1b6a831c399e269772661'",
        "sha1('a') == '86f7e437faa5a7fce15d1ddcb9eaeaea377667b8'",
        "sha256('a') == 'ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb'",
        "sha256('') == 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'",
        // Kyverno's JSON and YAML libraries
        "json.unmarshal('{\"a\": 1, \"b\": [true, \"x\"], \"c\": null}').b[1] == 'x'",
        "json.unmarshal('{\"a\": 1}').a == 1 && json.unmarshal('[1.5]')[0] == 1.5",
        "json.unmarshal('null') == null",
        "yaml.parse('k: v\\nn: 2\\nl: [a, b]').l[1] == 'b'",
        "yaml.parse('k: v\\nn: 2').n == 2",
        // Kyverno's user library
        "parseServiceAccount('system:serviceaccount:ns:sa') == {'Namespace': 'ns', 'Name': 'sa'}",
        "parseServiceAccount('system:serviceaccount:ns:a:b').Name == 'a:b'",
        "parseServiceAccount('system:serviceaccount:ns').Name == ''",
        "parseServiceAccount('alice') == {'Namespace': '', 'Name': ''}",
    ];
    let mut failures = Vec::new();
    for case in cases {
        match eval(case) {
            Ok(Value::Bool(true)) => {}
            other => failures.push(format!("{case}: {other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "failing cases:\n{}",
        failures.join("\n")
    );
}

#[test]
fn errors() {
    let cases = [
        ("object.spec.containers", "no such key: spec"),
        // A receiver that fails is an error, not the default.
        ("object.spec.containers.orValue([])", "no such key"),
        ("quantity('ten')", "quantities must match"),
        ("[].min()", "empty list"),
        ("ip('x')", "parse error"),
        ("url('rel')", "URL parse error"),
        (
            "resource.Get('v1', 'configmaps', 'ns', 'missing')",
            "not found",
        ),
        ("json.unmarshal('{')", "invalid JSON"),
        ("yaml.parse('a: [')", "invalid YAML"),
        ("sha256(1)", "sha256"),
        ("parseServiceAccount(1)", "parseServiceAccount"),
    ];
    for (expr, want) in cases {
        match eval(expr) {
            Err(e) => assert!(e.contains(want), "{expr}: {e}"),
            Ok(v) => panic!("{expr}: expected an error, got {v:?}"),
        }
    }
}

#[test]
fn parse_errors() {
    assert!(Expr::compile("object.").is_err());
    assert!(Expr::compile("1 +").is_err());
    assert!(
        Expr::compile("cel.bind(1, 2, 3)").is_err(),
        "cel.bind needs an identifier"
    );
}

#[test]
fn quantities() {
    for (text, nanos) in [
        ("1", 1_000_000_000i128),
        ("1m", 1_000_000),
        ("1Ki", 1024 * 1_000_000_000),
        ("0.5", 500_000_000),
        ("1n", 1),
        ("1e-9", 1),
        ("-2k", -2_000_000_000_000),
    ] {
        assert_eq!(
            libs::Quantity::parse_exact(text).map(|q| q
                == libs::Quantity::parse_exact(&format!("{nanos}n"))
                    .unwrap_or(libs::Quantity::parse_exact("0").unwrap())),
            Some(true),
            "{text}"
        );
    }
    for bad in ["", "1x", "1.2.3", "Gi", " 1"] {
        assert!(libs::Quantity::parse_exact(bad).is_none(), "{bad}");
    }
}

/// Cluster data holding the metadata of one image, and answering every
/// `http` call with what it was asked.
#[derive(Debug)]
struct OneImageAndEcho;

impl crate::request::ClusterData for OneImageAndEcho {
    fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<serde_json::Value>> {
        None
    }
    fn list(&self, _: &str, _: &str, _: &str) -> Vec<Arc<serde_json::Value>> {
        Vec::new()
    }
    fn image_data(&self, image: &str) -> Result<serde_json::Value, String> {
        (image == "ghcr.io/x/app:1")
            .then(|| {
                json!({"image": image, "registry": "", "resolvedImage": "", "repository": "",
                       "config": {"architecture": "arm64", "Env": ["A=1"]},
                       "manifest": {"annotations": {"base": "distroless"}}})
            })
            .ok_or_else(|| format!("image data for {image} not found"))
    }
    fn http_call(
        &self,
        method: &str,
        url: &str,
        body: Option<&serde_json::Value>,
    ) -> Option<serde_json::Value> {
        (url != "https://nowhere").then(
            || json!({"statusCode": 200, "body": {"method": method, "url": url, "sent": body}}),
        )
    }
}

#[test]
fn image_metadata() {
    let req = pod_request();
    let act = Activation::new(&req, &OneImageAndEcho);
    let cases: [(&str, Result<Value, &str>); 5] = [
        (
            "image.GetMetadata('ghcr.io/x/app:1').config.architecture",
            Ok(Value::String(Arc::new("arm64".into()))),
        ),
        (
            "image.GetMetadata('ghcr.io/x/app:1').manifest.annotations['base'] == 'distroless'",
            Ok(Value::Bool(true)),
        ),
        (
            "'A=1' in image.GetMetadata('ghcr.io/x/app:1').config.Env",
            Ok(Value::Bool(true)),
        ),
        // The image(ref) function is still there beside the variable.
        (
            "image('ghcr.io/x/app:1').registry()",
            Ok(Value::String(Arc::new("ghcr.io".into()))),
        ),
        // An image the data does not hold is an error, as Kyverno's.
        (
            "image.GetMetadata('ghcr.io/x/app:2')",
            Err("image data for ghcr.io/x/app:2 not found"),
        ),
    ];
    for (expr, want) in cases {
        match (eval_in(expr, &act), want) {
            (Ok(v), Ok(w)) => assert_eq!(v, w, "{expr}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{expr}: {e}"),
            (got, want) => panic!("{expr}: got {got:?}, want {want:?}"),
        }
    }
}

/// One ConfigMap, `ns/settings`, for the resource library.
#[derive(Debug)]
struct OneConfigMap;

impl OneConfigMap {
    fn object() -> Arc<serde_json::Value> {
        Arc::new(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "ns"},
            "data": {"mode": "strict"}
        }))
    }
}

impl crate::request::ClusterData for OneConfigMap {
    fn get(&self, api: &str, res: &str, ns: &str, name: &str) -> Option<Arc<serde_json::Value>> {
        ((api, res, ns, name) == ("v1", "configmaps", "ns", "settings")).then(Self::object)
    }
    fn list(&self, api: &str, res: &str, ns: &str) -> Vec<Arc<serde_json::Value>> {
        if (api, res) == ("v1", "configmaps") && (ns.is_empty() || ns == "ns") {
            vec![Self::object()]
        } else {
            Vec::new()
        }
    }
}

/// `resource.get/list` and `generator.apply`, the lower-case spellings
/// Kyverno accepts, are `resource.Get/List` and `generator.Apply`.
#[test]
fn lower_case_library_functions() {
    let req = pod_request();
    let sink = super::libs::GeneratedSink::default();
    let mut act = Activation::new(&req, &OneConfigMap);
    act.bind_generator(&sink);
    let cases = [
        "resource.get('v1', 'configmaps', 'ns', 'settings').data.mode == 'strict'",
        "resource.get('v1', 'configmaps', 'ns', 'settings') == resource.Get('v1', 'configmaps', 'ns', 'settings')",
        "resource.list('v1', 'configmaps', 'ns').items.size() == 1",
        "resource.list('v1', 'configmaps', 'other').items.size() == 0",
        "generator.apply('ns', [{'kind': 'ConfigMap'}]) == generator.Apply('ns', [{'kind': 'ConfigMap'}])",
    ];
    assert_true_in(&act, &cases);
    let missing = "resource.get('v1', 'configmaps', 'ns', 'missing')";
    assert_fails_in(&act, missing, "not found");
    drop(act);
    // Both spellings recorded their call.
    let calls = sink.into_inner().unwrap();
    let kinds: Vec<(&str, &serde_json::Value)> = calls
        .iter()
        .map(|(ns, objects)| (ns.as_str(), &objects[0]["kind"]))
        .collect();
    assert_eq!(
        kinds,
        [("ns", &json!("ConfigMap")), ("ns", &json!("ConfigMap"))]
    );
    // Outside a GeneratingPolicy's evaluation nothing can be generated.
    let plain = Activation::new(&req, &OneConfigMap);
    assert_fails_in(&plain, "generator.Apply('ns', [])", "GeneratingPolicy");
}

/// Kyverno's `http` library: `Get` (with or without headers), `Post`
/// (with or without headers) and `Client`, answered by the cluster data.
#[test]
fn http_library_calls_the_cluster_data() {
    let req = pod_request();
    let act = Activation::new(&req, &OneImageAndEcho);
    let cases = [
        "http.Get('https://a').body == {'method': 'GET', 'url': 'https://a', 'sent': null}",
        "http.Get('https://a', {'X': 'y'}).body.method == 'GET'",
        "http.Post('https://b', {'name': object.metadata.name}).body.sent.name == 'p'",
        "http.Post('https://b', {'k': 1}, {'X': 'y'}).body.method == 'POST'",
        "http.Client('pem').Get('https://c').statusCode == 200",
    ];
    assert_true_in(&act, &cases);
    // globalContext.Get keeps its meaning beside http.Get/2.
    let global = "globalContext.Get('x', '')";
    assert_fails_in(&act, global, "global context entry \"x\" not found");
    let unanswered = "http.Get('https://nowhere')";
    assert_fails_in(&act, unanswered, "no answer from https://nowhere");
}
