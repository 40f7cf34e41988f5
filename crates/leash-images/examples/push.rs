//! Pushes test images to a registry for scripts (`e2e/images`): a
//! one-layer image, optionally signed as `cosign sign --key` signs it (or
//! as `cosign sign` signs it keyless) and attested as `cosign attest --key`
//! attests it, the public key of a test signing key, and the root of the
//! test keyless CA. Test data only (fixed keys).
//!
//!   push image HOST REPO:TAG [--label K=V]... [--sign SEED]
//!              [--sign-keyless EMAIL ISSUER]
//!              [--attest SEED TYPE JSON]...                   # prints the digest
//!   push pubkey SEED                                          # prints the PEM
//!   push fulcio-root                                          # prints the PEM
//!   push tuf-repo DIR ROOT_JSON      # a TUF repository serving the CA's
//!                                    # trusted_root.json, and its root.json
//!
//! `--attest` adds one attestation: an in-toto statement of predicate type
//! TYPE whose predicate is the JSON text JSON, signed with SEED's key;
//! repeated, every attestation is kept.
//!
//! `--sign-keyless` signs with a fresh key and a certificate naming EMAIL
//! (subject) and ISSUER (OIDC issuer), valid for a day, issued by the test
//! CA `Fulcio::from_seed(FULCIO_SEED)`; `fulcio-root` prints that CA's root
//! certificate, a keyless attestor's `roots`. Each run makes the CA anew
//! from the seed: the same names and keys, so a root printed by one run
//! verifies the certificates another run issued.

use leash_images::testing::{Fulcio, LocalRegistry, public_key_pem, signing_key};

/// The seed of the test keyless CA.
const FULCIO_SEED: u8 = 1;
/// How long a `--sign-keyless` certificate is valid.
const KEYLESS_VALIDITY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

fn usage() -> ! {
    eprintln!(
        "usage: push image HOST REPO:TAG [--label K=V]... [--sign SEED] [--sign-keyless EMAIL ISSUER] [--attest SEED TYPE JSON]... | push pubkey SEED | push fulcio-root | push tuf-repo DIR ROOT_JSON"
    );
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
        Some("fulcio-root") if args.len() == 1 => {
            print!("{}", Fulcio::from_seed(FULCIO_SEED).root_pem())
        }
        Some("tuf-repo") if args.len() == 3 => {
            // A signed TUF repository whose trusted_root.json holds the
            // test CA, and its root.json beside it.
            let repo = leash_images::testing::TufRepo::create(
                std::path::Path::new(&args[1]),
                &Fulcio::from_seed(FULCIO_SEED),
            );
            std::fs::write(&args[2], repo.root_json()).unwrap_or_else(|e| {
                eprintln!("push tuf-repo: {}: {e}", args[2]);
                std::process::exit(1)
            });
        }
        Some("image") if args.len() >= 3 => {
            let (host, repo_tag) = (args[1].clone(), args[2].clone());
            let mut labels = Vec::new();
            let mut sign = None;
            let mut sign_keyless = None;
            let mut attest = Vec::new();
            let mut rest = args[3..].iter();
            while let Some(a) = rest.next() {
                let mut value = || rest.next().map(String::as_str).unwrap_or_else(|| usage());
                match a.as_str() {
                    "--label" => match value().split_once('=') {
                        Some((k, v)) => labels.push((k.to_string(), v.to_string())),
                        None => usage(),
                    },
                    "--sign" => sign = Some(seed(value())),
                    "--sign-keyless" => {
                        let email = value().to_string();
                        sign_keyless = Some((email, value().to_string()));
                    }
                    "--attest" => {
                        let key = seed(value());
                        let predicate_type = value().to_string();
                        let predicate: serde_json::Value =
                            serde_json::from_str(value()).unwrap_or_else(|_| usage());
                        attest.push((key, predicate_type, predicate));
                    }
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
                if let Some((email, issuer)) = sign_keyless {
                    let fulcio = Fulcio::from_seed(FULCIO_SEED);
                    let id = fulcio.issue(&email, &issuer, KEYLESS_VALIDITY);
                    reg.sign_keyless(&repo_tag, &id, &fulcio.chain_pem()).await;
                }
                for (s, predicate_type, predicate) in attest {
                    reg.attest(&repo_tag, &signing_key(s), &predicate_type, predicate)
                        .await;
                }
                digest
            });
            println!("{digest}");
        }
        _ => usage(),
    }
}
