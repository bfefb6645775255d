//! Reading shell text the way the shell will: the tricks that hide a command from plain
//! matching are undone ([`normalise`]), literal assignments are filled in, and the text is
//! split into simple commands ([`split_commands`]) with their words (quotes removed, brace
//! expansions expanded), redirections, here-strings and the text of their substitutions.

use std::sync::LazyLock;

use regex::Regex;

/// Builds a built-in pattern; one that fails to compile is logged and matches nothing.
pub(super) fn pattern(source: &str) -> Regex {
    match Regex::new(source) {
        Ok(re) => re,
        Err(err) => {
            tracing::error!(%err, "a built-in command pattern failed to compile");
            #[allow(clippy::unwrap_used)]
            Regex::new(r"[^\s\S]").unwrap()
        }
    }
}

static ANSI: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07"));
static IFS: LazyLock<Regex> = LazyLock::new(|| pattern(r"\$\{IFS[^}]*\}|\$IFS"));
static HOME_DIR: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(^|[\s=:'\x22])/(?:home|Users)/[A-Za-z0-9._-]+(/|\s|$)"));
static ANSI_C: LazyLock<Regex> = LazyLock::new(|| pattern(r"\$'((?:[^'\\]|\\.)*)'"));

/// Removes the tricks that hide a command from plain matching.
pub(super) fn normalise(command: &str) -> String {
    let text = ANSI.replace_all(command, "");
    let text = text
        .replace('\0', "")
        .replace("\\\r\n", "")
        .replace("\\\n", "");
    // $'\x72\x6d' is rm to the shell: decode it into a plain single-quoted word.
    let text = ANSI_C.replace_all(&text, |c: &regex::Captures| {
        format!("'{}'", decode_ansi_c(&c[1]).replace('\'', "'\\''"))
    });
    let text = IFS.replace_all(&text, " ");
    // Empty quotes and backslashes in the middle of words: r''m and r\m are both rm.
    let text = text.replace("''", "").replace("\"\"", "");
    HOME_DIR
        .replace_all(&drop_word_backslashes(&text), "$1~$2")
        .into_owned()
}

/// Drops a backslash before a letter, digit, `/` or `-` outside quotes (the shell ignores it
/// there); inside quotes backslashes are the program's business (`printf '\x72'`) and stay.
fn drop_word_backslashes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\\') => match chars.peek() {
                Some(&next) if next.is_alphanumeric() || next == '/' || next == '-' => {}
                Some(&next) => {
                    out.push(c);
                    out.push(next);
                    chars.next();
                }
                None => out.push(c),
            },
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (Some('"'), '\\') => {
                out.push(c);
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            (Some(q), _) if c == q => {
                quote = None;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// The text of an ANSI-C quoted string (`$'...'`) with its escapes decoded.
pub(super) fn decode_ansi_c(body: &str) -> String {
    let chars: Vec<char> = body.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let digits = |from: usize, max: usize, radix: u32| -> (u32, usize) {
        let mut value = 0u32;
        let mut n = 0;
        while n < max
            && let Some(d) = chars.get(from + n).and_then(|c| c.to_digit(radix))
        {
            value = value * radix + d;
            n += 1;
        }
        (value, n)
    };
    while i < chars.len() {
        let c = chars[i];
        if c != '\\' || i + 1 == chars.len() {
            out.push(c);
            i += 1;
            continue;
        }
        let e = chars[i + 1];
        i += 2;
        let (code, used) = match e {
            'x' => digits(i, 2, 16),
            'u' => digits(i, 4, 16),
            'U' => digits(i, 8, 16),
            '0'..='7' => {
                let (v, n) = digits(i - 1, 3, 8);
                (v, n.saturating_sub(1))
            }
            'n' => ('\n' as u32, 0),
            't' => ('\t' as u32, 0),
            'r' => ('\r' as u32, 0),
            'a' => (7, 0),
            'b' => (8, 0),
            'e' | 'E' => (27, 0),
            'f' => (12, 0),
            'v' => (11, 0),
            other => (other as u32, 0),
        };
        if matches!(e, 'x' | 'u' | 'U') && used == 0 {
            out.push('\\');
            out.push(e);
            continue;
        }
        i += used;
        out.extend(char::from_u32(code));
    }
    out
}

static ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r#"(?:^|[;&|\s(])([A-Za-z_][A-Za-z0-9_]*)=('[^'$`]*'|"[^"$`\\]*"|[^\s;&|'"$`()<>\\]*)"#)
});

/// The text with literal variable assignments it makes filled in where the variables are used
/// (`a=r; b=m; $a$b` reads `rm`), when it makes any.
pub(super) fn with_assignments_filled(text: &str) -> Option<String> {
    let mut values: Vec<(String, String)> = vec![];
    for c in ASSIGN.captures_iter(text) {
        let value = c[2].trim_matches(|q| q == '\'' || q == '"').to_string();
        values.retain(|(name, _)| *name != c[1]);
        values.push((c[1].to_string(), value));
    }
    if values.is_empty() {
        return None;
    }
    let mut out = text.to_string();
    for (name, value) in &values {
        out = out.replace(&format!("${{{name}}}"), value);
        let plain = pattern(&format!(r"\${}([^A-Za-z0-9_]|$)", regex::escape(name)));
        out = plain
            .replace_all(&out, |c: &regex::Captures| format!("{value}{}", &c[1]))
            .into_owned();
    }
    (out != text).then_some(out)
}

/// One simple command: its words (quotes removed) and what it reads and writes.
#[derive(Debug, Default, Clone)]
pub(super) struct Segment {
    pub(super) words: Vec<String>,
    /// Targets of `>`, `>>`, `>|`: files it writes.
    pub(super) redirects: Vec<String>,
    /// Sources of `<`: files it reads as its input.
    pub(super) inputs: Vec<String>,
    /// Words given with `<<<`: text it reads as its input.
    pub(super) here_strings: Vec<String>,
    /// Text inside `$(...)`, backticks and process substitutions, checked as commands.
    pub(super) substitutions: Vec<String>,
    /// Commands of `>(...)`: programs its output is fed to.
    pub(super) output_programs: Vec<String>,
    /// The operator that joined this command to the next one (`|`, `&&`, ...).
    pub(super) joined_by: String,
}

/// What the word being read becomes once it ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    Word,
    Out,
    In,
    HereString,
}

