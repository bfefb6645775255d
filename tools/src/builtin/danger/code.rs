//! Inline interpreter code (`python3 -c`, `perl -e`, `node -e`, ...) and script files run by an
//! interpreter: which program text an interpreter is given, and whether that text reaches
//! outside the interpreter (files, the network, other programs) or hides what it calls. Such
//! code cannot be checked here, so it needs approval.

use std::sync::LazyLock;

use regex::Regex;

use super::shell::pattern;

/// Interpreters that take a program as text.
pub(super) fn is_interpreter(name: &str) -> bool {
    name.starts_with("python")
        || name.starts_with("pypy")
        || [
            "perl",
            "ruby",
            "node",
            "nodejs",
            "deno",
            "bun",
            "php",
            "lua",
            "luajit",
            "tclsh",
            "rscript",
            "osascript",
            "pwsh",
            "powershell",
            "jrunscript",
            "irb",
        ]
        .contains(&name)
}

/// Inline interpreter code that reaches files, the network, other programs, or hides what it
/// calls (dynamic imports, eval, attribute lookups by string).
static REACHES_OUT: LazyLock<Regex> = LazyLock::new(|| {
    pattern(concat!(
        r"\b(?:__import__|__builtins__|__subclasses__|__globals__|__code__|getattr|setattr|",
        r"delattr|globals|locals|vars|eval|exec|execfile|compile|open|breakpoint)\b",
        r"|\b(?:os|sys\.modules|subprocess|shutil|socket|ctypes|pty|importlib|builtins|pathlib|",
        r"urllib\d?|http|requests|httpx|ftplib|smtplib|telnetlib|webbrowser|multiprocessing|",
        r"tempfile|glob|io)\b",
        r"|\b(?:require|child_process|process|fetch|Deno|Bun|XMLHttpRequest|WebSocket)\b|\bimport\s*\(",
        r"|\b(?:unlink\w*|rmdir\w*|rmtree|rmSync|system|popen\w*|exec[lv]p?e?|spawn\w*|fork|kill|",
        r"symlink\w*|rename\w*|chmod\w*|chown\w*|mkdir\w*|truncate|syscall|sysopen|connect|",
        r"writeFile\w*|appendFile\w*)\b",
        r"|\b(?:File|FileUtils|Dir|IO|Kernel|Socket|TCPSocket|UDPSocket|Net|Open3|Process|Pathname|URI)\b",
        r"|\bqx\b|`|::Socket|\bLWP\b|\bHTTP::",
        r"|(?i:\b(?:remove-item|invoke-\w+|start-process|new-object|set-content|out-file|add-content|iex|iwr|irm)\b)",
    ))
});
static PY_IMPORT: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(?:^|[;\s])(?:import\s+([\w., ]+)|from\s+([\w.]+)\s+import)"));
/// Python modules that reach nothing outside the interpreter.
const PY_SAFE_MODULES: &[&str] = &[
    "json",
    "sys",
    "math",
    "cmath",
    "re",
    "datetime",
    "time",
    "random",
    "string",
    "collections",
    "itertools",
    "functools",
    "statistics",
    "decimal",
    "fractions",
    "textwrap",
    "unicodedata",
    "uuid",
    "csv",
    "pprint",
    "operator",
    "struct",
    "base64",
    "hashlib",
    "binascii",
    "calendar",
    "heapq",
    "bisect",
    "array",
    "enum",
    "dataclasses",
    "typing",
    "copy",
    "numbers",
    "secrets",
    "zoneinfo",
    "difflib",
    "shlex",
    "html",
    "platform",
    "this",
];

