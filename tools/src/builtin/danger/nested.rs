//! Commands inside commands: the command a wrapper runs (`nice`, `timeout`, `env`, `xargs`,
//! `sudo`, ...), the text a shell or `eval` is given, `find -exec`, git aliases, `sed`'s `e`,
//! `trap`, `alias`, variables the shell runs (`PROMPT_COMMAND`, `BASH_ENV`), and the script
//! files shells and interpreters are told to run. Each is handed back to the check as a
//! [`Nested`] payload; what cannot be read comes back as a reason to ask.

use super::cmd::Cmd;
use super::code::{is_interpreter, script_operand};
use super::shell::{base_name, decode_ansi_c, is_assignment, is_shell};

/// Programs that run the rest of their command line (after their own options) as a command.
/// Every later word that could start that command is checked as one, so an option whose value
/// was not skipped correctly cannot hide it.
const WRAPPERS: &[&str] = &[
    "sudo",
    "doas",
    "pkexec",
    "run0",
    "env",
    "nohup",
    "time",
    "nice",
    "renice",
    "ionice",
    "command",
    "exec",
    "builtin",
    "stdbuf",
    "timeout",
    "setsid",
    "xargs",
    "busybox",
    "toybox",
    "unbuffer",
    "flock",
    "taskset",
    "chrt",
    "coproc",
    "nsenter",
    "unshare",
    "chroot",
    "runuser",
    "setpriv",
    "systemd-run",
    "strace",
    "ltrace",
    "valgrind",
    "fakeroot",
    "fakechroot",
    "proot",
    "firejail",
    "bwrap",
    "torsocks",
    "proxychains",
    "proxychains4",
    "tsocks",
    "rlwrap",
    "eatmydata",
    "nocache",
    "catchsegv",
    "numactl",
    "cgexec",
    "prlimit",
    "faketime",
    "chpst",
    "setuidgid",
    "softlimit",
    "envdir",
    "xvfb-run",
    "dbus-launch",
    "dbus-run-session",
    "caffeinate",
    "entr",
    "retry",
    "parallel",
    "sem",
    "watch",
    "ssh",
    "su",
    "sg",
    "script",
    "spawn",
    "npx",
    "pnpx",
    "bunx",
    "uv",
    "uvx",
    "poetry",
    "pipenv",
    "pdm",
    "hatch",
    "bundle",
    "conda",
    "mamba",
    "micromamba",
    "pixi",
    "direnv",
    "dotenv",
    "with-contenv",
    "s6-setuidgid",
    "capsh",
    "sandbox-exec",
    "arch",
    "linux32",
    "linux64",
    "setarch",
    "perf",
    "gdb",
    "tmux",
    "screen",
    "dtach",
    "abduco",
];

/// Shell keywords that put a command after them.
const KEYWORDS: &[&str] = &["if", "then", "else", "elif", "do", "while", "until", "!"];

/// Wrappers that join their arguments into a line a shell runs (`watch 'rm -rf x'`,
/// `ssh host 'rm -rf x'`, `su -c '...'`, `script -c '...'`): each argument is checked as
/// shell text too.
const STRING_WRAPPERS: &[&str] = &[
    "watch",
    "ssh",
    "su",
    "runuser",
    "script",
    "flock",
    "sg",
    "tmux",
    "screen",
    "parallel",
    "sem",
    "capsh",
    "expect",
    "entr",
    "retry",
    "xterm",
    "gnome-terminal",
    "konsole",
    "hyperfine",
    "nodemon",
    "systemd-run",
    "dtach",
    "abduco",
];

/// Programs whose copies or links under another name would hide what later runs.
const DESTROYERS: &[&str] = &[
    "rm", "rmdir", "unlink", "shred", "truncate", "dd", "wipefs", "mkfs", "find", "mv", "kill",
    "pkill", "killall", "chmod", "chown", "git", "sed", "awk", "gawk", "rimraf",
];

pub(super) fn is_wrapper(name: &str) -> bool {
    WRAPPERS.contains(&name) || KEYWORDS.contains(&name)
}