/// The word being read and what is known about it.
struct Pending {
    word: String,
    in_word: bool,
    /// An unquoted `{` is in it, so brace expansion applies.
    brace: bool,
    slot: Slot,
}

impl Pending {
    fn flush(&mut self, seg: &mut Segment) {
        if !self.in_word {
            return;
        }
        let word = std::mem::take(&mut self.word);
        match self.slot {
            Slot::Word if self.brace => seg.words.extend(expand_braces(&word)),
            Slot::Word => seg.words.push(word),
            Slot::Out => seg.redirects.push(word),
            Slot::In => seg.inputs.push(word),
            Slot::HereString => seg.here_strings.push(word),
        }
        self.in_word = false;
        self.brace = false;
        self.slot = Slot::Word;
    }
}

/// Splits shell text into simple commands. Errors on quoting that never closes.
pub(super) fn split_commands(text: &str) -> Result<Vec<Segment>, ()> {
    let chars: Vec<char> = text.chars().collect();
    let mut segments = vec![];
    let mut seg = Segment::default();
    let mut p = Pending {
        word: String::new(),
        in_word: false,
        brace: false,
        slot: Slot::Word,
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                let end = chars[i + 1..].iter().position(|&x| x == '\'').ok_or(())?;
                p.word.extend(&chars[i + 1..i + 1 + end]);
                p.in_word = true;
                i += end + 2;
                continue;
            }
            '"' => {
                let mut j = i + 1;
                let mut closed = false;
                while j < chars.len() {
                    match chars[j] {
                        '\\' if j + 1 < chars.len() => {
                            p.word.push(chars[j + 1]);
                            j += 2;
                            continue;
                        }
                        '"' => {
                            closed = true;
                            break;
                        }
                        '$' if chars.get(j + 1) == Some(&'(') => {
                            let (inner, end) = balanced(&chars, j + 2)?;
                            seg.substitutions.push(inner.clone());
                            p.word.push_str(&format!("$({inner})"));
                            j = end + 1;
                            continue;
                        }
                        '`' => {
                            let end = chars[j + 1..].iter().position(|&x| x == '`').ok_or(())?;
                            let inner: String = chars[j + 1..j + 1 + end].iter().collect();
                            p.word.push_str(&format!("`{inner}`"));
                            seg.substitutions.push(inner);
                            j += end + 2;
                            continue;
                        }
                        other => p.word.push(other),
                    }
                    j += 1;
                }
                if !closed {
                    return Err(());
                }
                p.in_word = true;
                i = j + 1;
                continue;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (inner, end) = balanced(&chars, i + 2)?;
                seg.substitutions.push(inner.clone());
                p.word.push_str(&format!("$({inner})"));
                p.in_word = true;
                i = end + 1;
                continue;
            }
            '<' | '>' if chars.get(i + 1) == Some(&'(') => {
                let (inner, end) = balanced(&chars, i + 2)?;
                seg.substitutions.push(inner.clone());
                if c == '>' {
                    seg.output_programs.push(inner.clone());
                }
                p.word.push_str(&format!("{c}({inner})"));
                p.in_word = true;
                i = end + 1;
                continue;
            }
            '`' => {
                let end = chars[i + 1..].iter().position(|&x| x == '`').ok_or(())?;
                seg.substitutions
                    .push(chars[i + 1..i + 1 + end].iter().collect());
                p.word.extend(&chars[i..i + 2 + end]);
                p.in_word = true;
                i += end + 2;
                continue;
            }
            '\\' if i + 1 < chars.len() => {
                p.word.push(chars[i + 1]);
                p.in_word = true;
                i += 2;
                continue;
            }
            ' ' | '\t' => p.flush(&mut seg),
            '>' | '<' => {
                // A bare file-descriptor number before the operator belongs to it (2>file).
                if p.in_word && p.word.chars().all(|d| d.is_ascii_digit() || d == '&') {
                    p.word.clear();
                    p.in_word = false;
                }
                p.flush(&mut seg);
                if c == '<' && chars.get(i + 1) == Some(&'<') {
                    if chars.get(i + 2) == Some(&'<') {
                        p.slot = Slot::HereString;
                        i += 3;
                    } else {
                        seg.words.push("<<".into());
                        i += 2;
                    }
                    continue;
                }
                while matches!(chars.get(i + 1), Some('>') | Some('|') | Some('&')) {
                    i += 1;
                }
                p.slot = if c == '>' { Slot::Out } else { Slot::In };
            }
            '{' if !p.in_word && chars.get(i + 1) == Some(&'}') => {
                // find's and xargs' `{}` placeholder is a word.
                p.word.push_str("{}");
                p.in_word = true;
                i += 2;
                continue;
            }
            '{' if !p.in_word
                && chars
                    .get(i + 1)
                    .is_some_and(|n| !n.is_whitespace() && *n != '}') =>
            {
                // `{rm,-rf,x}` is brace expansion, `{ rm -rf x; }` a group.
                p.word.push(c);
                p.in_word = true;
                p.brace = true;
            }
            ';' | '\n' | '\r' | '|' | '&' | '(' | ')' | '{' | '}' => {
                if (c == '{' || c == '}') && p.in_word {
                    p.brace |= c == '{';
                    p.word.push(c);
                    i += 1;
                    continue;
                }
                p.flush(&mut seg);
                let mut op = c.to_string();
                if matches!(chars.get(i + 1), Some('|') | Some('&')) && (c == '|' || c == '&') {
                    op.push(chars[i + 1]);
                    i += 1;
                }
                seg.joined_by = op;
                segments.push(std::mem::take(&mut seg));
            }
            other => {
                p.word.push(other);
                p.in_word = true;
            }
        }
        i += 1;
    }
    p.flush(&mut seg);
    segments.push(seg);
    Ok(segments
        .into_iter()
        .filter(|s| !s.words.is_empty() || !s.redirects.is_empty() || !s.inputs.is_empty())
        .collect())
}

