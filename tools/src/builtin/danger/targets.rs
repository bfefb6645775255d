//! What a command writes to: the system directories and credential files whose writing needs
//! approval (or is never allowed), write targets only known at run time that could name one of
//! them, and the literal paths a command deletes or writes ([`command_writes`]), which the
//! confinement may grant to a command a person approved.

use std::sync::LazyLock;

use regex::Regex;

use super::cmd::Cmd;
use super::shell::{has_expansion, pattern};
use crate::builtin::paths::{HOME_CREDENTIALS, SHELL_RC};

pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/home",
    "/root",
    "/etc",
    "/usr",
    "/var",
    "/bin",
    "/sbin",
    "/boot",
    "/lib",
    "/lib64",
    "/lib32",
    "/opt",
    "/srv",
    "/sys",
    "/proc",
    "/dev",
    "/System",
    "/Library",
    "/Applications",
    "/Users",
    "/private",
];

pub(super) static BLOCK_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"^/dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|rdisk\d|md\d|dm-\d|mapper/|loop\d|sr\d)",
    )
});
/// A path that holds credentials or runs at every shell start: writing there needs approval.
pub(super) fn is_sensitive_target(path: &str) -> bool {
    let p = path.trim_matches(|c| c == '"' || c == '\'');
    let name = p.rsplit('/').next().unwrap_or(p);
    p.starts_with("/etc/")
        || p == "/etc"
        || p.starts_with("/private/etc/")
        || p.starts_with("~/.ssh")
        || p.contains("/.ssh/")
        || p.starts_with("$home/.ssh")
        || p.contains(".troupe/")
        || p.contains("/.aws/")
        || p.starts_with("~/.aws")
        || p.contains(".config/gh/")
        || p.contains(".docker/config.json")
        || p.contains(".kube/config")
        || BLOCK_DEVICE.is_match(p)
        || SHELL_RC.contains(&name)
        || HOME_CREDENTIALS.contains(&name)
        || name == ".env"
        || name.starts_with(".env.")
}

/// Protected files a path built from variables might turn out to be.
static PROTECTED_EXAMPLES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut paths: Vec<String> = SHELL_RC
        .iter()
        .chain(HOME_CREDENTIALS)
        .map(|name| format!("~/{name}"))
        .collect();
    paths.extend(
        [
            "~/.ssh/authorized_keys",
            "~/.ssh/config",
            "~/.ssh/id_ed25519",
            "~/.troupe/config.yaml",
            "~/.troupe/.env",
            "~/.config/fish/config.fish",
            "/etc/passwd",
            "/etc/shadow",
            "/etc/sudoers",
            "/etc/hosts",
            "/etc/crontab",
            "/etc/profile",
            "/etc/ld.so.preload",
            ".env",
            "/dev/sda",
        ]
        .map(String::from),
    );
    paths
});

/// Whether a write target could be a protected file: it is one, or it is built from
/// variables, substitutions or globs and the visible part fits one (`$H/${F}rc`).
pub(super) fn could_be_sensitive(target: &str) -> bool {
    let target = target.to_lowercase();
    if is_sensitive_target(&target) {
        return true;
    }
    if !has_expansion(&target) {
        return false;
    }
    let shape = wildcard_shape(&target);
    PROTECTED_EXAMPLES.iter().any(|p| wildcard_match(&shape, p))
}

/// A target with every part only the shell knows (variables, substitutions, globs, braces)
/// turned into `*`.
fn wildcard_shape(target: &str) -> String {
    let chars: Vec<char> = target.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let push_star = |out: &mut String| {
        if !out.ends_with('*') {
            out.push('*');
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let close = |open: char, close: char, from: usize| -> usize {
            let mut depth = 0;
            for (j, &x) in chars.iter().enumerate().skip(from) {
                if x == open {
                    depth += 1;
                } else if x == close {
                    depth -= 1;
                    if depth == 0 {
                        return j + 1;
                    }
                }
            }
            chars.len()
        };
        match c {
            '$' if chars.get(i + 1) == Some(&'(') => {
                i = close('(', ')', i + 1);
                push_star(&mut out);
            }
            '$' if chars.get(i + 1) == Some(&'{') => {
                i = close('{', '}', i + 1);
                push_star(&mut out);
            }
            '$' => {
                i += 1;
                if chars
                    .get(i)
                    .is_some_and(|c| !c.is_alphanumeric() && *c != '_')
                {
                    i += 1;
                }
                while chars
                    .get(i)
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_')
                {
                    i += 1;
                }
                push_star(&mut out);
            }
            '`' => {
                i = chars[i + 1..]
                    .iter()
                    .position(|&x| x == '`')
                    .map_or(chars.len(), |p| i + p + 2);
                push_star(&mut out);
            }
            '{' => {
                i = close('{', '}', i);
                push_star(&mut out);
            }
            '[' => {
                i = close('[', ']', i);
                push_star(&mut out);
            }
            '*' | '?' => {
                i += 1;
                push_star(&mut out);
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

/// Whether `text` fits `shape`, where `*` stands for any run of characters.
fn wildcard_match(shape: &str, text: &str) -> bool {
    let parts: Vec<&str> = shape.split('*').collect();
    if parts.len() == 1 {
        return shape == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Writes to these are not writes anyone needs to grant.
fn harmless_sink(path: &str) -> bool {
    path.is_empty()
        || path == "-"
        || path.starts_with('&')
        || path.chars().all(|c| c.is_ascii_digit())
        || ["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"].contains(&path)
        || path.starts_with("/dev/fd/")
}

/// The paths one simple command deletes or writes to, as written (relative paths are relative to
/// where it runs), leaving out those only known at run time.
pub(super) fn command_writes(c: &Cmd) -> Vec<String> {
    let mut out: Vec<&str> = c.seg.redirects.iter().map(String::as_str).collect();
    let ops =
        c.operands_after_values(&["-s", "--size", "-r", "--reference", "-t", "-m", "-o", "-g"]);
    match c.name.as_str() {
        "rm" | "unlink" | "rmdir" | "shred" | "truncate" | "touch" | "mkdir" | "tee" | "rimraf" => {
            out.extend(ops.iter().copied())
        }
        "mv" => out.extend(ops.iter().copied()),
        "cp" | "install" | "ln" | "link" | "rsync" | "scp" => {
            if let Some(at) = c
                .args
                .iter()
                .position(|a| *a == "-t" || *a == "--target-directory")
            {
                out.extend(c.args.get(at + 1).copied());
            } else if ops.len() >= 2 {
                out.extend(ops.last().copied());
            }
        }
        "dd" => out.extend(c.args.iter().filter_map(|a| a.strip_prefix("of="))),
        "sed" | "perl" if c.flags().any(|f| f.starts_with("-i") || f == "--in-place") => {
            let script_given = c
                .args
                .iter()
                .any(|a| *a == "-e" || *a == "-f" || a.starts_with("--expression"));
            out.extend(ops.iter().skip(usize::from(!script_given)).copied())
        }
        "find" if c.has("-delete") || c.has("-exec") || c.has("-execdir") => out.extend(
            c.args
                .iter()
                .take_while(|a| !a.starts_with('-') && **a != "(" && **a != "!")
                .copied(),
        ),
        _ => {}
    }
    let mut paths: Vec<String> = vec![];
    for p in out {
        if !harmless_sink(p)
            && !has_expansion(p)
            && !p.contains("<(")
            && !paths.iter().any(|q| q == p)
        {
            paths.push(p.to_string());
        }
    }
    paths
}
