//! The walk over a command and every command inside it: each simple command and each command a
//! wrapper runs is held against the rules, nested text is read to [`MAX_DEPTH`], script files
//! are read from disk, programs run by path are resolved to what they link to, and `cd` and
//! `PATH=` are followed so the files read are the ones the shell would run.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use super::cmd::Cmd;
use super::code::{code_reaches_out, is_interpreter};
use super::nested::{Nested, assignment_payload, candidates, is_carrier, payloads, program_words};
use super::rules::{command_verdict, text_verdict};
use super::shell::{
    Segment, base_name, has_expansion, is_assignment, is_shell, normalise, split_commands,
    with_assignments_filled,
};
use super::targets::command_writes;
use super::{CommandVerdict, MAX_DEPTH};
use crate::builtin::paths::expand_home;

/// How many pieces of text one check reads before it gives up and asks.
const BUDGET: usize = 500;
/// The largest script file read at check time.
const MAX_SCRIPT_BYTES: u64 = 512 * 1024;

const TOO_DEEP: &str = "it nests commands too deeply to check (shells in shells, eval of eval, scripts running scripts), so what runs at the bottom cannot be read";
const TOO_COMPLEX: &str =
    "it holds more nested commands than the check reads, so part of it cannot be checked";
const SCRIPT_UNREADABLE: &str = "it runs a script file that cannot be read here (missing, unreadable, too large, written by the same command, or in a directory only known at run time), so what it runs cannot be checked";
const SCRIPT_CODE: &str = "it runs a script whose code reaches files, the network or other programs, which cannot be checked here";
const INLINE_CODE: &str = "it feeds interpreter code that reaches files, the network or other programs, which cannot be checked here";

/// Keys of verdicts that mean part of the command could not be read.
const UNREADABLE: &[&str] = &[
    "opaque_command",
    "eval_opaque",
    "source_opaque",
    "pipe_to_interpreter",
    "inline_code",
    "script_unreadable",
    "script_code",
    "too_deep",
    "too_complex",
    "unparsed_quoting",
    "write_sensitive_unresolved",
    "sed_exec",
    "preload",
];

/// One check's state.
pub(super) struct Walk {
    pub(super) verdict: CommandVerdict,
    /// Part of the command could not be read.
    pub(super) unreadable: bool,
    /// Literal paths the command writes, in the order met.
    pub(super) targets: Vec<String>,
    /// Where the command runs now (after `cd`); `None` once unknown.
    cwd: Option<PathBuf>,
    /// Where the shell looks for programs, once the command set `PATH`.
    path_dirs: Option<Vec<PathBuf>>,
    /// Every path the command writes anywhere: a script it writes cannot be read beforehand.
    written: Vec<String>,
    budget: usize,
}

impl Walk {
    pub(super) fn run(command: &str, cwd: Option<&Path>) -> Walk {
        let mut walk = Walk {
            verdict: CommandVerdict::Allowed,
            unreadable: false,
            targets: vec![],
            cwd: cwd.map(Path::to_path_buf),
            path_dirs: None,
            written: vec![],
            budget: BUDGET,
        };
        // A first pass to learn what the command writes anywhere in it.
        let mut scout = Walk {
            cwd: None,
            ..Walk::empty()
        };
        scout.text(command, 0);
        walk.written = scout.targets.iter().map(|t| plain_path(t)).collect();
        walk.text(command, 0);
        walk
    }

    fn empty() -> Walk {
        Walk {
            verdict: CommandVerdict::Allowed,
            unreadable: false,
            targets: vec![],
            cwd: None,
            path_dirs: None,
            written: vec![],
            budget: BUDGET,
        }
    }

    fn add(&mut self, verdict: CommandVerdict) {
        if verdict.key().is_some_and(|k| UNREADABLE.contains(&k)) {
            self.unreadable = true;
        }
        self.verdict = std::mem::replace(&mut self.verdict, CommandVerdict::Allowed).and(verdict);
    }

