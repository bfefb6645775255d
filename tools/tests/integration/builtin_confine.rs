//! The boundary on real child processes: `terminal` and `execute_code` on a confined local
//! backend, with a troupe home holding a token, a workspace, and a directory outside both
//! (under the build's own temporary folder, so not under `/tmp`, which is writable).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{ctx, json_of};
use serde_json::{Map, Value, json};
use troupe_tools::builtin::confine::{ConfinePolicy, ConfineSettings, Support, probe};
use troupe_tools::builtin::{BuiltinConfig, Builtins, LocalBackend, core_tools};
use troupe_tools::{CallContext, ToolDef};

struct Confined {
    _root: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    outside: PathBuf,
    tools: Vec<ToolDef>,
}

/// `None` (and a line saying so) where this kernel has no Landlock.
fn abi() -> Option<i32> {
    match probe() {
        Support::Available { abi } => Some(abi),
        Support::Unavailable { why } => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

impl Confined {
    fn new(abi: i32, network: bool, root_in: &Path) -> Confined {
        let root = tempfile::tempdir_in(root_in).unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let (home, work, outside) = (base.join("home"), base.join("work"), base.join("outside"));
        for dir in [&home, &work, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(home.join("serve.token"), "secret-token-123").unwrap();
        std::fs::write(outside.join("keep.txt"), "keep").unwrap();
        let policy = ConfinePolicy::new(
            abi,
            ConfineSettings {
                hidden: vec![home.clone()],
                network,
                ..ConfineSettings::default()
            },
        )
        .unwrap();
        let mut config = BuiltinConfig {
            default_cwd: work.clone(),
            receipts_dir: base.join("receipts"),
            ..BuiltinConfig::default()
        };
        config.terminal.kill_grace = Duration::from_millis(500);
        let backend = LocalBackend::default().confined(Arc::new(policy));
        let builtins = Builtins::start_with_backend(config, Arc::new(backend)).unwrap();
        Confined {
            _root: root,
            home,
            work,
            outside,
            tools: core_tools(&builtins),
        }
    }

    async fn call_with(&self, name: &str, args: Value, ctx: CallContext) -> Value {
        let args: Map<String, Value> = args.as_object().cloned().unwrap();
        let tool = self.tools.iter().find(|t| t.name == name).unwrap();
        json_of(&tool.handler.as_ref().unwrap().call(args, ctx).await)
    }

    /// Runs `command` with `terminal`, approved as a person (or `approvals: off`) would:
    /// (exit code, output and error, whole result).
    async fn sh(&self, command: &str) -> (i64, String, Value) {
        let out = self
            .call_with(
                "terminal",
                json!({"command": command}),
                ctx("s1").with_approval(true),
            )
            .await;
        (
            out["exit_code"].as_i64().unwrap_or(-99),
            format!(
                "{}{}",
                out["output"].as_str().unwrap_or_default(),
                out["error"].as_str().unwrap_or_default()
            ),
            out,
        )
    }
}

/// Where a test world goes: a folder commands inside the boundary may not write.
fn target_tmp() -> PathBuf {
    troupe_tools::test_support::unwritable_base(Path::new(env!("CARGO_TARGET_TMPDIR"))).unwrap()
}

#[tokio::test]
async fn a_confined_command_writes_only_its_workspace_and_temp() {
    let Some(abi) = abi() else { return };
    let c = Confined::new(abi, true, &target_tmp());
    let (home, work, outside) = (c.home.display(), c.work.display(), c.outside.display());

    let (code, out, result) = c.sh(&format!("rm -rf {outside}")).await;
    assert_ne!(code, 0, "{out}");
    assert!(
        c.outside.join("keep.txt").exists(),
        "the outside directory survived"
    );
    assert!(
        result["boundary"].as_str().unwrap().contains("writable"),
        "{result}"
    );
    let (code, out, _) = c.sh(&format!("echo x > {outside}/new.txt")).await;
    assert_ne!(code, 0, "{out}");
    assert!(!c.outside.join("new.txt").exists());

    let (code, out, _) = c.sh(&format!("cat {home}/serve.token")).await;
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("secret-token-123"), "{out}");
    let (code, out, _) = c.sh(&format!("ls {home}")).await;
    assert_ne!(code, 0, "{out}");
    assert!(!out.contains("serve.token"), "{out}");
    let (code, _, _) = c.sh(&format!("echo x > {home}/x")).await;
    assert_ne!(code, 0);
    assert!(!c.home.join("x").exists());

    let (code, out, _) = c
        .sh(&format!(
            "echo a > {work}/a.txt && mkdir -p {work}/d && echo b > {work}/d/b && t=$(mktemp) && echo t > $t && rm $t && echo ok > /dev/null && head -c 4 /dev/urandom | wc -c && cat /usr/lib/os-release /etc/os-release 2>/dev/null | head -1 && ls /usr/bin | head -1 && echo done"
        ))
        .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("done"), "{out}");
    assert!(c.work.join("d/b").exists());
}

#[tokio::test]
async fn an_approved_call_writes_exactly_what_it_asked_for() {
    let Some(abi) = abi() else { return };
    let c = Confined::new(abi, true, &target_tmp());
    let outside = c.outside.display().to_string();
    let args = json!({"command": format!("echo y > {outside}/granted.txt"), "writable": [outside]});
    // Without a person's yes the call does not run.
    let refused = c.call_with("terminal", args.clone(), ctx("s1")).await;
    assert_eq!(refused["status"], "blocked", "{refused}");
    assert!(refused["error"].as_str().unwrap().contains(&outside));
    assert!(!c.outside.join("granted.txt").exists());
    // Approvals switched off (or an unattended policy) approve it, but do not move the
    // boundary: only a person asked about this call does.
    let by_mode = c
        .call_with("terminal", args.clone(), ctx("s1").with_approval(true))
        .await;
    assert_eq!(by_mode["status"], "blocked", "{by_mode}");
    assert!(!c.outside.join("granted.txt").exists());
    let ran = c
        .call_with("terminal", args, ctx("s1").with_person_approval(true))
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert!(c.outside.join("granted.txt").exists());
    // Troupe's home is never granted, approved or not.
    let home = c.home.display().to_string();
    let never = c
        .call_with(
            "terminal",
            json!({"command": "true", "writable": [home]}),
            ctx("s1").with_person_approval(true),
        )
        .await;
    assert_eq!(never["status"], "blocked", "{never}");
    // The grant was for that one call.
    let (code, _, _) = c.sh(&format!("echo z > {outside}/later.txt")).await;
    assert_ne!(code, 0);
}

#[tokio::test]
async fn without_network_a_tcp_connect_is_refused() {
    let Some(abi) = abi() else { return };
    if abi < 4 {
        eprintln!("skipped: Landlock ABI {abi} has no network rules");
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let open = Confined::new(abi, true, &target_tmp());
    let (code, out, _) = open.sh(&connect).await;
    assert_eq!(code, 0, "with network: {out}");
    let closed = Confined::new(abi, false, &target_tmp());
    let (code, out, _) = closed.sh(&connect).await;
    assert_ne!(code, 0, "without network: {out}");
    assert!(!out.contains("connected"));
}

#[tokio::test]
async fn a_script_is_confined_too_and_a_home_in_tmp_gets_a_private_tmpdir() {
    let Some(abi) = abi() else { return };
    // troupe's home under /tmp: /tmp's own entries cannot all be granted, so TMPDIR moves.
    let c = Confined::new(abi, true, &std::env::temp_dir());
    let (code, out, _) = c
        .sh("t=$(mktemp) && echo ok > $t && cat $t && echo \"$TMPDIR\"")
        .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("troupe-tmp-"), "{out}");
    let token = c.home.join("serve.token");
    let code = format!(
        "import tempfile, pathlib\ntempfile.NamedTemporaryFile().write(b'x')\npathlib.Path('made.txt').write_text('m')\ntry:\n    print(open({:?}).read())\nexcept OSError as e:\n    print('refused', e.errno)\n",
        token.display().to_string()
    );
    let out = c
        .call_with("execute_code", json!({"code": code}), ctx("s1"))
        .await;
    let text = out["output"].as_str().unwrap_or_default();
    assert!(text.contains("refused 13"), "{out}");
    assert!(!text.contains("secret-token-123"), "{out}");
    assert!(c.work.join("made.txt").exists(), "{out}");
}

#[tokio::test]
async fn a_flagged_command_a_person_approved_may_write_what_it_names() {
    let Some(abi) = abi() else { return };
    let c = Confined::new(abi, true, &target_tmp());
    let victim = c.outside.join("old-build");
    std::fs::create_dir_all(victim.join("deep")).unwrap();
    std::fs::write(victim.join("deep/f"), "x").unwrap();
    let args = json!({"command": format!("rm -rf {}", victim.display())});
    // Approved by the mode alone: it runs, and the boundary stops it.
    let by_mode = c
        .call_with("terminal", args.clone(), ctx("s1").with_approval(true))
        .await;
    assert_ne!(by_mode["exit_code"], 0, "{by_mode}");
    assert!(victim.join("deep/f").exists(), "the boundary did not hold");
    // A person saw `rm -rf <that path>` and said yes: that path (and the folder holding it,
    // for the removal itself) is granted for this call, nothing else.
    let ran = c
        .call_with("terminal", args, ctx("s1").with_person_approval(true))
        .await;
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert!(!victim.exists());
    let (code, _, _) = c
        .sh(&format!("echo z > {}/later.txt", c.outside.display()))
        .await;
    assert_ne!(code, 0, "the grant outlived its call");
}