/// A program a link to would hide: one that deletes, or runs other commands.
pub(super) fn is_carrier(name: &str) -> bool {
    DESTROYERS.contains(&name)
        || name.starts_with("mkfs")
        || is_shell(name)
        || is_interpreter(name)
        || (is_wrapper(name) && name.len() > 2)
}

/// Where a command may start among a segment's words.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    /// Index of the command word.
    pub(super) start: usize,
    /// The word before it is an option, so it may be that option's value.
    pub(super) after_option: bool,
}

/// The commands a segment may run: its own command word (after assignments) and, behind a
/// wrapper, every later word that is not an option or an assignment.
pub(super) fn candidates(words: &[String]) -> Vec<Candidate> {
    let mut out = vec![];
    let mut from = 0;
    loop {
        let Some(first) = words[from..].iter().position(|w| !is_assignment(w)) else {
            return out;
        };
        let first = from + first;
        out.push(Candidate {
            start: first,
            after_option: false,
        });
        let name = base_name(&words[first]);
        // A shell keyword puts exactly one command after it.
        if KEYWORDS.contains(&name.as_str()) {
            from = first + 1;
            continue;
        }
        if is_wrapper(&name) {
            for j in first + 1..words.len() {
                let w = &words[j];
                if w.starts_with('-') || w.starts_with('+') || is_assignment(w) || w.is_empty() {
                    continue;
                }
                let prev = &words[j - 1];
                // xargs' `{}` after a program's name is that program's argument.
                let placeholder = w == "{}" && j - 1 > first && !is_wrapper(&base_name(prev));
                out.push(Candidate {
                    start: j,
                    after_option: (prev.starts_with('-') && prev != "--") || placeholder,
                });
            }
        }
        return out;
    }
}

/// The program a segment runs once wrappers and their options are set aside (the shell in
/// `sudo -u x bash -s`), for naming what a pipe feeds.
pub(super) fn program_words(words: &[String]) -> &[String] {
    let all = candidates(words);
    let chosen = all
        .iter()
        .find(|c| !is_wrapper(&base_name(&words[c.start])) && !c.after_option)
        .or(all.first());
    match chosen {
        Some(c) => &words[c.start..],
        None => &[],
    }
}

/// A command inside a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Nested {
    /// Shell text: checked as a command of its own.
    Text(String),
    /// The words of a command (`find -exec rm {} ;`).
    Words(Vec<String>),
    /// A file a shell (`interpreter: None`) or an interpreter runs.
    Script {
        path: String,
        interpreter: Option<String>,
    },
    /// Program text for an interpreter, from a here-string.
    Code(String),
    /// Something that cannot be read here.
    Ask {
        key: &'static str,
        reason: &'static str,
    },
}

const SCRIPT_UNREADABLE: &str = "it runs a script produced at run time, which cannot be checked";
const SED_EXEC: &str = "its sed script runs shell commands (the e command or the e flag of s)";
const SED_FILE: &str = "its sed script is read from a file that is not checked";
const HOOKS: &str =
    "it points git at another hooks directory, whose scripts run unchecked on git commands";
const PRELOAD: &str = "it loads a library into every program it starts (LD_PRELOAD and the like), which cannot be checked";

