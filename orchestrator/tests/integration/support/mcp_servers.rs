//! Where the installed MCP test servers are (`scripts/install-test-deps.sh`), and whether a
//! test that needs them may run.

use std::path::{Path, PathBuf};

/// `mcp-server-everything` from tests/mcp-servers.
pub(crate) fn everything_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp-servers/node_modules/.bin/mcp-server-everything")
}

/// Whether the MCP test server is installed; skips loudly, or fails under
/// `TROUPE_REQUIRE_MCP_SERVERS`.
pub(crate) fn servers_available(test: &str) -> bool {
    if everything_bin().exists() {
        return true;
    }
    if std::env::var_os("TROUPE_REQUIRE_MCP_SERVERS").is_some() {
        panic!(
            "{test}: {} is missing and TROUPE_REQUIRE_MCP_SERVERS is set; run scripts/install-test-deps.sh",
            everything_bin().display()
        );
    }
    eprintln!(
        "\n!!!!!!!! SKIPPED {test}: the MCP test servers are not installed; run scripts/install-test-deps.sh\n"
    );
    false
}

/// The MCP test server `mcp-server-time`, when installed (`scripts/install-test-deps.sh`);
/// `None` skips the test unless `TROUPE_REQUIRE_MCP_SERVERS=1`, which makes it fail.
pub(crate) fn time_server() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/.venv-mcp/bin/mcp-server-time");
    if bin.is_file() {
        return Some(bin);
    }
    if std::env::var("TROUPE_REQUIRE_MCP_SERVERS").is_ok_and(|v| v == "1") {
        panic!(
            "{} is missing: run scripts/install-test-deps.sh",
            bin.display()
        );
    }
    eprintln!(
        "\n!!!!!!!! SKIPPED: {} is missing; run scripts/install-test-deps.sh (TROUPE_REQUIRE_MCP_SERVERS=1 makes this a failure)\n",
        bin.display()
    );
    None
}
