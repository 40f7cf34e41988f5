//! Pushes test images to a registry for scripts (`e2e/images`): a
//! one-layer image, optionally signed as `cosign sign --key` signs it, and
//! the public key of a test signing key. Test data only (fixed keys).
//!
//!   push image HOST REPO:TAG [--label K=V]... [--sign SEED]   # prints the digest
//!   push pubkey SEED                                          # prints the PEM

use leash_images::testing::{LocalRegistry, public_key_pem, signing_key};

fn usage() -> ! {
    eprintln!("usage: push image HOST REPO:TAG [--label K=V]... [--sign SEED] | push pubkey SEED");
    std::process::exit(2)
}

fn seed(s: &str) -> u8 {
    s.parse().unwrap_or_else(|_| usage())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("pubkey") if args.len() == 2 => {
            print!("{}", public_key_pem(&signing_key(seed(&args[1]))))
        }
        Some("image") if args.len() >= 3 => {
            let (host, repo_tag) = (args[1].clone(), args[2].clone());
            let mut labels = Vec::new();
            let mut sign = None;
            let mut rest = args[3..].iter();
            while let Some(a) = rest.next() {
                match (a.as_str(), rest.next()) {
                    ("--label", Some(kv)) => match kv.split_once('=') {
                        Some((k, v)) => labels.push((k.to_string(), v.to_string())),
                        None => usage(),
                    },
                    ("--sign", Some(s)) => sign = Some(seed(s)),
                    _ => usage(),
                }
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let digest = runtime.block_on(async {
                let reg = LocalRegistry::at(&host);
                let labels: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let (digest, _) = reg.push(&repo_tag, &labels).await;
                if let Some(s) = sign {
                    reg.sign(&repo_tag, &signing_key(s)).await;
                }
                digest
            });
            println!("{digest}");
        }
        _ => usage(),
    }
}
