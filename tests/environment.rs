//! The variables that steer the test harness are no topology keys: every node a test starts
//! inherits the test's environment, and a `GEOCOUNT_*` variable overrides a key of its topology.

use std::process::Command;

use geocount_test_support::TestTopology;
use geocount_test_support::process::{BIN_DIR_ENV, bin_dir, binary, config_error};
use geocount_test_support::tls::TLS_ENV;

#[test]
fn the_harness_variables_leave_a_nodes_topology_alone() {
    let topology = TestTopology::new(&[("USA_0", 1)], "");
    let bin_dir = bin_dir().into_os_string().into_string().unwrap();
    // A datacenter the topology lacks: the node exits once it has read its topology.
    let run = |env: &[(&str, &str)]| {
        config_error(
            Command::new(binary("shard-node"))
                .arg("--config")
                .arg(&topology.path)
                .args(["--dc", "NOWHERE", "--slot", "0"])
                .env_remove(BIN_DIR_ENV)
                .env_remove(TLS_ENV)
                .envs(env.iter().copied()),
        )
    };
    let stderr = run(&[]);
    assert!(stderr.contains("NOWHERE"), "{stderr}");
    for variable in [(BIN_DIR_ENV, bin_dir.as_str()), (TLS_ENV, "1")] {
        assert_eq!(run(&[variable]), stderr, "{variable:?}");
    }
}
