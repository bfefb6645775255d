//! sudo in `terminal` commands. troupe gives sudo its password itself, on sudo's stdin
//! (`sudo -S`), so the password never appears in the command text, the model's context, the
//! session store or a log: [`plan`] finds where the command runs sudo as its command word and
//! where `-S -p ''` goes, and refuses a command that feeds sudo a password of its own.
//!
//! Recognised: `sudo ...`, a literal path to it (`/usr/bin/sudo`, quoted or not), after
//! assignments (`LANG=C sudo ...`) and after `env` with plain options and assignments
//! (`env -u X -i A=b /usr/bin/sudo id`), at the start of each command of a list (`a && sudo b;
//! sudo c`). Not rewritten (it then runs as written and fails without a password): sudo inside
//! a shell payload (`bash -c 'sudo id'`), after `env -S` or an `env` option not listed here,
//! a path built at run time (`$SUDO id`), and sudo fed by a pipe (`x | sudo y`, where stdin is
//! the pipe's).

use std::sync::LazyLock;

use regex::Regex;

/// What a command does with sudo.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SudoPlan {
    /// The command with troupe's `-S -p ''` after each sudo it recognised; `None` when it
    /// recognised none.
    pub rewritten: Option<String>,
    /// Why the command is refused: it hands sudo a password (or an askpass helper) itself.
    pub self_fed: Option<&'static str>,
    /// The text runs sudo somewhere (recognised or not).
    pub mentions: bool,
}

/// Flags that make sudo read a password from somewhere the command chose.
static PASSWORD_FLAGS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:^|[\s;&|(`'"/])sudo(?:\s+-[^\s]*)*?\s+(?:-[A-Za-z]*[SA][A-Za-z]*|--stdin|--askpass)(?:\s|$)"#)
        .expect("a valid pattern")
});

/// Any sudo word.
static MENTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:^|[\s;&|(`'"/=])sudo(?:$|[\s;&|)`'"])"#).expect("a valid pattern")
});

/// One word of a command's prefix.
struct Word {
    /// Byte offset just after the word.
    end: usize,
    /// The word with its quotes removed.
    value: String,
    /// It expands at run time (`$`, a backquote, a glob outside quotes).
    dynamic: bool,
}

/// One simple command of a list, by byte range, and whether a pipe feeds it.
struct Segment {
    start: usize,
    end: usize,
    piped: bool,
}

/// Splits `text` at the list and pipe operators outside quotes.
fn segments(text: &str) -> Vec<Segment> {
    let bytes = text.as_bytes();
    let mut out = vec![];
    let (mut start, mut piped) = (0usize, false);
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\\' if !single => {
                i += 2;
                continue;
            }
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            b';' | b'&' | b'|' | b'\n' | b'(' | b')' if !single && !double => {
                out.push(Segment {
                    start,
                    end: i,
                    piped,
                });
                let two = bytes.get(i + 1).copied();
                piped = c == b'|' && two != Some(b'|');
                // `&&`, `||`, `;;`, `|&`: one operator.
                if matches!(
                    (c, two),
                    (b'&', Some(b'&'))
                        | (b'|', Some(b'|'))
                        | (b'|', Some(b'&'))
                        | (b';', Some(b';'))
                ) {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(Segment {
        start,
        end: bytes.len(),
        piped,
    });
    out
}

/// The words of `text[start..end]`, quotes removed.
fn words(text: &str, start: usize, end: usize) -> Vec<Word> {
    let mut out = vec![];
    let mut chars = text[start..end].char_indices().peekable();
    loop {
        while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return out;
        }
        let (mut value, mut dynamic, mut last) = (String::new(), false, start);
        let (mut single, mut double) = (false, false);
        while let Some(&(at, c)) = chars.peek() {
            if !single && !double && c.is_whitespace() {
                break;
            }
            chars.next();
            last = start + at + c.len_utf8();
            match c {
                '\'' if !double => single = !single,
                '"' if !single => double = !double,
                '\\' if !single => {
                    if let Some((at, next)) = chars.next() {
                        value.push(next);
                        last = start + at + next.len_utf8();
                    }
                }
                '$' | '`' if !single => {
                    dynamic = true;
                    value.push(c);
                }
                '*' | '?' | '[' | '{' | '~' if !single && !double => {
                    dynamic = true;
                    value.push(c);
                }
                _ => value.push(c),
            }
        }
        out.push(Word {
            end: last,
            value,
            dynamic,
        });
    }
}

