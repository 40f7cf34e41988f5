//! Kinds and namespaces against the sandbox's real discovery.

use leash_loader::{Error, KindSelection, LoadOptions, Loader, NamespaceSelection};
use leash_sandbox::Faults;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{assert_exactly_once, client, configmap, crds, load_all, namespace, sandbox};

/// Two namespaces with labelled configmaps, plus 2 custom kinds.
fn objects() -> Vec<Value> {
    let mut objects = crds(2, 4);
    objects.push(namespace("team-a"));
    objects.push(namespace("team-b"));
    for (ns, n) in [("team-a", 3), ("team-b", 5), ("default", 2)] {
        for i in 0..n {
            let tier = if i % 2 == 0 { "web" } else { "db" };
            objects.push(configmap(ns, &format!("cm-{i}"), json!({ "tier": tier })));
        }
    }
    objects
}

fn names(kinds: &[&str]) -> KindSelection {
    KindSelection::Names(kinds.iter().map(|s| (*s).to_owned()).collect())
}

/// Seed 001, "RESTMapping failure yields zero resources and success": an
/// unknown kind is an error naming it, before anything is loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_zero_resources_on_mapping_error() {
    let sb = sandbox(objects(), Faults::default(), 21).await;
    for bad in [
        "nosuchkind",
        "pods.nosuchgroup",
        "widget9999s.example.leash.dev",
    ] {
        let loader = Loader::new(
            client(&sb),
            LoadOptions {
                kinds: names(&["pods", bad]),
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let err = loader.resolve(&CancellationToken::new()).await.unwrap_err();
        assert!(
            matches!(&err, Error::UnknownKind { name } if name == bad),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains(bad));
        assert!(err.is_configuration());
    }
    sb.shutdown().await.unwrap();
}

/// kubectl's spellings resolve through the sandbox's discovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_names_resolve() {
    let sb = sandbox(objects(), Faults::default(), 22).await;
    let loader = Loader::new(client(&sb), LoadOptions::default()).unwrap();
    let catalog = loader.discover(&CancellationToken::new()).await.unwrap();
    let cases = [
        ("pods", "pods"),
        ("po", "pods"),
        ("Pod", "pods"),
        ("cm", "configmaps"),
        ("deploy", "deployments.apps"),
        ("deployments.apps", "deployments.apps"),
        ("ns", "namespaces"),
        ("wg0001", "widget0001s.example.leash.dev"),
        ("Widget0001", "widget0001s.example.leash.dev"),
        ("widget0001", "widget0001s.example.leash.dev"),
        (
            "widget0000s.example.leash.dev",
            "widget0000s.example.leash.dev",
        ),
    ];
    for (arg, want) in cases {
        let got = leash_loader::resolve_one(&catalog, arg).map(|k| k.qualified_name());
        assert_eq!(got.as_deref().ok(), Some(want), "{arg}: {got:?}");
    }
    let all = leash_loader::resolve(
        &catalog,
        &KindSelection::All {
            include_events: false,
        },
    )
    .unwrap();
    let all: Vec<String> = all.iter().map(|k| k.qualified_name()).collect();
    for want in [
        "pods",
        "configmaps",
        "namespaces",
        "deployments.apps",
        "widget0001s.example.leash.dev",
    ] {
        assert!(
            all.contains(&want.to_owned()),
            "--all lacks {want}: {all:?}"
        );
    }
    assert!(
        !all.iter().any(|k| k.starts_with("events")),
        "--all includes events: {all:?}"
    );
    assert!(
        !all.iter().any(|k| k.contains('/')),
        "--all includes subresources: {all:?}"
    );
    let with_events = leash_loader::resolve(
        &catalog,
        &KindSelection::All {
            include_events: true,
        },
    )
    .unwrap();
    // The sandbox serves both Event APIs; each Event is loaded once, through
    // core `events` (issue 11: `--all --include-events` wrote each twice).
    let events: Vec<String> = with_events
        .iter()
        .map(|k| k.qualified_name())
        .filter(|n| n.starts_with("events"))
        .collect();
    assert_eq!(events, ["events"]);
    sb.shutdown().await.unwrap();
}

