//! The plugin tests' world, one per test: a project folder (the working directory), beside it a
//! troupe home and a bundled-plugins folder; helpers to write plugins and run the `troupe` binary
//! in it, and to drive `troupe chat` against the mock model server.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use troupe_actors::model::Script;
use troupe_actors::model::mock_server::MockServer;

/// One test's folders.
pub(crate) struct World {
    /// Keeps the folders alive.
    pub(crate) dir: tempfile::TempDir,
    /// Project plugins load only when true.
    pub(crate) project_switch: bool,
}

impl World {
    pub(crate) fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["project", "home", "bundled"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        World {
            dir,
            project_switch: false,
        }
    }

    /// The working directory of every command.
    pub(crate) fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// `TROUPE_HOME`.
    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// `TROUPE_BUNDLED_PLUGINS`.
    pub(crate) fn bundled(&self) -> PathBuf {
        self.dir.path().join("bundled")
    }

    /// The user's plugin folder.
    pub(crate) fn user_plugins(&self) -> PathBuf {
        self.home().join("plugins")
    }

    /// The project's plugin folder.
    pub(crate) fn project_plugins(&self) -> PathBuf {
        self.project().join(".troupe").join("plugins")
    }

    /// Writes `<root>/<name>/plugin.yaml` and the given files (executable when `.sh`/`.py`).
    pub(crate) fn plugin(
        &self,
        root: &Path,
        name: &str,
        manifest: &str,
        files: &[(&str, &str)],
    ) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("plugin.yaml"), manifest).unwrap();
        for (file, text) in files {
            write_script(&dir.join(file), text);
        }
        dir
    }

    /// Writes troupe.yaml in the project.
    pub(crate) fn config(&self, text: &str) {
        std::fs::write(self.project().join("troupe.yaml"), text).unwrap();
    }

    /// A `troupe` command in the project, with this world's home and plugin folders and no
    /// model from the environment.
    pub(crate) fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_troupe"));
        cmd.args(args)
            .current_dir(self.project())
            .stdin(std::process::Stdio::null())
            .env("TROUPE_HOME", self.home())
            .env("TROUPE_BUNDLED_PLUGINS", self.bundled())
            .env_remove("TROUPE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("TROUPE_API_KEY");
        if self.project_switch {
            cmd.env("TROUPE_ENABLE_PROJECT_PLUGINS", "1");
        } else {
            cmd.env_remove("TROUPE_ENABLE_PROJECT_PLUGINS");
        }
        cmd
    }

    /// Runs `troupe args...`.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs `troupe args...` and returns stdout; fails the test on a non-zero exit.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed ({:?}): {}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `troupe plugins list --json`, by plugin name.
    pub(crate) fn listing(&self) -> Value {
        let text = self.ok(&["plugins", "list", "--json"]);
        serde_json::from_str(&text).unwrap()
    }

    /// Runs `troupe chat -q query --json` against a mock model serving `script` (YAML); returns
    /// the output and every request the model received.
    pub(crate) async fn chat(&self, query: &str, script: &str) -> (Output, Vec<Value>) {
        let script = Script::from_yaml_str(script).unwrap();
        let server = MockServer::start(script).await.unwrap();
        let url = server.url();
        let mut cmd = tokio::process::Command::from(self.command(&[
            "chat",
            "-q",
            query,
            "--json",
            "--base-url",
            &url,
        ]));
        let out = cmd.output().await.unwrap();
        let requests = server.requests().into_iter().map(|r| r.body).collect();
        (out, requests)
    }
}

/// Writes a file, executable when it is a script.
pub(crate) fn write_script(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
    if path.extension().is_some_and(|e| e == "sh" || e == "py") {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The JSON lines of a `--json` chat run.
pub(crate) fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Asserts the run exited 0, showing stderr otherwise.
pub(crate) fn assert_success(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The status of each finished call, by model call id.
pub(crate) fn statuses(out: &Output) -> std::collections::HashMap<String, String> {
    lines(out)
        .iter()
        .filter(|l| l["type"] == "tool_call_finished")
        .map(|l| {
            (
                l["model_call_id"].as_str().unwrap_or_default().to_string(),
                l["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// What the model was told for each tool call id, from the requests it received.
pub(crate) fn tool_results(requests: &[Value]) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    for request in requests {
        for message in request["messages"].as_array().into_iter().flatten() {
            if message["role"] == "tool" {
                let content = match &message["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                out.insert(
                    message["tool_call_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    content,
                );
            }
        }
    }
    out
}

/// The JSON lines a hook script appended to `file`.
pub(crate) fn hook_log(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
