//! Deterministic randomness and naming for generated objects.
//!
//! Every generated object draws from its own [`fastrand::Rng`], seeded from
//! the run's seed, a per-kind tag and the object's index (FNV-1a then
//! SplitMix64, both fixed algorithms). So an object does not change when other
//! kinds are added to the spec, and nothing depends on `HashMap` order, the
//! wall clock, or the standard library's (unstable) default hasher.
//!
//! Names must be unique within a kind and namespace. The random-looking parts
//! of names are therefore *bijections* of the object's index (multiplication
//! by a constant coprime with the alphabet's power, plus a seed-derived
//! offset), never independent random draws that could collide.

use std::time::{Duration, UNIX_EPOCH};

/// Application names generated objects are named after. Workloads draw
/// from all of them; configuration, networking and event objects from
/// [`CORE_APPS`], the first 14.
pub(super) const APPS: &[&str] = &[
    "web",
    "api",
    "frontend",
    "backend",
    "worker",
    "cache",
    "auth",
    "billing",
    "checkout",
    "search",
    "gateway",
    "orders",
    "payments",
    "inventory",
    "notifications",
    "metrics",
    "ingest",
    "scheduler",
    "reports",
    "catalog",
];

/// The application names core/v1 objects (ConfigMap, Secret, Service,
/// ServiceAccount, Event) draw from: the first 14 of [`APPS`]. (A shorter
/// list than the workloads'; changing either changes the generated output.)
pub(super) const CORE_APPS: &[&str] = APPS.split_at(14).0;

/// The characters Kubernetes uses for generated name suffixes (no vowels, no
/// look-alikes): `k8s.io/apimachinery/pkg/util/rand`.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The instant generated timestamps count from: 2026-01-01T00:00:00Z.
const BASE_EPOCH_SECS: u64 = 1_767_225_600;

/// A fixed 64-bit hash of `bytes` (FNV-1a).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// SplitMix64's finaliser: spreads every input bit over the output.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The random stream of object `index` of the kind tagged `tag`.
pub(super) fn object_rng(seed: u64, tag: &str, index: usize) -> fastrand::Rng {
    fastrand::Rng::with_seed(mix(mix(seed ^ fnv1a(tag.as_bytes())) ^ index as u64))
}

/// A random stream keyed by arbitrary text (for values shared by several
/// objects, such as a workload's pod-template hash).
pub(super) fn keyed_rng(seed: u64, key: &str) -> fastrand::Rng {
    fastrand::Rng::with_seed(mix(seed ^ fnv1a(key.as_bytes())))
}

/// A name token of `len` suffix characters that is unique per `index` (for
/// `index < 27^len`) within `tag`: the index times a multiplier coprime with
/// 27, plus a seed-derived offset, modulo `27^len`, written in base 27.
pub(super) fn unique_token(seed: u64, tag: &str, index: usize, len: u32) -> String {
    let radix = SUFFIX_ALPHABET.len() as u64;
    let modulus = radix.pow(len);
    let offset = mix(seed ^ fnv1a(tag.as_bytes())) % modulus;
    // 7_777_777 = 7 * 1_111_111 is not a multiple of 3, so it is invertible
    // modulo any power of 27 and the map is a bijection on 0..27^len.
    let mut value = ((index as u128 * 7_777_777 + u128::from(offset)) % u128::from(modulus)) as u64;
    let mut out = vec![0u8; len as usize];
    for slot in out.iter_mut().rev() {
        *slot = SUFFIX_ALPHABET[(value % radix) as usize];
        value /= radix;
    }
    String::from_utf8(out).expect("the suffix alphabet is ASCII")
}

/// The length of a unique token that can number `count` objects (at least 5,
/// the length Kubernetes uses for generated suffixes).
pub(super) fn token_len(count: usize) -> u32 {
    let radix = SUFFIX_ALPHABET.len() as u128;
    let mut len = 5;
    while radix.pow(len) < count as u128 {
        len += 1;
    }
    len
}

/// A random number in `0..n`, the same on 32- and 64-bit platforms
/// (`Rng::usize` draws differently on each).
pub(super) fn below(rng: &mut fastrand::Rng, n: usize) -> usize {
    rng.u64(..n as u64) as usize
}

/// `len` random suffix characters (not unique; for decoration only).
pub(super) fn suffix(rng: &mut fastrand::Rng, len: usize) -> String {
    (0..len)
        .map(|_| char::from(SUFFIX_ALPHABET[below(rng, SUFFIX_ALPHABET.len())]))
        .collect()
}

/// `len` random lowercase hexadecimal digits.
pub(super) fn hex(rng: &mut fastrand::Rng, len: usize) -> String {
    (0..len)
        .map(|_| char::from_digit(rng.u32(..16), 16).expect("digit < 16"))
        .collect()
}

/// A pinned reference to `image` with a random digest,
/// `repository@sha256:<64 hex digits>`, as nodes and container statuses
/// show images.
pub(super) fn image_digest(rng: &mut fastrand::Rng, image: &str) -> String {
    let repository = image.rsplit_once(':').map_or(image, |(repo, _)| repo);
    format!("{repository}@sha256:{}", hex(rng, 64))
}

/// A random RFC 4122 version-4 UUID.
pub(super) fn uuid(rng: &mut fastrand::Rng) -> String {
    let variant = char::from_digit(8 + rng.u32(..4), 16).expect("digit < 16");
    format!(
        "{}-{}-4{}-{}{}-{}",
        hex(rng, 8),
        hex(rng, 4),
        hex(rng, 3),
        variant,
        hex(rng, 3),
        hex(rng, 12)
    )
}

/// The deterministic UID of the object `kind`/`namespace`/`name`, so owner
/// references and the owner agree without coordination.
pub(super) fn uid_for(seed: u64, kind: &str, namespace: &str, name: &str) -> String {
    let key = format!("{kind}/{namespace}/{name}");
    uuid(&mut keyed_rng(seed, &key))
}

/// An RFC 3339 timestamp `offset_secs` after the generator's fixed base
/// instant (2026-01-01T00:00:00Z). No wall clock is read.
pub(super) fn timestamp(offset_secs: u64) -> String {
    let instant = UNIX_EPOCH + Duration::from_secs(BASE_EPOCH_SECS + offset_secs);
    humantime::format_rfc3339_seconds(instant).to_string()
}

/// An element of `items` chosen by `rng`.
pub(super) fn pick<'a, T: ?Sized>(rng: &mut fastrand::Rng, items: &[&'a T]) -> &'a T {
    items[below(rng, items.len())]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn unique_token_is_a_bijection_on_small_moduli() {
        // 27^2 = 729 tokens of length 2: every index maps to a distinct one.
        let tokens: BTreeSet<String> = (0..729).map(|i| unique_token(9, "t", i, 2)).collect();
        assert_eq!(tokens.len(), 729);
    }

    #[test]
    fn token_len_grows_past_27_to_the_5th() {
        assert_eq!(token_len(0), 5);
        assert_eq!(token_len(14_348_907), 5);
        assert_eq!(token_len(14_348_908), 6);
    }

    #[test]
    fn uuid_has_the_v4_shape() {
        let id = uuid(&mut fastrand::Rng::with_seed(1));
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert!(matches!(
            parts[3].chars().next(),
            Some('8' | '9' | 'a' | 'b')
        ));
    }

    #[test]
    fn timestamp_counts_from_2026() {
        assert_eq!(timestamp(0), "2026-01-01T00:00:00Z");
        assert_eq!(timestamp(86_400 + 61), "2026-01-02T00:01:01Z");
    }
}
