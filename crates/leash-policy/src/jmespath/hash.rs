//! `md5(string)`, `sha1(string)`, `sha256(string)`: the lowercase hex
//! digest of the string's UTF-8 bytes, as Kyverno's JMESPath functions give
//! them (MD5 per RFC 1321 here; SHA-1 and SHA-256 by ring, already built
//! for rustls).

use jmespath::{Rcvar, Runtime};

use super::ty::s;
use super::{arg_str, register, string};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "md5", vec![s()], md5_fn);
    register(rt, "sha1", vec![s()], |x| {
        digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, x)
    });
    register(rt, "sha256", vec![s()], |x| {
        digest(&ring::digest::SHA256, x)
    });
}

fn digest(algorithm: &'static ring::digest::Algorithm, x: &[Rcvar]) -> Result<Rcvar, String> {
    let d = ring::digest::digest(algorithm, arg_str(x, 0).as_bytes());
    Ok(string(hex(d.as_ref())))
}

fn md5_fn(x: &[Rcvar]) -> Result<Rcvar, String> {
    Ok(string(hex(&md5(arg_str(x, 0).as_bytes()))))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Per-round shift amounts.
const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// MD5 of `data`.
pub(crate) fn md5(data: &[u8]) -> [u8; 16] {
    // K[i] = floor(abs(sin(i + 1)) * 2^32)
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let (mut a0, mut b0, mut c0, mut d0) = (
        0x6745_2301u32,
        0xefcd_ab89u32,
        0x98ba_dcfeu32,
        0x1032_5476u32,
    );
    for chunk in msg.chunks_exact(64) {
        let m: Vec<u32> = chunk
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, w) in [a0, b0, c0, d0].iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn md5() {
        let cases: &[Case] = &[
            (
                "md5('')",
                "{}",
                Json(r#""d41d8cd98f00b204e9800998ecf8427e""#),
            ),
            (
                "md5('abc')",
                "{}",
                Json(r#""900150983cd24fb0d6963f7d28e17f72""#),
            ),
            (
                "md5('The quick brown fox jumps over the lazy dog')",
                "{}",
                Json(r#""9e107d9d372bb6826bd81d3542a419d6""#),
            ),
            (
                "md5('12345678901234567890123456789012345678901234567890123456789012345678901234567890')",
                "{}",
                Json(r#""57edf4a22be3c955ac49da2e2107b67a""#),
            ),
            ("md5(`1`)", "{}", Err("string")),
        ];
        run(cases);
    }

    /// The digests Kyverno v1.19.1's `kyverno jp query` gives.
    #[test]
    fn sha1_and_sha256() {
        let cases: &[Case] = &[
            (
                "sha1('a')",
                "{}",
                Json(r#""86f7e437faa5a7fce15d1ddcb9eaeaea377667b8""#),
            ),
            (
                "sha256('a')",
                "{}",
                Json(r#""ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb""#),
            ),
            ("sha256(`1`)", "{}", Err("string")),
        ];
        run(cases);
    }
}
