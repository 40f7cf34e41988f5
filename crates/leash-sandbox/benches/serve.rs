//! One client reading 100,000 generated pods in pages of 500 (`limit=500` and
//! `continue`, as kubectl and kube-rs page) from the sandbox, against the same
//! client reading the very same page bodies from a hyper server that only hands
//! out prebuilt bytes (the loopback HTTP/1.1 limit of this machine), in the same
//! run. The client reads each body whole and takes the continue token from the
//! list metadata without parsing the items, so the figure is what the server
//! delivers. Run: `cargo bench -p leash-sandbox --bench serve`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use leash_runtime::Scope;
use leash_sandbox::generate::{GenerateSpec, generate};
use leash_sandbox::{Sandbox, SandboxConfig};
use tokio::net::{TcpListener, TcpStream};

const PODS: usize = 100_000;
const PAGE: usize = 500;

/// The continue token of a list body, read from its metadata (which comes first).
fn continue_token(body: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(&body[..body.len().min(1024)]).ok()?;
    let metadata = head.split("\"items\":").next()?;
    let rest = metadata.split("\"continue\":\"").nth(1)?;
    rest.split('"').next().map(str::to_string)
}

/// Reads every page over one keep-alive connection; returns the page bodies.
async fn read_pages(scope: &Scope, addr: SocketAddr, sandbox: bool) -> Vec<Bytes> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    scope.spawn("bench-client-connection", conn);
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let uri = match (sandbox, &token) {
            (true, None) => format!("/api/v1/pods?limit={PAGE}"),
            (true, Some(t)) => format!("/api/v1/pods?limit={PAGE}&continue={t}"),
            (false, _) => format!("/page/{}", pages.len()),
        };
        let req = http::Request::get(uri)
            .header(http::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .expect("request");
        sender.ready().await.expect("connection ready");
        let resp = sender.send_request(req).await.expect("response");
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        token = continue_token(&body);
        pages.push(body);
        if token.is_none() {
            return pages;
        }
    }
}

/// Serves `pages[i]` at `/page/i` with the same hyper HTTP/1.1 stack as the sandbox.
async fn static_server(scope: &Scope, pages: Arc<Vec<Bytes>>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = scope.handle();
    let token = scope.token().clone();
    scope.spawn("bench-static-accept", async move {
        while let Some(Ok((stream, _))) = token.run_until_cancelled(listener.accept()).await {
            stream.set_nodelay(true)?;
            let pages = pages.clone();
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let i: usize = req
                        .uri()
                        .path()
                        .trim_start_matches("/page/")
                        .parse()
                        .unwrap_or(0);
                    let body = pages.get(i).cloned().unwrap_or_default();
                    async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(body))) }
                });
            let token = token.clone();
            handle.spawn("bench-static-connection", async move {
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                token.run_until_cancelled(conn).await.transpose()?;
                Ok::<(), hyper::Error>(())
            });
        }
        Ok::<(), std::io::Error>(())
    });
    addr
}

fn serve(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let spec = GenerateSpec {
        kinds: vec![("pods".to_string(), PODS)],
        namespaces: 4,
        crds: None,
        seed: 1,
    };
    let objects = generate(&spec).expect("generate");
    let scope = Scope::new();
    let sandbox = rt
        .block_on(Sandbox::start(SandboxConfig {
            objects,
            ..SandboxConfig::default()
        }))
        .expect("sandbox");
    let pages = rt.block_on(read_pages(&scope, sandbox.addr(), true));
    let bytes: usize = pages.iter().map(Bytes::len).sum();
    let items: usize = pages
        .iter()
        .map(|p| p.windows(12).filter(|w| w == b"\"kind\":\"Pod\"").count())
        .sum();
    assert_eq!(items, PODS, "every pod listed once");
    assert_eq!(pages.len(), PODS / PAGE);
    eprintln!(
        "{} pages, {} MB of JSON, {} bytes per pod",
        pages.len(),
        bytes / 1_000_000,
        bytes / PODS
    );
    let pages = Arc::new(pages);
    let static_addr = rt.block_on(static_server(&scope, pages.clone()));

    let mut group = c.benchmark_group("list 100k pods in pages of 500");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(PODS as u64));
    group.bench_function("leash sandbox", |b| {
        b.to_async(&rt)
            .iter(|| async { read_pages(&scope, sandbox.addr(), true).await.len() })
    });
    group.bench_function("prebuilt bodies (HTTP limit)", |b| {
        b.to_async(&rt)
            .iter(|| async { read_pages(&scope, static_addr, false).await.len() })
    });
    group.finish();
    rt.block_on(async {
        sandbox.shutdown().await.expect("sandbox shutdown");
        scope.shutdown().await.expect("bench tasks");
    });
}

criterion_group!(benches, serve);
criterion_main!(benches);