/// -n (several, fanned out per namespace), -A, the default namespace, -l,
/// and cluster-scoped kinds (which ignore -n).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_selectors_and_cluster_scope() {
    let sb = sandbox(objects(), Faults::default(), 23).await;
    let count = |namespaces: NamespaceSelection, selector: Option<&str>| {
        let options = LoadOptions {
            kinds: names(&["cm"]),
            namespaces,
            label_selector: selector.map(str::to_owned),
            ..LoadOptions::default()
        };
        let client = client(&sb);
        async move {
            let (objects, report) = load_all(client, options).await;
            assert!(
                report.is_complete(),
                "{:?}",
                report.failed().collect::<Vec<_>>()
            );
            let mut seen: Vec<String> = objects
                .iter()
                .map(|o| format!("{}/{}", o.namespace().unwrap_or(""), o.name()))
                .collect();
            seen.sort();
            (assert_exactly_once(&objects), report.kinds.len(), seen)
        }
    };
    let (n, tasks, _) = count(
        NamespaceSelection::Only(vec!["team-a".into(), "team-b".into()]),
        None,
    )
    .await;
    assert_eq!((n, tasks), (8, 2), "one task per (kind, namespace)");
    let (n, tasks, seen) = count(NamespaceSelection::Only(vec!["team-a".into()]), None).await;
    assert_eq!((n, tasks), (3, 1));
    assert!(seen.iter().all(|s| s.starts_with("team-a/")), "{seen:?}");
    let (n, _, _) = count(NamespaceSelection::Default, None).await;
    assert_eq!(n, 2, "the default namespace");
    let (n, tasks, _) = count(NamespaceSelection::All, None).await;
    assert!(n >= 10, "all namespaces: {n}");
    assert_eq!(tasks, 1);
    let (n, _, seen) = count(NamespaceSelection::All, Some("tier=web")).await;
    // team-a: cm-0, cm-2; team-b: cm-0, cm-2, cm-4; default: cm-0.
    assert_eq!(n, 6, "{seen:?}");
    let (n, _, _) = count(
        NamespaceSelection::Only(vec!["team-b".into()]),
        Some("tier in (db)"),
    )
    .await;
    assert_eq!(n, 2);

    // Cluster-scoped: -n is ignored, one task, every namespace object.
    let (objects, report) = load_all(
        client(&sb),
        LoadOptions {
            kinds: names(&["namespaces"]),
            namespaces: NamespaceSelection::Only(vec!["team-a".into(), "team-b".into()]),
            ..LoadOptions::default()
        },
    )
    .await;
    assert_eq!(report.kinds.len(), 1);
    assert_eq!(report.kinds[0].namespace, None);
    let names: Vec<&str> = objects.iter().map(|o| o.name()).collect();
    for want in ["default", "kube-system", "team-a", "team-b", "ns-0000"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    sb.shutdown().await.unwrap();
}

/// A bad selector is the server's 400: a configuration error, not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_selector_is_a_configuration_error() {
    let sb = sandbox(objects(), Faults::default(), 24).await;
    let (_, report) = load_all(
        client(&sb),
        LoadOptions {
            kinds: names(&["cm"]),
            namespaces: NamespaceSelection::All,
            label_selector: Some("tier in (".into()),
            ..LoadOptions::default()
        },
    )
    .await;
    let err = report.kinds[0]
        .error
        .as_ref()
        .expect("a bad selector fails");
    assert!(matches!(err, Error::BadRequest { .. }), "{err}");
    assert!(err.is_configuration());
    assert_eq!(report.kinds[0].retries, 0);
    sb.shutdown().await.unwrap();
}

/// Objects come out as the server sent them, plus the kind and apiVersion
/// that list items omit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_carry_kind_and_api_version() {
    let sb = sandbox(objects(), Faults::default(), 25).await;
    let (objects, report) = load_all(
        client(&sb),
        LoadOptions {
            kinds: names(&["cm", "deploy", "wg0000", "ns"]),
            namespaces: NamespaceSelection::All,
            page_size: 2,
            ..LoadOptions::default()
        },
    )
    .await;
    assert!(report.is_complete());
    assert!(
        report
            .kinds
            .iter()
            .find(|k| k.kind.plural == "configmaps")
            .unwrap()
            .pages
            >= 5
    );
    for o in &objects {
        let v = o.to_value().unwrap();
        assert_eq!(v["kind"], o.kind().kind.as_str(), "{}", o.json());
        assert_eq!(
            v["apiVersion"],
            o.kind().api_version().as_str(),
            "{}",
            o.json()
        );
        assert_eq!(v["metadata"]["name"], o.name());
    }
    let cm = objects
        .iter()
        .find(|o| o.kind().plural == "configmaps" && o.name() == "cm-1")
        .unwrap();
    assert_eq!(cm.to_value().unwrap()["data"]["k"], "cm-1");
    sb.shutdown().await.unwrap();
}