fn is_assignment(word: &Word) -> bool {
    word.value.split_once('=').is_some_and(|(name, _)| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn is_named(word: &Word, program: &str) -> bool {
    !word.dynamic
        && (word.value == program
            || (word.value.starts_with('/') && word.value.rsplit('/').next() == Some(program)))
}

/// Where `-S -p ''` goes in this segment: just after its sudo word, when sudo is its command.
fn sudo_word_end(words: &[Word]) -> Option<usize> {
    let mut i = 0;
    while words.get(i).is_some_and(is_assignment) {
        i += 1;
    }
    if words.get(i).is_some_and(|w| is_named(w, "env")) {
        i += 1;
        while let Some(word) = words.get(i) {
            let v = word.value.as_str();
            if word.dynamic {
                return None;
            }
            match v {
                "-i" | "--ignore-environment" | "-" | "-0" | "--null" => i += 1,
                "-u" | "--unset" => i += 2,
                "--" => {
                    i += 1;
                    break;
                }
                _ if v.starts_with("--unset=") => i += 1,
                _ if v.starts_with("-u") && v.len() > 2 => i += 1,
                // `-S`, `--split-string`, `-C`, ...: not read here.
                _ if v.starts_with('-') => return None,
                _ if is_assignment(word) => i += 1,
                _ => break,
            }
        }
    }
    words.get(i).filter(|w| is_named(w, "sudo")).map(|w| w.end)
}

/// Reads what `command` does with sudo (see the module doc).
pub fn plan(command: &str) -> SudoPlan {
    let mentions = MENTION.is_match(command);
    if !mentions {
        return SudoPlan::default();
    }
    let self_fed = PASSWORD_FLAGS.is_match(command)
        && (command.contains('|')
            || command.contains('<')
            || command.to_ascii_uppercase().contains("SUDO_ASKPASS"));
    if self_fed {
        return SudoPlan {
            rewritten: None,
            self_fed: Some(
                "the command hands sudo a password (or an askpass helper) itself; troupe gives sudo its password, so write plain `sudo ...` without -S, -A, a pipe or a here-string into it",
            ),
            mentions,
        };
    }
    let mut inserts = vec![];
    for segment in segments(command) {
        if segment.piped {
            continue;
        }
        if let Some(end) = sudo_word_end(&words(command, segment.start, segment.end)) {
            inserts.push(end);
        }
    }
    let rewritten = (!inserts.is_empty()).then(|| {
        let mut text = command.to_string();
        for end in inserts.into_iter().rev() {
            text.insert_str(end, " -S -p ''");
        }
        text
    });
    SudoPlan {
        rewritten,
        self_fed: None,
        mentions,
    }
}

/// What sudo prints when it needed a password it did not get, or could not raise privileges.
static NEEDED_PASSWORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)sudo: (a password is required|a terminal is required|no tty present|\d+ incorrect password|.*no new privileges)|Sorry, try again")
        .expect("a valid pattern")
});

/// Whether `output` shows sudo failing for want of a (right) password.
pub fn needed_password(output: &str) -> bool {
    NEEDED_PASSWORD.is_match(output)
}

/// Whether `output` shows sudo refusing the password it was given.
pub fn refused_password(output: &str) -> bool {
    output.contains("Sorry, try again") || output.contains("incorrect password")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(command: &str) -> Option<String> {
        plan(command).rewritten
    }

    #[test]
    fn sudo_as_the_command_word_is_rewritten_in_every_spelling() {
        assert_eq!(rewritten("sudo id").as_deref(), Some("sudo -S -p '' id"));
        assert_eq!(
            rewritten("/usr/bin/sudo -u root id").as_deref(),
            Some("/usr/bin/sudo -S -p '' -u root id")
        );
        assert_eq!(
            rewritten("'/usr/bin/sudo' id").as_deref(),
            Some("'/usr/bin/sudo' -S -p '' id")
        );
        assert_eq!(
            rewritten("env -u UNUSED /usr/bin/sudo id").as_deref(),
            Some("env -u UNUSED /usr/bin/sudo -S -p '' id")
        );
        assert_eq!(
            rewritten("env -i LANG=C \"sudo\" id").as_deref(),
            Some("env -i LANG=C \"sudo\" -S -p '' id")
        );
        assert_eq!(
            rewritten("LANG=C sudo apt-get update && sudo apt-get install -y x; echo done")
                .as_deref(),
            Some(
                "LANG=C sudo -S -p '' apt-get update && sudo -S -p '' apt-get install -y x; echo done"
            )
        );
        // A bare -S the command gives without feeding anything: troupe feeds it.
        assert_eq!(
            rewritten("sudo -S id").as_deref(),
            Some("sudo -S -p '' -S id")
        );
    }

    #[test]
    fn payloads_split_strings_and_dynamic_paths_are_left_as_written() {
        for command in [
            "bash -c 'sudo id'",
            "env -S 'sudo id'",
            "env --chdir=/ sudo id",
            "$SUDO id",
            "\"$(which sudo)\" id",
            "echo x | sudo tee /etc/x",
            "echo sudo is a word",
        ] {
            assert_eq!(rewritten(command), None, "{command}");
        }
        assert!(plan("bash -c 'sudo id'").mentions);
        assert!(!plan("pseudocode id").mentions);
    }

    #[test]
    fn a_password_the_command_feeds_itself_is_refused() {
        for command in [
            "echo hunter2 | sudo -S id",
            "sudo -S id <<< hunter2",
            "sudo --stdin id < pw.txt",
            "printf 'pw\\n' | /usr/bin/sudo -kS true",
            "SUDO_ASKPASS=/tmp/give sudo -A id",
            "bash -c 'echo pw | sudo -S id'",
        ] {
            assert!(plan(command).self_fed.is_some(), "{command}");
        }
        for command in [
            "sudo id | grep root",
            "sudo -S id",
            "sudo -u root id < in.txt",
        ] {
            assert!(plan(command).self_fed.is_none(), "{command}");
        }
    }

    #[test]
    fn what_sudo_says_without_a_password_is_recognised() {
        assert!(needed_password("sudo: a password is required\n"));
        assert!(needed_password(
            "Sorry, try again.\nsudo: 1 incorrect password attempt"
        ));
        assert!(refused_password("Sorry, try again."));
        assert!(!needed_password("uid=0(root)"));
    }
}
