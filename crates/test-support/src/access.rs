//! The tokens and cluster secret of the access-control tests, a write marked as forwarded, and
//! the check that a node logged a refused call between tiers.

use std::time::Duration;

use geocount_model::wire::BatchRequest;
use geocount_net::Answer;
use hyper::Method;

use crate::{Api, NodeProcess, TestTopology};

/// A token with the right to read.
pub const READER: &str = "reader-5f0c2a9e4b7d4c1f8a3e6b2d9c0f7a14";
/// A token with the right to write.
pub const WRITER: &str = "writer-7b3e9d1c5a2f4e8b9c6d0a3f1e7b2c58";
/// A token with the admin right.
pub const ADMIN: &str = "admin-2c8f6a1e9d4b7c3f0e5a8d2b6c9f1e47";
/// The cluster secret every process of the topology shares.
pub const SECRET: &str = "cluster-9e4d2b7f1c6a8e3d5b0f9c2a7e4d1b63";
/// The header marking a write forwarded by a peer.
pub const FORWARDED_HEADER: &str = "x-geocount-forwarded";
/// A header a caller might send the cluster secret itself in: it opens nothing.
pub const SECRET_HEADER: &str = "x-geocount-cluster-secret";
/// What a node logs when it refuses a call between tiers.
pub const REFUSED: &str = "refused a call between tiers";

/// The `[auth]` section: a read-only, a write-only and an admin token, and `secret`.
pub fn auth_toml(secret: &str) -> String {
    format!(
        "[auth]\ncluster_secret = \"{secret}\"\n\n\
         [[auth.tokens]]\nname = \"dashboard\"\ntoken = \"{READER}\"\nrights = [\"read\"]\n\n\
         [[auth.tokens]]\nname = \"web\"\ntoken = \"{WRITER}\"\nrights = [\"write\"]\n\n\
         [[auth.tokens]]\nname = \"ops\"\ntoken = \"{ADMIN}\"\nrights = [\"admin\"]\n"
    )
}

/// A topology of `datacenters` with the `[auth]` section above and [`SECRET`].
pub fn topology(datacenters: &[(&str, usize)]) -> TestTopology {
    TestTopology::with_extra(datacenters, "restore_timeout_ms = 200", &auth_toml(SECRET))
}

/// Waits up to 5 s for `node` to log that it refused a call between tiers, and checks that the
/// line names each of `words`.
pub async fn assert_refusal_logged(node: &mut NodeProcess, words: &[&str]) {
    let line = node.log_line(REFUSED, Duration::from_secs(5)).await;
    for word in words {
        assert!(line.contains(word), "{word:?} missing in {line}");
    }
}

/// A write of `delta` to `id` marked as forwarded, as the JSON write and as a batch.
pub async fn forward(api: &Api, id: &str, delta: i64) -> [Answer; 2] {
    let forwarded = [(FORWARDED_HEADER, "1")];
    let path = format!("/counter/{id}/write?op=INCREMENT");
    let single = api
        .send(
            Method::PATCH,
            &path,
            &forwarded,
            format!(r#"{{"delta": {delta}}}"#),
        )
        .await
        .unwrap();
    let batch = postcard::to_allocvec(&BatchRequest {
        entries: vec![crate::api::entry(id, delta)],
    })
    .unwrap();
    let batch = api
        .send(Method::POST, "/batch", &forwarded, batch)
        .await
        .unwrap();
    [single, batch]
}