    fn ask(&mut self, key: &'static str, reason: &'static str) {
        self.add(CommandVerdict::NeedsApproval { key, reason });
    }

    fn settled(&self) -> bool {
        matches!(self.verdict, CommandVerdict::Forbidden { .. })
    }

    /// Takes one unit of the budget; false (having asked) when too deep or out of budget.
    fn enter(&mut self, depth: usize) -> bool {
        if self.settled() {
            return false;
        }
        if depth > MAX_DEPTH {
            self.ask("too_deep", TOO_DEEP);
            return false;
        }
        if self.budget == 0 {
            self.ask("too_complex", TOO_COMPLEX);
            return false;
        }
        self.budget -= 1;
        true
    }

    /// Checks shell text.
    pub(super) fn text(&mut self, text: &str, depth: usize) {
        if !self.enter(depth) {
            return;
        }
        let text = normalise(text);
        self.add(text_verdict(&text));
        // Quoting that cannot be parsed was asked about by a text rule.
        let Ok(segments) = split_commands(&text) else {
            return;
        };
        let (cwd, path_dirs) = (self.cwd.clone(), self.path_dirs.clone());
        let aliases = aliases(&segments);
        for (n, seg) in segments.iter().enumerate() {
            for sub in &seg.substitutions {
                self.text(sub, depth + 1);
            }
            for word in seg.words.iter().filter(|w| is_assignment(w)) {
                if let Some(payload) = assignment_payload(word) {
                    self.nested(payload, depth + 1);
                }
            }
            let words = with_alias(&seg.words, &aliases);
            let fed = fed_program(&segments, n);
            self.segment(seg, &words, segments.get(n + 1), fed, depth);
            self.follow(&words);
        }
        if let Some(filled) = with_assignments_filled(&text) {
            // The same command again with its variables filled in, from where it started.
            let after = (self.cwd.clone(), self.path_dirs.clone());
            (self.cwd, self.path_dirs) = (cwd, path_dirs);
            self.text(&filled, depth + 1);
            (self.cwd, self.path_dirs) = after;
        }
    }

    /// Checks one simple command and every command its wrappers may run.
    fn segment(
        &mut self,
        seg: &Segment,
        words: &[String],
        next: Option<&Segment>,
        fed: Option<(String, Vec<String>)>,
        depth: usize,
    ) {
        let path_prefix: Option<Vec<PathBuf>> = words
            .iter()
            .take_while(|w| is_assignment(w))
            .find_map(|w| w.strip_prefix("PATH="))
            .map(|v| self.path_list(v));
        for cand in candidates(words) {
            if self.settled() {
                return;
            }
            let word = &words[cand.start];
            let (name, script) = self.program(word, path_prefix.as_deref());
            let cmd = Cmd {
                seg,
                next,
                word,
                name,
                args: words[cand.start + 1..].iter().map(String::as_str).collect(),
                fed: fed.clone(),
                after_option: cand.after_option,
            };
            self.add(command_verdict(&cmd));
            for target in command_writes(&cmd) {
                if !self.targets.contains(&target) {
                    self.targets.push(target);
                }
            }
            for payload in payloads(&cmd) {
                self.nested(payload, depth + 1);
            }
            if let Some((path, interpreter)) = script {
                self.script(&path, interpreter.as_deref(), depth + 1);
            }
        }
    }

    fn nested(&mut self, payload: Nested, depth: usize) {
        match payload {
            Nested::Text(text) => self.text(&text, depth),
            Nested::Words(words) => {
                if self.enter(depth) {
                    let seg = Segment {
                        words,
                        ..Segment::default()
                    };
                    self.segment(&seg, &seg.words, None, None, depth);
                }
            }
            Nested::Script { path, interpreter } => {
                self.script(&path, interpreter.as_deref(), depth)
            }
            Nested::Code(code) => {
                if code_reaches_out(&code) {
                    self.ask("inline_code", INLINE_CODE);
                }
            }
            Nested::Ask { key, reason } => self.ask(key, reason),
        }
    }

