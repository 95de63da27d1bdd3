//! What keeps the RESP listener from being exhausted (docs/api.md, "Redis protocol at a shard
//! node"): the cost of a `CONFIG GET` pattern.

use super::one_node;
use super::pipelined;
use super::tools::ping;

/// A `CONFIG GET` pattern past the bound is refused at once, in Redis's words, and the
/// connection keeps serving; patterns of Redis's glob (`*`, `?`, `[...]`, `\`) match as
/// in Redis.
#[tokio::test]
async fn config_get_refuses_a_huge_pattern_and_keeps_redis_globs() {
    let (_cluster, node) = one_node("", None).await;
    let mut stream = node.connect().await;
    let huge = format!("{}*", "a".repeat(100_000));
    let config = vec!["CONFIG".to_owned(), "GET".to_owned(), huge.clone()];
    let answer = pipelined(&mut stream, &[config]).await;
    assert!(
        answer[0].starts_with("ERR pattern too long"),
        "CONFIG GET of a pattern of {} bytes answered {answer:?}",
        huge.len()
    );
    ping(&mut stream).await;
    for (pattern, names) in [
        ("maxclient[rs]", "maxclients"),
        ("max\\clients", "maxclients"),
        ("append*", "appendonly appendfsync"),
        ("[^a-r]ave", "save"),
        ("proto-max-bulk-le?", "proto-max-bulk-len"),
        ("\\*", ""),
    ] {
        let answer = node.cli(&["CONFIG", "GET", pattern]);
        let mut got: Vec<&str> = answer.lines().step_by(2).collect();
        got.sort_unstable();
        let mut want: Vec<&str> = names.split_whitespace().collect();
        want.sort_unstable();
        assert_eq!(got, want, "CONFIG GET {pattern}: {answer}");
    }
}