/// The commands hidden inside one command.
pub(super) fn payloads(c: &Cmd) -> Vec<Nested> {
    let mut out = vec![];
    let name = c.name.as_str();
    let args = &c.args;
    if is_shell(name) {
        shell_payloads(c, &mut out);
    }
    match name {
        "eval" => out.push(Nested::Text(args.join(" "))),
        "source" | "." => {
            if let Some(file) = args.iter().find(|a| !a.starts_with('-')) {
                out.push(script(file, None));
            }
        }
        "trap" => {
            let rest: Vec<&&str> = args.iter().skip_while(|a| a.starts_with('-')).collect();
            if !args.iter().any(|a| *a == "-p" || *a == "-l")
                && let Some(action) = rest.first()
            {
                out.push(Nested::Text(action.to_string()));
            }
        }
        "alias" => out.extend(
            args.iter()
                .filter_map(|a| a.split_once('=').map(|(_, v)| Nested::Text(v.to_string()))),
        ),
        "env" => {
            for (i, a) in args.iter().enumerate() {
                if *a == "-S" || *a == "--split-string" {
                    out.extend(args.get(i + 1).map(|p| Nested::Text(p.to_string())));
                } else if let Some(p) = a
                    .strip_prefix("--split-string=")
                    .or_else(|| a.strip_prefix("-S").filter(|p| !p.is_empty()))
                {
                    out.push(Nested::Text(p.to_string()));
                }
            }
        }
        "find" => {
            let mut i = 0;
            while i < args.len() {
                if ["-exec", "-execdir", "-ok", "-okdir"].contains(&args[i]) {
                    let words: Vec<String> = args[i + 1..]
                        .iter()
                        .take_while(|a| **a != ";" && **a != "+")
                        .map(|a| a.to_string())
                        .collect();
                    i += words.len();
                    out.push(Nested::Words(words));
                }
                i += 1;
            }
        }
        "git" => git_payloads(args, &mut out),
        "sed" | "gsed" => sed_payloads(args, &mut out),
        _ => {}
    }
    if is_interpreter(name) {
        if let Some(file) = script_operand(name, args)
            && super::code::inline_code(name, args).is_none()
        {
            out.push(script(file, Some(name)));
        }
        if script_operand(name, args).is_none() && super::code::inline_code(name, args).is_none() {
            for input in &c.seg.inputs {
                out.push(script(input, Some(name)));
            }
        }
        out.extend(c.seg.here_strings.iter().map(|h| Nested::Code(h.clone())));
    }
    if STRING_WRAPPERS.contains(&name) {
        let mut after_c = false;
        for a in args {
            let runs =
                a.contains(char::is_whitespace) || a.contains([';', '|', '&', '$', '`', '>', '<']);
            if (runs || after_c) && !a.starts_with('-') {
                out.push(Nested::Text(a.to_string()));
            }
            after_c = a.starts_with('-')
                && !a.starts_with("--")
                && (a.ends_with('c') || a.ends_with('e'))
                || *a == "--command";
        }
        out.extend(
            args.iter()
                .filter_map(|a| a.strip_prefix("--command="))
                .map(|p| Nested::Text(p.to_string())),
        );
    }
    // `echo 'rm -rf x' | sh`: what is echoed is what the shell runs.
    if c.is(&["echo", "printf"]) && c.piped_into_shell() {
        let payload: Vec<&str> = args
            .iter()
            .copied()
            .filter(|w| !w.starts_with('-'))
            .collect();
        let payload = payload.join(" ");
        if name == "printf" || c.has("-e") {
            out.push(Nested::Text(decode_ansi_c(&payload)));
        }
        out.push(Nested::Text(payload));
    }
    out
}

fn script(path: &str, interpreter: Option<&str>) -> Nested {
    if path.starts_with("<(") || path.contains("$(") || path.contains('`') {
        return Nested::Ask {
            key: "script_unreadable",
            reason: SCRIPT_UNREADABLE,
        };
    }
    Nested::Script {
        path: path.to_string(),
        interpreter: interpreter.map(str::to_string),
    }
}

/// `bash -c TEXT ARGS...`, `bash --rcfile F`, `bash FILE`, `bash < FILE`, `bash <<< TEXT`.
fn shell_payloads(c: &Cmd, out: &mut Vec<Nested>) {
    let args = &c.args;
    let (mut i, mut dash_c, mut stdin) = (0, false, false);
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if a == "--rcfile" || a == "--init-file" {
            out.extend(args.get(i + 1).map(|f| script(f, None)));
            i += 2;
            continue;
        }
        if a.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(letters) = a.strip_prefix('-').or_else(|| a.strip_prefix('+')) {
            dash_c |= letters.contains('c');
            stdin |= letters.contains('s');
            i += if letters.ends_with('o') || letters.ends_with('O') {
                2
            } else {
                1
            };
            continue;
        }
        break;
    }
    let rest = &args[i.min(args.len())..];
    if dash_c {
        // The command text and its positional arguments (`bash -c '"$@"' _ rm -rf x`).
        out.extend(rest.iter().map(|r| Nested::Text(r.to_string())));
        return;
    }
    match rest.first() {
        Some(file) if !stdin => out.push(script(file, None)),
        _ => {
            out.extend(c.seg.inputs.iter().map(|f| script(f, None)));
            out.extend(c.seg.here_strings.iter().map(|h| Nested::Text(h.clone())));
        }
    }
}