/// The text between `(` (already consumed; `start` is just after it) and its matching `)`.
fn balanced(chars: &[char], start: usize) -> Result<(String, usize), ()> {
    let mut depth = 1;
    let mut j = start;
    while j < chars.len() {
        match chars[j] {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Ok((chars[start..j].iter().collect(), j));
                }
            }
            _ => {}
        }
        j += 1;
    }
    Err(())
}

/// Most words one brace expansion may produce before the rest is left unexpanded.
const MAX_BRACE_WORDS: usize = 64;

/// The words a brace expression stands for (`{rm,-rf,x}` is `rm -rf x`, `a{b,c}` is `ab ac`);
/// the word itself when it holds none.
pub(super) fn expand_braces(word: &str) -> Vec<String> {
    let chars: Vec<char> = word.chars().collect();
    let Some(open) = chars.iter().position(|&c| c == '{') else {
        return vec![word.to_string()];
    };
    // `${var}` is a parameter, not a brace expression.
    if open > 0 && chars[open - 1] == '$' {
        let rest: String = chars[open..].iter().collect();
        let close = rest.find('}').map_or(rest.len(), |c| c + 1);
        let head: String = chars[..open].iter().collect::<String>() + &rest[..close];
        return expand_braces(&rest[close..])
            .into_iter()
            .map(|tail| format!("{head}{tail}"))
            .collect();
    }
    let mut depth = 0;
    let mut commas = vec![];
    let mut close = None;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    close = Some(j);
                    break;
                }
            }
            ',' if depth == 1 => commas.push(j),
            _ => {}
        }
    }
    let Some(close) = close else {
        return vec![word.to_string()];
    };
    let head: String = chars[..open].iter().collect();
    let tail: String = chars[close + 1..].iter().collect();
    let body: String = chars[open + 1..close].iter().collect();
    let mut alternatives: Vec<String> = vec![];
    if commas.is_empty() {
        match body.split_once("..") {
            Some((a, b)) if a.len() == 1 && b.len() == 1 => {
                let (a, b) = (a.chars().next(), b.chars().next());
                if let (Some(a), Some(b)) = (a, b) {
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    alternatives.extend((lo..=hi).take(MAX_BRACE_WORDS).map(String::from));
                }
            }
            _ => {
                let rest = expand_braces(&tail);
                return rest
                    .into_iter()
                    .map(|t| format!("{head}{{{body}}}{t}"))
                    .collect();
            }
        }
    } else {
        let mut from = open + 1;
        for &comma in commas.iter().chain(std::iter::once(&close)) {
            alternatives.push(chars[from..comma].iter().collect());
            from = comma + 1;
        }
    }
    let mut out = vec![];
    for alt in alternatives {
        for expanded in expand_braces(&format!("{head}{alt}{tail}")) {
            if out.len() >= MAX_BRACE_WORDS {
                return out;
            }
            out.push(expanded);
        }
    }
    out.retain(|w| !w.is_empty());
    out
}

