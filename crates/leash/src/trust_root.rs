//! How the CLI and `serve` reach registries beyond the anonymous default:
//! `--tuf-root` and `--tuf-mirror`, where Sigstore's trust root comes
//! from (Kyverno's `--tufRoot` and `--tufMirror`), for keyless attestors
//! that give no `roots` of their own (read on first use, through TUF,
//! once for every concurrent verification); and the Docker config whose
//! credentials the CLI reads registries with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leash_images::tuf::{TrustRoot, TrustRootSource};

use crate::cli_error::usage;

/// The least time Sigstore's trust root may take to load (its TUF
/// metadata and target are several round trips: more than one image's
/// bound).
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);

/// The flags, shared by `serve`, `apply` and `test`.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct TrustRootArgs {
    /// Sigstore's TUF `root.json` to start from (Kyverno's --tufRoot):
    /// keyless attestors without `roots` verify against the trust root
    /// (Fulcio's certificates) the repository at --tuf-mirror serves,
    /// its metadata checked from this root. Without both, such attestors
    /// are the rule's error.
    #[arg(long, value_name = "FILE", requires = "tuf_mirror")]
    pub(crate) tuf_root: Option<PathBuf>,
    /// The TUF repository (Kyverno's --tufMirror): an http(s):// or
    /// file:// URL, or a directory; targets under `targets/`.
    #[arg(long, value_name = "URL", requires = "tuf_root")]
    pub(crate) tuf_mirror: Option<String>,
}

impl TrustRootArgs {
    /// The trust root the flags name (nothing loaded yet), or None; the
    /// error names the flag and the problem (an unreadable root file, a
    /// mirror that is neither a URL nor a directory).
    pub(crate) fn trust_root(&self, timeout: Duration) -> anyhow::Result<Option<Arc<TrustRoot>>> {
        let (Some(root), Some(mirror)) = (&self.tuf_root, &self.tuf_mirror) else {
            return Ok(None);
        };
        let root = std::fs::read(root)
            .map_err(|e| usage(format!("--tuf-root {}: {e}", root.display())))?;
        if serde_json::from_slice::<serde_json::Value>(&root).is_err() {
            return Err(usage(format!(
                "--tuf-root {}: not a TUF root.json (not JSON)",
                self.tuf_root
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )));
        }
        let mirror = if ["http://", "https://", "file://"]
            .iter()
            .any(|s| mirror.starts_with(s))
        {
            mirror.clone()
        } else if std::path::Path::new(mirror).is_dir() {
            leash_images::tuf::file_mirror(mirror)
                .map_err(|e| usage(format!("--tuf-mirror {mirror}: {e}")))?
        } else {
            return Err(usage(format!(
                "--tuf-mirror {mirror}: neither an http(s):// or file:// URL nor a directory"
            )));
        };
        Ok(Some(Arc::new(TrustRoot::new(TrustRootSource {
            root,
            mirror,
            timeout,
        }))))
    }
}

/// The registry credentials of the Docker config the CLI reads with
/// `--registry`, as Kyverno's CLI (go-containerregistry's default
/// keychain) does: `$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`; none when the file does not exist. A file that
/// exists but cannot be read or parsed is an error naming it.
pub(crate) fn docker_credentials() -> anyhow::Result<leash_images::credentials::Credentials> {
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(dir) => PathBuf::from(dir).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(".docker").join("config.json"),
            None => return Ok(Default::default()),
        },
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(usage(format!("{}: {e}", path.display()))),
    };
    leash_images::credentials::Credentials::from_docker_config(&bytes)
        .map_err(|e| usage(format!("{}: {e}", path.display())))
}