/// Config keys whose value git runs as a command.
const GIT_COMMAND_KEYS: &[&str] = &[
    "pager",
    "editor",
    "sshcommand",
    "fsmonitor",
    "textconv",
    "clean",
    "smudge",
    "process",
    "external",
    "program",
    "helper",
    "askpass",
    "command",
    "cmd",
    "tool",
    "proxy",
    "packobjectshook",
    "receivepack",
    "uploadpack",
    "alternaterefscommand",
];

/// `git -c k=v`, `git config k v`: aliases starting with `!` and command-valued keys.
fn git_payloads(args: &[&str], out: &mut Vec<Nested>) {
    let mut pairs: Vec<(String, String)> = vec![];
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        let setting = if a == "-c" || a == "--config" {
            i += 1;
            args.get(i).copied()
        } else {
            a.strip_prefix("-c").filter(|r| r.contains('='))
        };
        if let Some((k, v)) = setting.and_then(|s| s.split_once('=')) {
            pairs.push((k.to_string(), v.to_string()));
        }
        if a == "config" {
            let valued = ["--file", "-f", "--blob", "--type", "--default", "--comment"];
            let mut ops = vec![];
            let mut j = i + 1;
            while j < args.len() {
                if valued.contains(&args[j]) {
                    j += 2;
                    continue;
                }
                if !args[j].starts_with('-') {
                    ops.push(args[j]);
                }
                j += 1;
            }
            if let [key, value, ..] = ops[..] {
                pairs.push((key.to_string(), value.to_string()));
            }
            break;
        }
        if !a.starts_with('-') && a != "config" && i > 0 && !args[i - 1].starts_with('-') {
            // Past the subcommand: its own arguments are not settings.
            break;
        }
        i += 1;
    }
    for (key, value) in pairs {
        let key = key.to_lowercase();
        let last = key.rsplit('.').next().unwrap_or("");
        if key.ends_with("hookspath") {
            out.push(Nested::Ask {
                key: "git_hooks",
                reason: HOOKS,
            });
        } else if let Some(cmd) = value.strip_prefix('!') {
            out.push(Nested::Text(cmd.to_string()));
        } else if key.starts_with("alias.") {
            out.push(Nested::Text(format!("git {value}")));
        } else if GIT_COMMAND_KEYS.contains(&last) {
            out.push(Nested::Text(value));
        }
    }
}

/// `sed` scripts: the `e` command and the `e` flag of `s` run shell commands.
fn sed_payloads(args: &[&str], out: &mut Vec<Nested>) {
    let mut scripts: Vec<&str> = vec![];
    let mut operands: Vec<&str> = vec![];
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "-f"
            || a.starts_with("--file")
            || (a.starts_with('-')
                && !a.starts_with("--")
                && a.ends_with('f')
                && !a[1..].starts_with('i'))
        {
            out.push(Nested::Ask {
                key: "sed_exec",
                reason: SED_FILE,
            });
        } else if let Some(s) = a.strip_prefix("--expression=") {
            scripts.push(s);
        } else if a == "--expression" {
            i += 1;
            scripts.extend(args.get(i).copied());
        } else if a.starts_with('-') && !a.starts_with("--") && !a[1..].starts_with('i') {
            if let Some(at) = a.find('e') {
                let rest = &a[at + 1..];
                if rest.is_empty() {
                    i += 1;
                    scripts.extend(args.get(i).copied());
                } else {
                    scripts.push(rest);
                }
            }
        } else if !a.starts_with('-') {
            operands.push(a);
        }
        i += 1;
    }
    if scripts.is_empty() {
        scripts.extend(operands.first().copied());
    }
    if scripts.iter().any(|s| sed_runs_commands(s)) {
        out.push(Nested::Ask {
            key: "sed_exec",
            reason: SED_EXEC,
        });
    }
}

