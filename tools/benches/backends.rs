//! Terminal backend benchmarks: `terminal` running `true` on each backend (start to result)
//! beside the same thing done by hand: `bash -c true`, `bwrap ... true`, `docker exec <c> true`
//! and `ssh` over a multiplexed connection. docker and ssh are measured when the test
//! backends run (scripts/start-test-backends.sh, then source target/test-backends.env).
//! Run with `cargo bench -p troupe-tools --bench backends`.

use std::hint::black_box;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use troupe_tools::CallContext;
use troupe_tools::builtin::{
    BuiltinConfig, Builtins, DockerBackend, DockerSettings, LocalBackend, SandboxBackend,
    SandboxSettings, SshBackend, SshSettings, TerminalBackend, core_tools,
};

fn run_quiet(command: &mut Command) {
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the command runs");
    assert!(status.success(), "{command:?} failed");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path().to_path_buf();
    let env = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());

    let mut backends: Vec<(&str, Arc<dyn TerminalBackend>, Command)> = vec![];
    let mut bash = Command::new("bash");
    bash.args(["-c", "true"]);
    backends.push(("local", Arc::new(LocalBackend::default()), bash));
    let sandbox = SandboxBackend::new(SandboxSettings::new(vec![cwd.clone()]))
        .expect("bubblewrap makes a sandbox");
    let mut bwrap = Command::new("bwrap");
    bwrap
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ])
        .args([
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--new-session",
        ])
        .args(["--", "bash", "-c", "true"]);
    backends.push(("sandbox", Arc::new(sandbox), bwrap));
    if let Some(image) = env("TROUPE_TEST_DOCKER_IMAGE") {
        let docker = DockerBackend::new(DockerSettings::new(image, cwd.clone()))
            .expect("the docker backend");
        let container = docker.container().expect("the container starts");
        let mut exec = Command::new("docker");
        exec.args(["exec", &container, "true"]);
        backends.push(("docker", Arc::new(docker), exec));
    }
    let ssh_master = dir.path().join("bench-master");
    if let (Some(host), Some(port), Some(user), Some(key), Some(known)) = (
        env("TROUPE_TEST_SSH_HOST"),
        env("TROUPE_TEST_SSH_PORT"),
        env("TROUPE_TEST_SSH_USER"),
        env("TROUPE_TEST_SSH_KEY"),
        env("TROUPE_TEST_SSH_KNOWN_HOSTS"),
    ) {
        let mut settings = SshSettings::new(host.clone());
        settings.port = port.parse().expect("a port");
        settings.user = Some(user.clone());
        settings.key = Some(key.clone().into());
        settings.known_hosts = Some(known.clone().into());
        let backend = SshBackend::new(settings).expect("the ssh backend");
        backend.connect().expect("ssh connects");
        // By hand: the same options, a master of its own, then commands reusing it.
        let ssh = |extra: &[&str]| {
            let mut command = Command::new("ssh");
            command
                .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
                .arg("-o")
                .arg(format!("UserKnownHostsFile={known}"))
                .args(["-i", &key, "-p", &port, "-l", &user])
                .arg("-o")
                .arg(format!("ControlPath={}", ssh_master.display()))
                .args(extra)
                .arg(&host);
            command
        };
        run_quiet(&mut ssh(&[
            "-o",
            "ControlMaster=yes",
            "-o",
            "ControlPersist=yes",
            "-f",
            "-N",
        ]));
        let mut by_hand = ssh(&["-o", "ControlMaster=no", "-T"]);
        by_hand.arg("true");
        backends.push(("ssh", Arc::new(backend), by_hand));
    }

    let mut group = c.benchmark_group("backend_terminal_true");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(6));
    for (name, backend, mut by_hand) in backends {
        let builtins = rt
            .block_on(async {
                Builtins::start_with_backend(
                    BuiltinConfig {
                        default_cwd: cwd.clone(),
                        receipts_dir: cwd.join("receipts"),
                        ..BuiltinConfig::default()
                    },
                    backend.clone(),
                )
            })
            .expect("the built-ins start");
        let tools = core_tools(&builtins);
        let terminal = tools
            .iter()
            .find(|t| t.name == "terminal")
            .and_then(|t| t.handler.clone())
            .expect("terminal has a handler");
        group.bench_function(format!("{name}/terminal"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let args = json!({"command": "true"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    let result = terminal.call(args, CallContext::detached("bench")).await;
                    assert!(!result.is_error, "{result:?}");
                    black_box(result)
                })
            })
        });
        group.bench_function(format!("{name}/by_hand"), |b| {
            b.iter(|| run_quiet(&mut by_hand))
        });
        backend.shutdown();
    }
    group.finish();
    let _ = Command::new("ssh")
        .arg("-o")
        .arg(format!("ControlPath={}", ssh_master.display()))
        .args(["-O", "exit", "x"])
        .stderr(Stdio::null())
        .status();
}

/// The boundary's cost on the local backend: `terminal` running `true` and `execute_code`
/// running `print(1)`, unconfined and confined (troupe's home at `$HOME/.troupe` hidden), in the
/// same run.
fn confinement(c: &mut Criterion) {
    use troupe_tools::builtin::confine::{ConfinePolicy, ConfineSettings, Support, probe};
    let Support::Available { abi } = probe() else {
        eprintln!("no Landlock here: the confinement benchmark is skipped");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a scratch directory");
    let cwd = dir.path().to_path_buf();
    let home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| cwd.clone());
    let policy = ConfinePolicy::new(
        abi,
        ConfineSettings {
            hidden: vec![home.join(".troupe")],
            network: true,
            ..ConfineSettings::default()
        },
    )
    .expect("the policy");
    let backends: Vec<(&str, Arc<dyn TerminalBackend>)> = vec![
        ("unconfined", Arc::new(LocalBackend::default())),
        (
            "confined",
            Arc::new(LocalBackend::default().confined(Arc::new(policy))),
        ),
    ];
    let mut group = c.benchmark_group("local_confinement");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    for (name, backend) in backends {
        let builtins = rt
            .block_on(async {
                Builtins::start_with_backend(
                    BuiltinConfig {
                        default_cwd: cwd.clone(),
                        receipts_dir: cwd.join("receipts"),
                        ..BuiltinConfig::default()
                    },
                    backend,
                )
            })
            .expect("the built-ins start");
        let tools = core_tools(&builtins);
        for (tool, args) in [
            ("terminal", json!({"command": "true"})),
            ("execute_code", json!({"code": "print(1)"})),
        ] {
            let handler = tools
                .iter()
                .find(|t| t.name == tool)
                .and_then(|t| t.handler.clone())
                .expect("the tool has a handler");
            let args = args.as_object().cloned().unwrap_or_default();
            group.bench_function(format!("{tool}/{name}"), |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let result = handler
                            .call(args.clone(), CallContext::detached("bench"))
                            .await;
                        assert!(!result.is_error, "{result:?}");
                        black_box(result)
                    })
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, confinement);
criterion_main!(benches);