    /// Reads a script file a shell sources or runs, or an interpreter runs, and checks it.
    fn script(&mut self, path: &str, interpreter: Option<&str>, depth: usize) {
        if !self.enter(depth) {
            return;
        }
        if matches!(path, "-" | "/dev/stdin") {
            // What a pipe feeds a shell is checked with the command that feeds it.
            return;
        }
        let content = match self.resolve(path) {
            Some(file) if !has_expansion(path) && !self.written.contains(&plain_path(path)) => {
                read_script(&file)
            }
            _ => None,
        };
        let Some(content) = content else {
            self.ask("script_unreadable", SCRIPT_UNREADABLE);
            return;
        };
        match interpreter {
            Some(name) if is_interpreter(name) => {
                if code_reaches_out(&content) {
                    self.ask("script_code", SCRIPT_CODE);
                }
            }
            _ => {
                let lines: Vec<&str> = content
                    .lines()
                    .filter(|l| !l.trim_start().starts_with('#'))
                    .collect();
                self.text(&lines.join("\n"), depth + 1);
            }
        }
    }

    /// `path` against where the command runs now; `None` when that is unknown.
    fn resolve(&self, path: &str) -> Option<PathBuf> {
        let p = expand_home(path);
        if p.is_absolute() {
            Some(p)
        } else {
            self.cwd.as_ref().map(|cwd| cwd.join(p))
        }
    }

    /// The program a command word runs: its name (the linked program's when the word is a
    /// path to a link or another name of a dangerous program), and the script file with its
    /// interpreter when the word runs a script by path.
    fn program(
        &mut self,
        word: &str,
        path_prefix: Option<&[PathBuf]>,
    ) -> (String, Option<(String, Option<String>)>) {
        let own = base_name(word);
        if has_expansion(word) || word.is_empty() {
            return (own, None);
        }
        let found = if word.contains('/') {
            match self.resolve(word) {
                Some(p) => Some(p),
                None => return (own, Some((word.to_string(), None))),
            }
        } else {
            let dirs = path_prefix.or(self.path_dirs.as_deref());
            dirs.and_then(|dirs| dirs.iter().map(|d| d.join(word)).find(|p| p.is_file()))
        };
        let Some(found) = found else {
            return (own, None);
        };
        let Ok(meta) = std::fs::metadata(&found) else {
            // Made by the same command (`ln -s /bin/rm x; ./x`): cannot be known beforehand.
            let shown = plain_path(word);
            let made_here = self
                .written
                .iter()
                .any(|w| *w == shown || base_name(w) == own);
            return (own, made_here.then(|| (word.to_string(), None)));
        };
        if !meta.is_file() {
            return (own, None);
        }
        let real = std::fs::canonicalize(&found)
            .ok()
            .map(|p| base_name(&p.to_string_lossy()))
            .unwrap_or_else(|| own.clone());
        let name = if is_carrier(&own) {
            own.clone()
        } else if let Some(known) = known_program(&meta) {
            known
        } else {
            real
        };
        let script = shebang(&found).map(|interp| (found.to_string_lossy().into_owned(), interp));
        (
            name,
            script.map(|(p, i)| (p, Some(i).filter(|i| !is_shell(i)))),
        )
    }

    /// Follows `cd` and `PATH=` so later commands are read where they run.
    fn follow(&mut self, words: &[String]) {
        let Some(first) = words.iter().position(|w| !is_assignment(w)) else {
            for w in words {
                if let Some(v) = w.strip_prefix("PATH=") {
                    self.path_dirs = Some(self.path_list(v));
                }
            }
            return;
        };
        let name = base_name(&words[first]);
        let ops: Vec<&String> = words[first + 1..]
            .iter()
            .filter(|w| !w.starts_with('-'))
            .collect();
        match name.as_str() {
            "cd" | "pushd" => match ops.first() {
                None => self.cwd = std::env::var_os("HOME").map(PathBuf::from),
                Some(dir) if !has_expansion(dir) => self.cwd = self.resolve(dir),
                Some(_) => self.cwd = None,
            },
            "popd" => self.cwd = None,
            "export" | "declare" | "typeset" | "readonly" | "local" => {
                for w in ops {
                    if let Some(v) = w.strip_prefix("PATH=") {
                        self.path_dirs = Some(self.path_list(v));
                    }
                }
            }
            _ => {}
        }
    }