/// Whether a sed script holds an `e` command or an `s///e`.
pub(super) fn sed_runs_commands(script: &str) -> bool {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_delimited = |from: usize, delim: char| -> usize {
        let mut j = from;
        while j < chars.len() && chars[j] != delim {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        j + 1
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | ';' | '{' | '}' | '!' | ',' | '$' | '~' | '+' => i += 1,
            '0'..='9' => i += 1,
            '/' => i = skip_delimited(i + 1, '/'),
            '\\' => {
                let delim = chars.get(i + 1).copied().unwrap_or('/');
                i = skip_delimited(i + 2, delim);
            }
            'e' => return true,
            's' | 'y' => {
                let Some(&delim) = chars.get(i + 1) else {
                    return false;
                };
                let mut j = skip_delimited(i + 2, delim);
                j = skip_delimited(j, delim);
                let flags_end = chars[j.min(chars.len())..]
                    .iter()
                    .position(|f| [';', '\n', '}', ' '].contains(f))
                    .map_or(chars.len(), |p| j + p);
                let flags: String = chars[j.min(chars.len())..flags_end].iter().collect();
                if c == 's' && flags.contains('e') {
                    return true;
                }
                // `w file` ends the command at the end of the line.
                i = if flags.contains('w') {
                    chars[flags_end..]
                        .iter()
                        .position(|x| *x == '\n')
                        .map_or(chars.len(), |p| flags_end + p)
                } else {
                    flags_end
                };
            }
            'a' | 'i' | 'c' | 'r' | 'R' | 'w' | 'W' | ':' | 'b' | 't' | 'T' => {
                // Text, a file name or a label to the end of the line (labels end at `;`).
                let ends: &[char] = if matches!(c, ':' | 'b' | 't' | 'T') {
                    &['\n', ';']
                } else {
                    &['\n']
                };
                i = chars[i + 1..]
                    .iter()
                    .position(|x| ends.contains(x))
                    .map_or(chars.len(), |p| i + 1 + p);
            }
            _ => i += 1,
        }
    }
    false
}

/// Variables whose value the shell or a program runs as a command.
const COMMAND_VARIABLES: &[&str] = &[
    "PROMPT_COMMAND",
    "PS0",
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "GIT_SEQUENCE_EDITOR",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "LESSOPEN",
    "LESSCLOSE",
    "BROWSER",
    "FCEDIT",
    "GIT_PROXY_COMMAND",
    "RSYNC_RSH",
    "TAR_OPTIONS",
];

/// What an assignment (`BASH_ENV=f`, `PROMPT_COMMAND='...'`) makes the shell or a program run.
pub(super) fn assignment_payload(word: &str) -> Option<Nested> {
    let (name, value) = word.split_once('=')?;
    let value = value.trim_matches(|q| q == '\'' || q == '"');
    if name == "BASH_ENV" || name == "ENV" || name == "ZDOTDIR" {
        return Some(script(value, None));
    }
    if [
        "LD_PRELOAD",
        "LD_AUDIT",
        "LD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "DYLD_LIBRARY_PATH",
    ]
    .contains(&name)
    {
        return Some(Nested::Ask {
            key: "preload",
            reason: PRELOAD,
        });
    }
    if name.starts_with("BASH_FUNC_") || COMMAND_VARIABLES.contains(&name) {
        return Some(Nested::Text(value.to_string()));
    }
    if name.starts_with("GIT_CONFIG_VALUE_")
        && let Some(cmd) = value.strip_prefix('!')
    {
        return Some(Nested::Text(cmd.to_string()));
    }
    None
}
