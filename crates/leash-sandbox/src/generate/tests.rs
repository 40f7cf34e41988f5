use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::*;

fn spec(
    kinds: &[(&str, usize)],
    namespaces: usize,
    crds: Option<(usize, usize)>,
    seed: u64,
) -> GenerateSpec {
    GenerateSpec {
        kinds: kinds.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        namespaces,
        crds,
        seed,
    }
}

fn all_kinds(count: usize) -> Vec<(&'static str, usize)> {
    [
        "namespaces",
        "nodes",
        "pods",
        "configmaps",
        "secrets",
        "services",
        "serviceaccounts",
        "events",
        "deployments.apps",
        "statefulsets.apps",
        "daemonsets.apps",
        "replicasets.apps",
        "jobs.batch",
        "cronjobs.batch",
    ]
    .into_iter()
    .map(|k| (k, count))
    .collect()
}

fn json_text(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_json::to_string(o).expect("serializable"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{pointer} missing in {obj}"))
}

#[test]
fn same_spec_gives_byte_identical_json() {
    let s = spec(&all_kinds(40), 5, Some((3, 20)), 42);
    let first = json_text(&generate(&s).unwrap());
    let second = json_text(&generate(&s).unwrap());
    assert_eq!(first, second);
    let other_seed = json_text(&generate(&GenerateSpec { seed: 43, ..s }).unwrap());
    assert_ne!(first, other_seed, "the seed must change the contents");
}

#[test]
fn adding_a_kind_leaves_the_others_unchanged() {
    let alone = generate(&spec(&[("pods", 30)], 4, None, 7)).unwrap();
    let with_more = generate(&spec(
        &[("deploy", 10), ("pods", 30), ("cm", 5)],
        4,
        None,
        7,
    ))
    .unwrap();
    let pods: Vec<&Value> = with_more.iter().filter(|o| o["kind"] == "Pod").collect();
    let alone_pods: Vec<&Value> = alone.iter().filter(|o| o["kind"] == "Pod").collect();
    assert_eq!(pods, alone_pods);
}

#[test]
fn pods_serialize_to_two_to_six_kilobytes() {
    let objects = generate(&spec(&[("pods", 1000)], 4, None, 0)).unwrap();
    let sizes: Vec<usize> = objects
        .iter()
        .filter(|o| o["kind"] == "Pod")
        .map(|o| serde_json::to_vec(o).unwrap().len())
        .collect();
    assert_eq!(sizes.len(), 1000);
    let (min, max) = (*sizes.iter().min().unwrap(), *sizes.iter().max().unwrap());
    let mean = sizes.iter().sum::<usize>() / sizes.len();
    eprintln!("pod JSON bytes: min {min}, mean {mean}, max {max}");
    assert!(min >= 2048, "smallest pod is {min} bytes");
    assert!(max <= 6144, "largest pod is {max} bytes");
}

#[test]
fn pods_have_the_shape_of_real_pods() {
    let objects = generate(&spec(&[("pods", 200)], 2, None, 3)).unwrap();
    let mut container_counts = BTreeSet::new();
    for pod in objects.iter().filter(|o| o["kind"] == "Pod") {
        assert_eq!(pod["apiVersion"], "v1");
        assert!(
            pod.pointer("/metadata/labels/app.kubernetes.io~1name")
                .is_some()
        );
        assert!(
            !pod["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .is_empty()
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(pod["metadata"].get("uid").is_none());
        assert!(pod["metadata"].get("resourceVersion").is_none());
        assert!(pod["metadata"].get("creationTimestamp").is_none());
        let containers = pod["spec"]["containers"].as_array().unwrap();
        container_counts.insert(containers.len());
        for field in [
            "image",
            "ports",
            "env",
            "resources",
            "livenessProbe",
            "readinessProbe",
            "volumeMounts",
        ] {
            assert!(
                containers[0].get(field).is_some(),
                "main container lacks {field}"
            );
        }
        for sidecar in &containers[1..] {
            for field in ["image", "ports", "resources", "volumeMounts"] {
                assert!(
                    sidecar.get(field).is_some(),
                    "sidecar lacks {field}: {sidecar}"
                );
            }
        }
        assert!(!pod["spec"]["volumes"].as_array().unwrap().is_empty());
        assert_eq!(pod["status"]["phase"], "Running");
        assert!(pod["status"]["conditions"].as_array().unwrap().len() >= 4);
        assert_eq!(
            pod["status"]["containerStatuses"].as_array().unwrap().len(),
            containers.len()
        );
    }
    assert_eq!(container_counts, BTreeSet::from([1, 2, 3]));
}

#[test]
fn workloads_carry_pod_templates_that_match_their_selectors() {
    let kinds = [
        ("deployments.apps", 20),
        ("sts", 20),
        ("ds", 20),
        ("rs", 20),
        ("jobs", 20),
    ];
    let objects = generate(&spec(&kinds, 3, None, 5)).unwrap();
    for obj in objects.iter().filter(|o| o["kind"] != "Namespace") {
        let template_labels = obj["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        let selector = obj["spec"]["selector"]["matchLabels"].as_object().unwrap();
        for (key, value) in selector {
            assert_eq!(
                template_labels.get(key),
                Some(value),
                "{} selector {key}",
                obj["kind"]
            );
        }
        assert!(
            !obj["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .is_empty()
        );
    }
    let cronjob = &generate(&spec(&[("cj", 1)], 1, None, 5)).unwrap()[1];
    assert!(
        cronjob
            .pointer("/spec/jobTemplate/spec/template/spec/containers/0/image")
            .is_some()
    );
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[test]
fn names_are_valid_and_unique_per_kind_and_namespace() {
    let objects = generate(&spec(&all_kinds(300), 4, Some((2, 300)), 11)).unwrap();
    let mut seen = BTreeSet::new();
    for obj in &objects {
        let name = str_at(obj, "/metadata/name");
        assert!(is_dns_subdomain(name), "invalid name {name:?}");
        assert!(
            name.len() <= 63 || obj["kind"] == "Event",
            "{name} is longer than a label"
        );
        let key = (
            obj["kind"].as_str().unwrap().to_owned(),
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            name.to_owned(),
        );
        assert!(seen.insert(key.clone()), "duplicate {key:?}");
    }
    assert_eq!(seen.len(), objects.len());
}

#[test]
fn namespaced_objects_spread_round_robin_and_namespaces_come_first() {
    let objects = generate(&spec(&[("nodes", 3), ("pods", 10)], 4, Some((1, 6)), 1)).unwrap();
    let names: Vec<&str> = objects[..4]
        .iter()
        .map(|o| str_at(o, "/metadata/name"))
        .collect();
    assert_eq!(names, ["ns-0000", "ns-0001", "ns-0002", "ns-0003"]);
    assert!(objects[..4].iter().all(|o| o["kind"] == "Namespace"));
    assert_eq!(objects[4]["kind"], "CustomResourceDefinition");
    let mut per_namespace: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, pod) in objects.iter().filter(|o| o["kind"] == "Pod").enumerate() {
        let ns = str_at(pod, "/metadata/namespace");
        assert_eq!(ns, format!("ns-{:04}", i % 4));
        *per_namespace.entry(ns).or_default() += 1;
    }
    assert_eq!(
        per_namespace.into_values().collect::<Vec<_>>(),
        [3, 3, 2, 2]
    );
    // Nodes are cluster-scoped and pods are scheduled onto generated nodes.
    let nodes: BTreeSet<&str> = objects
        .iter()
        .filter(|o| o["kind"] == "Node")
        .map(|o| {
            assert!(o["metadata"].get("namespace").is_none());
            str_at(o, "/metadata/name")
        })
        .collect();
    assert_eq!(nodes.len(), 3);
    for pod in objects.iter().filter(|o| o["kind"] == "Pod") {
        assert!(nodes.contains(str_at(pod, "/spec/nodeName")));
    }
}

#[test]
fn zero_namespaces_puts_namespaced_objects_in_default() {
    let objects = generate(&spec(&[("cm", 3)], 0, None, 0)).unwrap();
    assert_eq!(objects.len(), 3);
    assert!(
        objects
            .iter()
            .all(|o| o["metadata"]["namespace"] == "default")
    );
}

#[test]
fn crds_follow_the_contract_naming() {
    let objects = generate(&spec(&[], 2, Some((2, 3)), 0)).unwrap();
    assert_eq!(objects.len(), 2 + 2 + 6);
    let crd = &objects[3];
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(
        str_at(crd, "/metadata/name"),
        "widget0001s.example.leash.dev"
    );
    assert_eq!(str_at(crd, "/spec/group"), "example.leash.dev");
    assert_eq!(str_at(crd, "/spec/scope"), "Namespaced");
    assert_eq!(str_at(crd, "/spec/names/kind"), "Widget0001");
    assert_eq!(str_at(crd, "/spec/names/plural"), "widget0001s");
    assert_eq!(str_at(crd, "/spec/names/singular"), "widget0001");
    assert_eq!(str_at(crd, "/spec/names/listKind"), "Widget0001List");
    assert_eq!(str_at(crd, "/spec/names/shortNames/0"), "wg0001");
    assert_eq!(str_at(crd, "/spec/names/categories/0"), "widgets");
    assert_eq!(str_at(crd, "/spec/versions/0/name"), "v1");
    let widgets: Vec<(&str, &str, &str)> = objects[4..]
        .iter()
        .map(|o| {
            assert_eq!(o["apiVersion"], "example.leash.dev/v1");
            (
                str_at(o, "/kind"),
                str_at(o, "/metadata/name"),
                str_at(o, "/metadata/namespace"),
            )
        })
        .collect();
    assert_eq!(
        widgets,
        [
            ("Widget0000", "widget0000-00000", "ns-0000"),
            ("Widget0000", "widget0000-00001", "ns-0001"),
            ("Widget0000", "widget0000-00002", "ns-0000"),
            ("Widget0001", "widget0001-00000", "ns-0000"),
            ("Widget0001", "widget0001-00001", "ns-0001"),
            ("Widget0001", "widget0001-00002", "ns-0000"),
        ]
    );
    assert_eq!(crd_plural(7), "widget0007s");
    assert_eq!(crd_kind(7), "Widget0007");
    assert_eq!(crd_object_name(7, 42), "widget0007-00042");
}

#[test]
fn every_kind_serializes_to_a_plausible_size() {
    let objects = generate(&spec(&all_kinds(50), 4, Some((1, 50)), 9)).unwrap();
    let mut sizes: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for obj in &objects {
        let kind = obj["kind"].as_str().unwrap().to_owned();
        sizes
            .entry(kind)
            .or_default()
            .push(serde_json::to_vec(obj).unwrap().len());
    }
    for (kind, s) in &sizes {
        let mean = s.iter().sum::<usize>() / s.len();
        eprintln!(
            "{kind}: {} objects, mean {mean} bytes, max {}",
            s.len(),
            s.iter().max().unwrap()
        );
        assert!(
            mean >= 150,
            "{kind} objects are implausibly small ({mean} bytes)"
        );
        assert!(
            *s.iter().max().unwrap() <= 16 * 1024,
            "{kind} objects are too large"
        );
    }
    assert_eq!(sizes.len(), 16, "{:?}", sizes.keys().collect::<Vec<_>>());
}

#[test]
fn unknown_kind_is_named_with_the_valid_names() {
    let err = generate(&spec(&[("pods", 1), ("gizmos", 2)], 1, None, 0)).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(message.contains("\"gizmos\""), "{message}");
    for valid in [
        "pods (pod, po)",
        "deployments.apps (deployment, deploy)",
        "configmaps (configmap, cm)",
    ] {
        assert!(message.contains(valid), "{message} lacks {valid}");
    }
    let parse_err = parse_generate("pods=1,gizmos=2").unwrap_err();
    assert!(parse_err.to_string().contains("\"gizmos\""));
}

#[test]
fn parse_generate_accepts_kubectl_names_and_rejects_bad_entries() {
    assert_eq!(
        parse_generate("pods=1000, deployments.apps=50,cm=3,po.v1=0")
            .unwrap_err()
            .to_string(),
        "invalid argument: pods is given twice in --generate (as \"pods\" and \"po.v1\")"
    );
    assert_eq!(
        parse_generate("pods=1000, deploy=50,cm=3").unwrap(),
        [
            ("pods".to_owned(), 1000),
            ("deployments.apps".to_owned(), 50),
            ("configmaps".to_owned(), 3)
        ]
    );
    let message = |s: &str| parse_generate(s).unwrap_err().to_string();
    assert!(message("").contains("empty --generate value"));
    assert!(message(" ").contains("empty --generate value"));
    assert!(message("pods").contains("malformed --generate entry \"pods\""));
    assert!(message("=5").contains("malformed --generate entry \"=5\""));
    assert!(message("pods=1,").contains("malformed --generate entry \"\""));
    assert!(message("pods=-3").contains("invalid count \"-3\" for \"pods\""));
    assert!(message("pods=many").contains("invalid count \"many\""));
}

#[test]
fn parse_crds_reads_k_colon_m() {
    assert_eq!(parse_crds("10:100").unwrap(), (10, 100));
    assert_eq!(parse_crds("0:0").unwrap(), (0, 0));
    for bad in ["10", "a:1", "1:b", "1:-1", ":", "1:2:3"] {
        let err = parse_crds(bad).unwrap_err();
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
}

#[test]
fn oversized_specs_are_refused_before_allocating() {
    let err = generate(&spec(&[("pods", MAX_OBJECTS)], 4, None, 0)).unwrap_err();
    assert!(err.to_string().contains("more than the limit"), "{err}");
    let err = generate(&spec(&[], 4, Some((usize::MAX, usize::MAX)), 0)).unwrap_err();
    assert!(err.to_string().contains("more than the limit"), "{err}");
}

#[test]
fn output_is_pinned_so_benchmarks_stay_comparable() {
    // If this fails, the generator's output changed: update the digest only
    // if the change is intended (runs on either side of it generate
    // different objects, so their benchmark figures are not comparable).
    let objects = generate(&spec(&all_kinds(20), 3, Some((2, 10)), 2026)).unwrap();
    let text = json_text(&objects);
    let digest = entropy::fnv1a(text.as_bytes());
    eprintln!(
        "{} objects, {} bytes, digest {digest:#018x}",
        objects.len(),
        text.len()
    );
    assert_eq!(
        (objects.len(), text.len(), digest),
        (305, 598_016, 0xd1fd_bafa_e89b_9bbe)
    );
}

#[test]
fn the_iterator_knows_its_length_and_kinds_before_building_anything() {
    let s = spec(
        &[("pods", 7), ("namespaces", 2), ("cm", 3)],
        3,
        Some((2, 4)),
        1,
    );
    let generated = generate_iter(&s).unwrap();
    let counts = generated.kind_counts().clone();
    assert_eq!(generated.len(), 3 + 2 + 7 + 2 + 3 + 2 * 4);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut left = generated.len();
    for object in generated {
        *seen.entry(str_at(&object, "/kind").to_owned()).or_default() += 1;
        left -= 1;
    }
    assert_eq!(left, 0);
    assert_eq!(seen, counts);
    assert_eq!(
        counts["Namespace"],
        3 + 2,
        "spread and idle namespaces add up"
    );
    assert_eq!(counts["Widget0001"], 4);
}

/// README, `--generate`: `namespaces=N` adds N empty namespaces named
/// `ns-idle-0000`, ... after the spread ones (`ns-0000`, ...), and nothing
/// is generated into them.
#[test]
fn idle_namespaces_are_named_after_the_spread_ones_and_stay_empty() {
    let objects = generate(&spec(&[("namespaces", 2), ("pods", 6)], 3, None, 1)).unwrap();
    let namespaces: Vec<&str> = objects
        .iter()
        .filter(|o| str_at(o, "/kind") == "Namespace")
        .map(|o| str_at(o, "/metadata/name"))
        .collect();
    assert_eq!(
        namespaces,
        [
            "ns-0000",
            "ns-0001",
            "ns-0002",
            "ns-idle-0000",
            "ns-idle-0001"
        ]
    );
    assert!(
        objects
            .iter()
            .filter_map(|o| o.pointer("/metadata/namespace").and_then(|n| n.as_str()))
            .all(|ns| !ns.starts_with("ns-idle-")),
        "idle namespaces stay empty"
    );
}