    /// The directories of a `PATH` value that can be read here (`$PATH` itself is the usual
    /// lookup and needs no resolving).
    fn path_list(&self, value: &str) -> Vec<PathBuf> {
        value
            .trim_matches(|q| q == '\'' || q == '"')
            .split(':')
            .filter(|d| !has_expansion(d))
            .filter_map(|d| self.resolve(if d.is_empty() { "." } else { d }))
            .collect()
    }
}

/// A path as written, without a leading `./` or trailing `/`, for comparing.
fn plain_path(path: &str) -> String {
    let p = path.trim_start_matches("./").trim_end_matches('/');
    p.to_string()
}

/// The text of a script file, when it is small enough and text.
fn read_script(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_SCRIPT_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_SCRIPT_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The interpreter a `#!` line names (`env`'s argument for `#!/usr/bin/env python3`).
fn shebang(path: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?.strip_prefix("#!")?;
    let line = line.lines().next()?;
    let mut words = line.split_whitespace();
    let first = base_name(words.next()?);
    if first == "env" {
        return words.find(|w| !w.starts_with('-')).map(base_name);
    }
    Some(first)
}

/// Programs the check knows by name, by file identity: a hard link or another name of one of
/// them (`ln /bin/rm x`) is known as what it is.
fn known_program(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    static KNOWN: LazyLock<HashMap<(u64, u64), String>> = LazyLock::new(|| {
        let mut known = HashMap::new();
        let names = [
            "rm", "rmdir", "unlink", "shred", "truncate", "dd", "find", "xargs", "env", "sh",
            "bash", "dash", "zsh", "python3", "perl", "ruby", "node", "busybox", "sudo", "mv",
        ];
        for dir in ["/bin", "/usr/bin", "/sbin", "/usr/sbin", "/usr/local/bin"] {
            for name in names {
                if let Ok(m) = std::fs::metadata(Path::new(dir).join(name)) {
                    known.entry((m.dev(), m.ino())).or_insert(name.to_string());
                }
            }
        }
        known
    });
    KNOWN.get(&(meta.dev(), meta.ino())).cloned()
}

/// `alias name=value` definitions in the text.
fn aliases(segments: &[Segment]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for seg in segments {
        if seg.words.first().is_some_and(|w| w == "alias") {
            for def in &seg.words[1..] {
                if let Some((name, value)) = def.split_once('=') {
                    out.insert(name.to_string(), value.to_string());
                }
            }
        }
    }
    out
}

/// The words with an alias in command position replaced by what it stands for.
fn with_alias(words: &[String], aliases: &HashMap<String, String>) -> Vec<String> {
    let first = words.iter().position(|w| !is_assignment(w));
    match first.and_then(|at| aliases.get(&words[at]).map(|v| (at, v))) {
        Some((at, value)) => words[..at]
            .iter()
            .cloned()
            .chain(value.split_whitespace().map(str::to_string))
            .chain(words[at + 1..].iter().cloned())
            .collect(),
        None => words.to_vec(),
    }
}

/// The program segment `n`'s output feeds (`| sh`, `> >(sh)`), named and with its arguments.
fn fed_program(segments: &[Segment], n: usize) -> Option<(String, Vec<String>)> {
    let seg = segments.get(n)?;
    let words: Vec<String> = if seg.joined_by.starts_with('|') && seg.joined_by != "||" {
        program_words(&segments.get(n + 1)?.words).to_vec()
    } else {
        let inner = seg.output_programs.first()?;
        let parsed = split_commands(inner).ok()?;
        program_words(&parsed.first()?.words).to_vec()
    };
    let (first, rest) = words.split_first()?;
    Some((base_name(first), rest.to_vec()))
}
