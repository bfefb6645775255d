//! A real terminal for troupe: a tmux server with one pane running the troupe binary, keys
//! typed into it and the screen read back. `troupe chat` tests use [`Pane::start`]; tests of
//! what any command draws on a terminal use [`Pane::command`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How a pane is started: size, what troupe logs, how long a wait may take.
struct Launch<'a> {
    /// `NAME=value` words added to troupe's environment.
    env: &'a [String],
    /// Arguments after the binary (`chat …` for a chat pane).
    args: Vec<&'a str>,
    width: u16,
    log_filter: &'a str,
    /// Whether `NO_COLOR` is taken out of the environment, so troupe draws what a terminal gets.
    unset_no_color: bool,
    /// Longest wait for something to appear on the screen.
    wait: Duration,
    /// Longest wait for the command to end.
    end_wait: Duration,
}

/// A tmux server with one pane (30 rows) running troupe; the pane stays after troupe exits,
/// and the server is killed when this is dropped.
pub(crate) struct Pane {
    socket: String,
    /// The troupe home: its logs/chat.log is shown when a wait fails.
    home: PathBuf,
    wait: Duration,
    end_wait: Duration,
}

impl Pane {
    /// Starts `troupe chat ARGS` in `dir` with `home` as the troupe home, 80 columns wide, as
    /// the pane's own process (so Ctrl-C reaches it as it would in a terminal).
    pub(crate) fn start(dir: &Path, home: &Path, args: &[&str]) -> Pane {
        Pane::start_with_env(dir, home, &[], args)
    }

    /// [`Pane::start`] with `env` (`NAME=value` words) added to troupe's environment.
    pub(crate) fn start_with_env(dir: &Path, home: &Path, env: &[String], args: &[&str]) -> Pane {
        let mut words = vec!["chat"];
        words.extend_from_slice(args);
        Pane::launch(
            dir,
            home,
            Launch {
                env,
                args: words,
                width: 80,
                log_filter: "info,troupe=debug",
                unset_no_color: false,
                wait: Duration::from_secs(60),
                end_wait: Duration::from_secs(60),
            },
        )
    }

    /// Runs `troupe ARGS` (any command) in `dir`, 100 columns wide, with warnings-only logs and
    /// `NO_COLOR` unset, so what troupe draws for a person is on the screen. Waits are long:
    /// embedding a catalog on a busy machine takes a while.
    pub(crate) fn command(dir: &Path, home: &Path, args: &[&str]) -> Pane {
        Pane::launch(
            dir,
            home,
            Launch {
                env: &[],
                args: args.to_vec(),
                width: 100,
                log_filter: "warn",
                unset_no_color: true,
                wait: Duration::from_secs(180),
                end_wait: Duration::from_secs(300),
            },
        )
    }

    fn launch(dir: &Path, home: &Path, launch: Launch<'_>) -> Pane {
        assert!(
            Command::new("tmux").arg("-V").output().is_ok(),
            "these tests drive troupe in tmux; install it (apt-get install tmux, or bash scripts/install-test-deps.sh)"
        );
        let socket = format!(
            "troupe-pane-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let mut command = format!(
            "cd {} && exec env -u TROUPE_BASE_URL -u OPENAI_BASE_URL{}",
            quote(dir),
            if launch.unset_no_color {
                " -u NO_COLOR"
            } else {
                ""
            }
        );
        for word in launch.env {
            command.push(' ');
            command.push_str(&quote(Path::new(word)));
        }
        command.push_str(&format!(
            " TROUPE_LOG={} TROUPE_HOME={} TROUPE_BUNDLED_PLUGINS={} {}",
            launch.log_filter,
            quote(home),
            quote(&home.join("no-bundled")),
            quote(Path::new(env!("CARGO_BIN_EXE_troupe"))),
        ));
        for arg in &launch.args {
            command.push(' ');
            command.push_str(&quote(Path::new(arg)));
        }
        std::fs::create_dir_all(home).unwrap();
        let conf = home.join("tmux.conf");
        std::fs::write(&conf, "set -g remain-on-exit on\n").unwrap();
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f"])
            .arg(&conf)
            .args([
                "new-session",
                "-d",
                "-x",
                &launch.width.to_string(),
                "-y",
                "30",
            ])
            .args(["-s", "chat", &command])
            .status()
            .unwrap();
        assert!(status.success(), "tmux could not start");
        Pane {
            socket,
            home: home.to_path_buf(),
            wait: launch.wait,
            end_wait: launch.end_wait,
        }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` (literally), then Enter.
    pub(crate) fn line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "chat", "-l", text]);
        self.key("Enter");
    }

    /// Presses a key (`Enter`, `C-c`, `C-d`).
    pub(crate) fn key(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "chat", key]);
    }

    /// The screen and its scrollback, as text.
    pub(crate) fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-500", "-t", "chat"])
    }

    /// The end of troupe's chat log, for failure messages (empty for other commands).
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.home.join("logs/chat.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until `found` holds for the screen; returns it.
    pub(crate) fn wait(&self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if found(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < self.wait,
                "waited {:?} for {what}; the screen:\n{screen}\nthe log:\n{}",
                self.wait,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn wait_for(&self, needle: &str) -> String {
        self.wait(&format!("{needle:?}"), |s| s.contains(needle))
    }

    /// Waits for the prompt at the bottom: the line editor owns the terminal again (a key
    /// pressed before that is read by the terminal's line mode, not by troupe).
    pub(crate) fn wait_prompt(&self) -> String {
        self.wait("the prompt", |s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim)
                == Some("›")
        })
    }

    /// Waits for the prompt to come back after `count` turns (one `──` summary line each).
    pub(crate) fn wait_turns(&self, count: usize) -> String {
        self.wait(&format!("{count} turn summaries"), |s| {
            s.matches("── ").count() >= count
        })
    }

    /// Waits for troupe to exit; its exit code. tmux does not always reap the pane's process
    /// at once, so an exited process still waiting to be reaped counts too.
    pub(crate) fn exit_code(&self) -> i32 {
        let start = Instant::now();
        let pid = self.tmux(&["display", "-p", "-t", "chat", "#{pane_pid}"]);
        loop {
            let state = self.tmux(&[
                "display",
                "-p",
                "-t",
                "chat",
                "#{pane_dead} #{pane_dead_status}",
            ]);
            if let Some(code) = state.trim().strip_prefix("1 ") {
                return code.parse().unwrap();
            }
            if let Some(code) = zombie_exit_code(pid.trim()) {
                return code;
            }
            assert!(
                start.elapsed() < self.end_wait,
                "troupe did not exit; the screen:\n{}\nthe log:\n{}",
                self.screen(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The exit code of a process that exited and waits to be reaped (state Z): field 52 of
/// /proc/PID/stat holds its wait status.
fn zombie_exit_code(pid: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    if fields.first() != Some(&"Z") {
        return None;
    }
    let status: i32 = fields.get(49)?.parse().ok()?;
    Some((status >> 8) & 0xff)
}

/// `path` quoted for the shell.
pub(crate) fn quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}
