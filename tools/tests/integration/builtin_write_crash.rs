//! `write_file` under a crash: a writer process is SIGKILLed in the middle of a 64 MiB write, at
//! several moments (temporary file first seen, a quarter, half, nearly all written), and the
//! target must then hold exactly its old or exactly its new content, while the next `write_file`
//! of the same path succeeds and clears the dead writer's temporary file. The test binary
//! re-executes itself as the writer (see `WRITER_ENV`).

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Fixture, ctx, json_of};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Map, Value, json};
use troupe_tools::builtin::{BuiltinConfig, Builtins, core_tools};

/// Set in the re-executed test binary: `<work dir>\n<attempt number>`. It then writes the new
/// content of that attempt to `TARGET` through `write_file` instead of running the test.
const WRITER_ENV: &str = "TROUPE_TEST_CRASH_WRITER";
/// This test's path in the test binary, for re-executing only it.
const TEST_NAME: &str =
    "builtin_write_crash::write_file_killed_mid_write_leaves_old_or_new_content";
/// The file every attempt rewrites, relative to the work directory.
const TARGET: &str = "big.txt";
/// Size of the new content each killed writer was writing.
const NEW_LEN: usize = 64 << 20;
/// Size of the content in place before each attempt.
const OLD_LEN: usize = 4 << 20;
/// How often each kill moment is tried until one kill lands before the writer's rename.
const TRIES_PER_MOMENT: usize = 5;
/// Guard against a hung writer; never an assertion about speed.
const GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// When the parent sends SIGKILL: once the writer's temporary file holds at least this many
/// bytes (0: as soon as it exists), and, past zero, only after it was seen growing.
const MOMENTS: [(&str, u64); 4] = [
    ("as soon as the temporary file is seen", 0),
    ("a quarter written", (NEW_LEN / 4) as u64),
    ("half written", (NEW_LEN / 2) as u64),
    ("15/16 written", (NEW_LEN / 16 * 15) as u64),
];

/// Text of `len` bytes in 64-byte numbered lines, distinct for every `tag` and `attempt`, so
/// that a prefix, a mix or a stale version can never equal the expected content.
fn content(tag: &str, attempt: usize, len: usize) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(len);
    let mut line = 0;
    while text.len() < len {
        let start = text.len();
        write!(text, "{tag} attempt {attempt} line {line:09} ").unwrap();
        while text.len() - start < 63 {
            text.push('~');
        }
        text.push('\n');
        line += 1;
    }
    text.truncate(len);
    text
}

/// The writer's half: `write_file` of this attempt's new content, through the public API.
async fn run_writer(spec: &str) {
    let (work, attempt) = spec.split_once('\n').unwrap();
    let work = PathBuf::from(work);
    let attempt: usize = attempt.parse().unwrap();
    let config = BuiltinConfig {
        default_cwd: work.clone(),
        receipts_dir: work.with_file_name("writer-receipts"),
        ..BuiltinConfig::default()
    };
    let builtins = Builtins::start(config).unwrap();
    let tools = core_tools(&builtins);
    let write = tools.iter().find(|t| t.name == "write_file").unwrap();
    // Built by hand rather than with json!, which would copy the 64 MiB string twice.
    let mut args = Map::new();
    args.insert("path".into(), Value::String(TARGET.into()));
    args.insert(
        "content".into(),
        Value::String(content("new", attempt, NEW_LEN)),
    );
    let result = write
        .handler
        .as_ref()
        .unwrap()
        .call(args, ctx("writer"))
        .await;
    assert!(!result.is_error, "{}", json_of(&result));
}

/// The temporary files of `TARGET` in `dir` (name and size).
fn temp_files(dir: &Path) -> Vec<(String, u64)> {
    let prefix = format!(".{TARGET}.troupe-");
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let size = e.metadata().ok()?.len();
            (name.starts_with(&prefix) && name.ends_with(".tmp")).then_some((name, size))
        })
        .collect()
}

/// How one attempt ended.
enum Outcome {
    /// SIGKILL was sent; the temporary file was this big when the parent decided to send it.
    Killed { size_at_kill: u64 },
    /// The writer finished before the moment came.
    Finished,
}

