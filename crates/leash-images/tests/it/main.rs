//! leash-images against a real registry: Debian's `docker-registry` (the
//! distribution registry) started on 127.0.0.1 by each test, with images
//! pushed to it by oci-client (`leash_images::testing`). Without the
//! registry binary the tests skip, saying why, except under CI (`CI` set),
//! where they fail.

mod attestations;
mod credentials;
mod keyless;
mod notary;
mod registry;
mod tuf;