/// The inline program an interpreter is given on its command line, if any.
pub(super) fn inline_code(name: &str, args: &[&str]) -> Option<String> {
    let mut code = String::new();
    let mut found = false;
    let python = name.starts_with("python") || name.starts_with("pypy");
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        let lower = a.to_lowercase();
        let short = a.starts_with('-') && !a.starts_with("--");
        let takes_code = match name {
            _ if python => short && a.ends_with('c'),
            "perl" | "ruby" => {
                short
                    && !["-M", "-m", "-I", "-r"].iter().any(|p| a.starts_with(p))
                    && a.contains(['e', 'E'])
            }
            "node" | "nodejs" | "bun" => {
                a == "-e" || a == "-p" || a == "--eval" || a == "--print" || a == "-pe"
            }
            "deno" => a == "eval",
            "php" => a == "-r",
            "lua" | "luajit" | "rscript" | "osascript" | "irb" => a == "-e",
            "pwsh" | "powershell" => {
                short
                    && ["-c", "-command", "-e", "-ec", "-enc", "-encodedcommand"]
                        .contains(&lower.as_str())
            }
            _ => false,
        };
        if name == "perl" && (a.starts_with("-M") || a.starts_with("-m")) {
            code.push_str(&format!("use {};\n", &a[2..]));
        }
        if let Some(inline) = a
            .strip_prefix("--eval=")
            .or_else(|| a.strip_prefix("--print="))
        {
            code.push_str(inline);
            code.push('\n');
            found = true;
        } else if takes_code {
            if matches!(name, "pwsh" | "powershell")
                && ["-e", "-ec", "-enc", "-encodedcommand"].contains(&lower.as_str())
            {
                // PowerShell's encoded commands are base64: nothing to read.
                code.push_str("Invoke-Encoded\n");
            }
            if let Some(next) = args.get(i + 1) {
                code.push_str(next);
                code.push('\n');
                i += 1;
            }
            found = true;
        }
        i += 1;
    }
    found.then_some(code)
}

/// Whether inline interpreter code reaches outside the interpreter, or hides what it does.
pub(super) fn code_reaches_out(code: &str) -> bool {
    if REACHES_OUT.is_match(code) {
        return true;
    }
    PY_IMPORT.captures_iter(code).any(|c| {
        let list = c.get(1).or_else(|| c.get(2)).map_or("", |m| m.as_str());
        list.split(',').any(|m| {
            let module = m.split_whitespace().next().unwrap_or("");
            let top = module.split('.').next().unwrap_or("");
            !top.is_empty() && !PY_SAFE_MODULES.contains(&top)
        })
    })
}

/// The script file an interpreter is told to run (`python3 -u x.py`, `node --require r x.js`),
/// if its command line names one rather than inline code, a module or stdin.
pub(super) fn script_operand<'a>(name: &str, args: &[&'a str]) -> Option<&'a str> {
    let python = name.starts_with("python") || name.starts_with("pypy");
    // Options whose value is the next word.
    let takes_value: &[&str] = match name {
        _ if python => &["-W", "-X", "-Q"],
        "node" | "nodejs" | "bun" => &[
            "-r",
            "--require",
            "--import",
            "--loader",
            "--experimental-loader",
            "-C",
            "--conditions",
            "--input-type",
        ],
        "perl" => &["-I", "-M", "-m", "-x"],
        "ruby" | "irb" => &["-I", "-r", "-E", "-C"],
        "php" => &["-c", "-d", "-z"],
        "lua" | "luajit" => &["-l"],
        "deno" => &["--config", "-c", "--import-map"],
        _ => &[],
    };
    let mut i = 0;
    // `deno run x.ts`, `bun run x.ts`: the subcommand comes first.
    if matches!(name, "deno" | "bun") && args.first().is_some_and(|a| *a == "run") {
        i = 1;
    }
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            return args.get(i + 1).copied();
        }
        if a == "-" {
            return None;
        }
        if python && (a == "-m" || a.starts_with("-m") && a.len() > 2) {
            return None;
        }
        if name == "php" && a == "-f" {
            return args.get(i + 1).copied();
        }
        if a.starts_with('-') {
            i += if takes_value.contains(&a) { 2 } else { 1 };
            continue;
        }
        return Some(a);
    }
    None
}