/// Watches the writer's temporary file and kills the writer once it reaches `threshold` bytes.
fn kill_at(child: &mut Child, work: &Path, threshold: u64) -> Outcome {
    let own_temp = format!(".{TARGET}.troupe-{}-", child.id());
    let started = Instant::now();
    let mut first_size = None;
    loop {
        assert!(
            started.elapsed() < GIVE_UP_AFTER,
            "the writer neither finished nor wrote its temporary file"
        );
        if child.try_wait().unwrap().is_some() {
            return Outcome::Finished;
        }
        let size = temp_files(work)
            .into_iter()
            .find(|(name, _)| name.starts_with(&own_temp))
            .map(|(_, size)| size);
        if let Some(size) = size {
            let first = *first_size.get_or_insert(size);
            let growing = size > first;
            if threshold == 0 || (growing && size >= threshold) {
                kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
                return Outcome::Killed { size_at_kill: size };
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// What the writer's exit status and stderr say, for failure messages.
fn describe(status: ExitStatus, stderr: &Path) -> String {
    format!(
        "writer exited with {status:?} (signal {:?}); its stderr:\n{}",
        status.signal(),
        fs::read_to_string(stderr).unwrap_or_default()
    )
}

#[tokio::test]
async fn write_file_killed_mid_write_leaves_old_or_new_content() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        run_writer(&spec).await;
        return;
    }
    let f = Fixture::new();
    let work = f.work();
    let target = work.join(TARGET);
    let stderr_path = f.dir.path().join("writer-stderr.txt");
    let mut attempt = 0;
    let mut landed_before_rename = 0;
    for (moment, threshold) in MOMENTS {
        for _ in 0..TRIES_PER_MOMENT {
            attempt += 1;
            let old = content("old", attempt, OLD_LEN);
            let new = content("new", attempt, NEW_LEN);
            // The old version goes in through write_file too: after a crash this is the
            // "later write of the same path" that must succeed and clear the dead writer's file.
            let (v, err) = f
                .call("write_file", json!({"path": TARGET, "content": old}))
                .await;
            assert!(!err, "rewriting after a killed writer failed: {v}");
            assert_eq!(v["verified"], true, "{v}");
            assert!(
                temp_files(&work).is_empty(),
                "temporary files of dead writers survived a write_file: {:?}",
                temp_files(&work)
            );

            let mut child = Command::new(std::env::current_exe().unwrap())
                .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env(WRITER_ENV, format!("{}\n{attempt}", work.display()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(&stderr_path).unwrap())
                .spawn()
                .unwrap();
            let outcome = kill_at(&mut child, &work, threshold);
            let status = child.wait().unwrap();

            let after = fs::read(&target).unwrap();
            let is_old = after == old.as_bytes();
            let is_new = after == new.as_bytes();
            assert!(
                is_old || is_new,
                "after a kill at '{moment}' the target holds {} bytes that are neither the old \
                 ({OLD_LEN}) nor the new ({NEW_LEN}) content; prefix of new: {}",
                after.len(),
                new.as_bytes().starts_with(&after)
            );
            let leftovers = temp_files(&work);
            // A writer may exit between the last look and the signal; its status tells.
            let killed = status.signal() == Some(Signal::SIGKILL as i32);
            match outcome {
                Outcome::Finished | Outcome::Killed { .. } if !killed => {
                    assert!(status.success(), "{}", describe(status, &stderr_path));
                    assert!(is_new, "a writer that finished must leave the new content");
                    assert!(leftovers.is_empty(), "a finished writer left {leftovers:?}");
                    eprintln!("{moment}: the writer finished before the kill; trying again");
                }
                Outcome::Finished => panic!(
                    "the writer was SIGKILLed by someone else (the OOM killer?): {}",
                    describe(status, &stderr_path)
                ),
                Outcome::Killed { size_at_kill } => {
                    assert!(leftovers.len() <= 1, "one writer left {leftovers:?}");
                    if is_old {
                        // Killed before the rename: only then may its temporary file remain.
                        landed_before_rename += 1;
                        eprintln!(
                            "{moment}: killed at {size_at_kill} bytes; target kept the old \
                             content; left behind: {leftovers:?}"
                        );
                        break;
                    }
                    assert!(leftovers.is_empty(), "a renamed write left {leftovers:?}");
                    eprintln!("{moment}: killed after the rename; target holds the new content");
                }
            }
        }
    }
    assert!(
        landed_before_rename > 0,
        "no kill landed before a writer's rename in {attempt} attempts, so the crash path was \
         never exercised"
    );

    // One more write of the same path after the last crash: it succeeds, holds exactly what was
    // sent and leaves the directory with nothing but the target.
    let last = content("last", attempt + 1, OLD_LEN);
    let (v, err) = f
        .call("write_file", json!({"path": TARGET, "content": last}))
        .await;
    assert!(!err, "{v}");
    assert_eq!(fs::read(&target).unwrap(), last.as_bytes());
    let names: Vec<_> = fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(TARGET)]);
}