pub(super) fn is_assignment(word: &str) -> bool {
    match word.find('=') {
        Some(at) if at > 0 => word[..at]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_'),
        _ => false,
    }
}

/// The program name of a word: lower-cased, without its directory.
pub(super) fn base_name(word: &str) -> String {
    word.rsplit('/').next().unwrap_or(word).to_lowercase()
}

/// Whether a word holds something only the shell knows at run time: a variable, a command
/// substitution or a glob.
pub(super) fn has_expansion(word: &str) -> bool {
    word.contains(['$', '`', '*', '?', '[', '{'])
}

/// Whether a command word names its program only at run time (`$a$b`, `"$(printf rm)"`,
/// `/bin/r?`). A variable in the directory part alone does not hide which program runs.
pub(super) fn is_opaque_name(word: &str) -> bool {
    if word == "[" || word == "[[" {
        return false;
    }
    let base = word.rsplit('/').next().unwrap_or(word);
    word.contains('`') || word.contains("$(") || word.contains("<(") || has_expansion(base)
}

/// Shells: what they are given with `-c`, on stdin or as a script file is shell text.
pub(super) const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "posh",
    "rbash",
];

/// Whether a word names a shell.
pub(super) fn is_shell(name: &str) -> bool {
    SHELLS.contains(&name) || name == "ksh93" || name == "bash5"
}
