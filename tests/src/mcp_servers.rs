//! Where the real MCP servers used by the tests live (installed by
//! `scripts/install-test-deps.sh` into `tests/mcp-servers/node_modules` and `tests/.venv-mcp`),
//! configs that start them, and the skip rule: a test skips, loudly, only when the servers are
//! missing and `TROUPE_REQUIRE_MCP_SERVERS` is unset. Used by `tests/tests/mcp/` and `mcp_bench`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use troupe::tools::mcp::McpServerConfig;

/// The environment variable CI sets so that missing servers fail the tests instead of skipping.
pub const REQUIRE_VAR: &str = "TROUPE_REQUIRE_MCP_SERVERS";

/// The `tests/` folder of the repository.
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// An installed npm server's executable.
pub fn npm_bin(name: &str) -> PathBuf {
    tests_dir().join("mcp-servers/node_modules/.bin").join(name)
}

/// An installed PyPI server's executable.
pub fn venv_bin(name: &str) -> PathBuf {
    tests_dir().join(".venv-mcp/bin").join(name)
}

/// `mcp-server-everything`.
pub fn everything_bin() -> PathBuf {
    npm_bin("mcp-server-everything")
}

/// Every server binary the tests use, with the ones not installed.
pub fn missing_servers() -> Vec<PathBuf> {
    [
        npm_bin("mcp-server-everything"),
        npm_bin("mcp-server-filesystem"),
        npm_bin("mcp-server-memory"),
        venv_bin("mcp-server-time"),
        venv_bin("mcp-server-git"),
    ]
    .into_iter()
    .filter(|p| !p.exists())
    .collect()
}

/// Whether a test needing the real servers should run. When they are missing it prints a loud
/// notice and returns `false`, unless `TROUPE_REQUIRE_MCP_SERVERS` is set: then it panics, so
/// CI cannot pass without them.
pub fn servers_available(test: &str) -> bool {
    let missing = missing_servers();
    if missing.is_empty() {
        return true;
    }
    let list: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
    if std::env::var_os(REQUIRE_VAR).is_some() {
        panic!(
            "{test}: the MCP test servers are not installed ({}), and {REQUIRE_VAR} is set. Run scripts/install-test-deps.sh.",
            list.join(", ")
        );
    }
    eprintln!(
        "\n!!!!!!!! SKIPPED {test}: MCP test servers missing: {}\n!!!!!!!! run scripts/install-test-deps.sh (set {REQUIRE_VAR}=1 to make this a failure)\n",
        list.join(", ")
    );
    false
}

/// server-everything over stdio.
pub fn everything(name: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, everything_bin().to_string_lossy(), ["stdio"])
}

/// server-filesystem allowed to work in `root`.
pub fn filesystem(name: &str, root: &Path) -> McpServerConfig {
    McpServerConfig::stdio(
        name,
        npm_bin("mcp-server-filesystem").to_string_lossy(),
        [root.to_string_lossy().into_owned()],
    )
}

/// server-memory keeping its graph in `file`.
pub fn memory(name: &str, file: &Path) -> McpServerConfig {
    McpServerConfig::stdio(
        name,
        npm_bin("mcp-server-memory").to_string_lossy(),
        Vec::<String>::new(),
    )
    .with_env("MEMORY_FILE_PATH", file.to_string_lossy())
}

/// mcp-server-time, in UTC.
pub fn time(name: &str) -> McpServerConfig {
    McpServerConfig::stdio(
        name,
        venv_bin("mcp-server-time").to_string_lossy(),
        ["--local-timezone", "UTC"],
    )
}

/// mcp-server-git on the repository at `repo`.
pub fn git(name: &str, repo: &Path) -> McpServerConfig {
    McpServerConfig::stdio(
        name,
        venv_bin("mcp-server-git").to_string_lossy(),
        [
            "--repository".to_string(),
            repo.to_string_lossy().into_owned(),
        ],
    )
}

/// Makes `dir` a git repository with one commit of `README.md`.
pub fn init_git_repo(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("README.md"), "troupe test repository\n")?;
    let git = |args: &[&str]| -> std::io::Result<()> {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "troupe")
            .env("GIT_AUTHOR_EMAIL", "troupe@example.invalid")
            .env("GIT_COMMITTER_NAME", "troupe")
            .env("GIT_COMMITTER_EMAIL", "troupe@example.invalid")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "git {args:?} failed: {status}"
            )))
        }
    };
    git(&["init", "-q"])?;
    git(&["add", "README.md"])?;
    git(&["commit", "-q", "-m", "first"])
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// server-everything in streamable-HTTP mode on `port`; the child is killed when dropped.
/// Returns once the port accepts connections (or after 60 s, leaving the failure to the test).
pub async fn spawn_everything_http(port: u16) -> std::io::Result<tokio::process::Child> {
    let child = tokio::process::Command::new(everything_bin())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(child)
}
