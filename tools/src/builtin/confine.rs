//! The boundary of what troupe starts on this machine: terminal commands, background
//! processes, `execute_code` scripts, hooks and MCP servers may write only their workspace,
//! the temporary directories and what `troupe.yaml` grants, and can neither read nor write
//! troupe's home (tokens, sessions, boards, plugins) nor the config files it read.
//!
//! [`Reach`] describes what one process may reach; [`Reach::plan`] turns it into Landlock rules
//! and [`Reach::compile`] into a ruleset, **in the parent**, before the fork. Between fork and
//! exec the child only calls [`restrict_self`] (`prctl(PR_SET_NO_NEW_PRIVS)` when needed, then
//! `landlock_restrict_self`): both are plain system calls, safe in a forked copy of a
//! multi-threaded process. [`ConfinePolicy`] is what the runtime keeps: the hidden set and the
//! grants of the configuration, from which each spawn's [`Reach`] is made.
//!
//! # Why Landlock, through raw system calls
//! Landlock needs no privilege, no namespace and no helper program, works the same as root and
//! as a normal user, costs a few system calls per spawn and is inherited by everything the
//! command starts, across `exec` and `setsid`. bubblewrap (the `sandbox` backend) needs user
//! namespaces and a program to be installed, and costs a process and a mount table per call.
//! The three system calls and two structures are used directly through `libc` rather than the
//! `landlock` crate: the restriction must happen between fork and exec, where only raw calls
//! are safe anyway; the rules are opened here with `O_PATH | O_NOFOLLOW` (a symlink among the
//! siblings must never carry a grant to its target); and nothing is downgraded silently (an
//! older kernel's missing rights are masked here, knowingly).
//!
//! # Hiding a path with allow-only rules
//! Landlock only grants: whatever a rule allows on a directory holds for everything beneath
//! it. To hide `H` (troupe's home) while the rest stays readable, no rule may sit on `H` or on
//! any of its ancestors; instead each *sibling* along the way, from `/` down to `H`, gets the
//! rule its subtree needs ([`Reach::plan`]). The same holds for a writable directory holding a
//! hidden one (a workspace containing troupe's home) and for exceptions re-granted beneath a
//! hidden path (a board task's workspace under `$TROUPE_HOME/workspaces`). Limits, inherent to
//! the trick: the directories on such a path (`/`, the parents of `H`) are themselves neither
//! listable nor writable, only their entries are; and an entry created later directly in such
//! a directory is not covered (the rules are recomputed at every spawn, so it is from the next
//! command on). That is why troupe gives commands a private `TMPDIR` when its home lies in the
//! system's temporary directory.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Landlock's file-system rights (the kernel's `LANDLOCK_ACCESS_FS_*` bits).
pub mod access {
    /// Run a file.
    pub const EXECUTE: u64 = 1 << 0;
    /// Open a file for writing.
    pub const WRITE_FILE: u64 = 1 << 1;
    /// Open a file for reading.
    pub const READ_FILE: u64 = 1 << 2;
    /// List a directory.
    pub const READ_DIR: u64 = 1 << 3;
    /// Remove a directory.
    pub const REMOVE_DIR: u64 = 1 << 4;
    /// Remove a file.
    pub const REMOVE_FILE: u64 = 1 << 5;
    /// Make a character device.
    pub const MAKE_CHAR: u64 = 1 << 6;
    /// Make a directory.
    pub const MAKE_DIR: u64 = 1 << 7;
    /// Make a regular file.
    pub const MAKE_REG: u64 = 1 << 8;
    /// Make a Unix socket.
    pub const MAKE_SOCK: u64 = 1 << 9;
    /// Make a named pipe.
    pub const MAKE_FIFO: u64 = 1 << 10;
    /// Make a block device.
    pub const MAKE_BLOCK: u64 = 1 << 11;
    /// Make a symbolic link.
    pub const MAKE_SYM: u64 = 1 << 12;
    /// Link or rename a file across directories (ABI 2).
    pub const REFER: u64 = 1 << 13;
    /// Truncate a file (ABI 3).
    pub const TRUNCATE: u64 = 1 << 14;
    /// `ioctl` on a device (ABI 5).
    pub const IOCTL_DEV: u64 = 1 << 15;

    /// Read and run.
    pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
    /// Read, run and change, but never make a device node (root could otherwise make one
    /// for a disk in `/tmp` and read it there).
    pub const WRITE: u64 = READ
        | WRITE_FILE
        | REMOVE_DIR
        | REMOVE_FILE
        | MAKE_DIR
        | MAKE_REG
        | MAKE_SOCK
        | MAKE_FIFO
        | MAKE_SYM
        | REFER
        | TRUNCATE;
    /// What a device file programs need gets: read, write, truncate (`> /dev/null`), ioctl.
    pub const DEVICE: u64 = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV;
    /// The rights that mean something on a file that is not a directory.
    pub const ON_FILES: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
}

/// The character devices programs open (`/dev/pts` and `/dev/shm` are directories, granted
/// apart).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// The system's temporary directories (with `$TMPDIR`, added when set).
pub(crate) const TEMP_DIRS: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// The test hook: `TROUPE_CONFINE_PROBE=unavailable` makes [`probe`] report Landlock missing,
/// so a test can show what troupe does on a kernel without it.
pub const PROBE_VAR: &str = "TROUPE_CONFINE_PROBE";

/// `terminal.confine` in `troupe.yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfineMode {
    /// Confine when the kernel can; otherwise say so at start and rely on the text check.
    #[default]
    Auto,
    /// Confine, or refuse to start.
    On,
    /// Never confine (a loud warning at every start).
    Off,
}

impl ConfineMode {
    /// Reads `auto`, `on` or `off` (also `true`/`false`); anything else is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ConfineMode::Auto),
            "on" | "true" | "yes" => Some(ConfineMode::On),
            "off" | "false" | "no" => Some(ConfineMode::Off),
            _ => None,
        }
    }
}

/// Whether this kernel can confine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Landlock is there, at this ABI version.
    Available {
        /// The ABI version (1 to 7 and up).
        abi: i32,
    },
    /// It is not, and why.
    Unavailable {
        /// In words a person can act on.
        why: String,
    },
}

/// Asks the kernel for its Landlock ABI version (honouring [`PROBE_VAR`]).
pub fn probe() -> Support {
    if std::env::var(PROBE_VAR).is_ok_and(|v| v.trim() == "unavailable") {
        return Support::Unavailable {
            why: format!("{PROBE_VAR}=unavailable says so (a test hook)"),
        };
    }
    #[cfg(target_os = "linux")]
    {
        const VERSION: libc::c_uint = 1;
        // SAFETY: with a null attribute and size 0 the call only reports the ABI version.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                VERSION,
            )
        };
        if abi >= 1 {
            return Support::Available { abi: abi as i32 };
        }
        let err = io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later needed)".into(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built into this kernel but not enabled (add landlock to the lsm= boot parameter)".into()
            }
            _ => format!("the Landlock probe failed: {err}"),
        };
        Support::Unavailable { why }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Support::Unavailable {
            why: "Landlock exists only on Linux".into(),
        }
    }
}

/// What one process may reach. Everything not hidden is readable; the most specific entry
/// wins (a workspace inside a hidden directory is writable, a hidden directory inside a
/// writable one is hidden).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Writable (and readable) trees.
    pub writable: Vec<PathBuf>,
    /// Trees and files neither readable nor writable.
    pub hidden: Vec<PathBuf>,
    /// Trees re-granted read and run beneath a hidden one (a plugin's own folder).
    pub readable: Vec<PathBuf>,
    /// TCP connect and bind allowed.
    pub network: bool,
}

/// One Landlock rule: `access` on everything beneath `path`.
pub type Grant = (PathBuf, u64);

impl Reach {
    /// The rules as the person means them: path -> access, most specific wins. Paths are made
    /// canonical (Landlock sees real directories, not the links to them).
    pub fn rules(&self) -> BTreeMap<PathBuf, u64> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut rules = BTreeMap::new();
        rules.insert(PathBuf::from("/"), access::READ);
        // Listing /dev is fine; reading a disk from it is not.
        rules.insert(PathBuf::from("/dev"), access::READ_DIR);
        for device in DEVICES {
            rules.insert(canon(Path::new(device)), access::DEVICE);
        }
        rules.insert(
            canon(Path::new("/dev/pts")),
            access::READ | access::DEVICE | access::WRITE,
        );
        for dir in &self.writable {
            rules.insert(canon(dir), access::WRITE);
        }
        for dir in &self.hidden {
            rules.insert(canon(dir), 0);
        }
        for dir in &self.readable {
            rules.insert(canon(dir), access::READ);
        }
        rules
    }

    /// The Landlock rules that give exactly [`Reach::rules`], listing directories on the way
    /// to hidden or narrower paths with `list` (full paths of the entries, links left out).
    pub fn plan_with(&self, list: &dyn Fn(&Path) -> Vec<PathBuf>) -> Vec<Grant> {
        let rules = self.rules();
        let mut out = vec![];
        visit(Path::new("/"), 0, &rules, list, &mut out);
        out
    }

    /// [`Reach::plan_with`] on this machine's directories.
    pub fn plan(&self) -> Vec<Grant> {
        self.plan_with(&list_dir)
    }

    /// Builds the Landlock ruleset for this reach on a kernel of ABI `abi`.
    pub fn compile(&self, abi: i32) -> io::Result<Ruleset> {
        compile(&self.plan(), abi, self.network)
    }
}

/// The access the most specific rule at or above `path` gives.
fn wanted(rules: &BTreeMap<PathBuf, u64>, path: &Path) -> u64 {
    path.ancestors()
        .find_map(|a| rules.get(a).copied())
        .unwrap_or(0)
}

fn visit(
    dir: &Path,
    granted: u64,
    rules: &BTreeMap<PathBuf, u64>,
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
    out: &mut Vec<Grant>,
) {
    let want = wanted(rules, dir);
    let deeper: Vec<(&PathBuf, u64)> = rules
        .iter()
        .filter(|(p, _)| p.as_path() != dir && p.starts_with(dir))
        .map(|(p, a)| (p, *a))
        .collect();
    if deeper.is_empty() {
        let add = want & !granted;
        if add != 0 {
            out.push((dir.to_path_buf(), add));
        }
        return;
    }
    // The directory itself gets what everything beneath it may have; the rest goes to its
    // entries one by one.
    // A device rule is on a file: listing its directory gives nothing of it away.
    let common = deeper.iter().fold(want, |acc, (_, a)| {
        acc & if *a == access::DEVICE {
            a | access::READ_DIR
        } else {
            *a
        }
    });
    let add = common & !granted;
    if add != 0 {
        out.push((dir.to_path_buf(), add));
    }
    let granted = granted | add;
    let on_the_way: BTreeSet<PathBuf> = deeper
        .iter()
        .filter_map(|(p, _)| {
            let first = p.strip_prefix(dir).ok()?.components().next()?;
            Some(dir.join(first))
        })
        .collect();
    for child in &on_the_way {
        visit(child, granted, rules, list, out);
    }
    let rest = want & !granted;
    if rest != 0 {
        for entry in list(dir) {
            if !on_the_way.contains(&entry) {
                out.push((entry, rest));
            }
        }
    }
}

/// The entries of `dir` that are not symbolic links (a link's target has its own rule).
fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
        .map(|e| e.path())
        .collect()
}

/// A Landlock ruleset ready to be applied in a child ([`Ruleset::raw_fd`], [`restrict_self`]).
#[derive(Debug)]
pub struct Ruleset {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
}

impl Ruleset {
    /// The descriptor to hand to [`restrict_self`] in the child; valid while `self` lives.
    pub fn raw_fd(&self) -> i32 {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            self.fd.as_raw_fd()
        }
        #[cfg(not(target_os = "linux"))]
        {
            -1
        }
    }
}

#[cfg(target_os = "linux")]
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[cfg(target_os = "linux")]
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The file-system rights a kernel of ABI `abi` knows.
fn fs_rights(abi: i32) -> u64 {
    let mut rights = (1 << 13) - 1;
    if abi >= 2 {
        rights |= access::REFER;
    }
    if abi >= 3 {
        rights |= access::TRUNCATE;
    }
    if abi >= 5 {
        rights |= access::IOCTL_DEV;
    }
    rights
}

/// Creates the ruleset of `plan` (all rights the kernel knows handled, so whatever no rule
/// grants is denied) and, without `network`, denies every TCP connect and bind.
pub fn compile(plan: &[Grant], abi: i32, network: bool) -> io::Result<Ruleset> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
        const RULE_PATH_BENEATH: libc::c_int = 1;
        const NET_BIND_TCP: u64 = 1;
        const NET_CONNECT_TCP: u64 = 2;
        const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1;
        const SCOPE_SIGNAL: u64 = 2;
        let handled = fs_rights(abi);
        let attr = RulesetAttr {
            handled_access_fs: handled,
            handled_access_net: if !network && abi >= 4 {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            // Nothing confined signals or reaches an abstract socket of a process outside
            // its boundary (troupe itself, the keeper).
            scoped: if abi >= 6 {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        // SAFETY: the attribute is a valid struct of the size given.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::other(format!(
                "could not create a Landlock ruleset: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        for (path, wanted) in plan {
            let mut access = wanted & handled;
            // The path itself, never a link's target; one that vanished since is skipped.
            let Ok(file) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(path)
            else {
                continue;
            };
            let Ok(kind) = file.metadata().map(|m| m.file_type()) else {
                continue;
            };
            if kind.is_symlink() {
                continue;
            }
            if !kind.is_dir() {
                access &= access::ON_FILES;
                if kind.is_block_device() || (kind.is_char_device() && !is_device_rule(path)) {
                    // A device is reachable only through the rules made for devices.
                    access &= !(access::READ_FILE | access::WRITE_FILE | access::IOCTL_DEV);
                }
            }
            if access == 0 {
                continue;
            }
            let rule = PathBeneathAttr {
                allowed_access: access,
                parent_fd: file.as_raw_fd(),
            };
            // SAFETY: the rule is a valid packed struct and both descriptors are open.
            let added = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    fd.as_raw_fd(),
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0u32,
                )
            };
            if added != 0 {
                return Err(io::Error::other(format!(
                    "could not add the Landlock rule for {}: {}",
                    path.display(),
                    io::Error::last_os_error()
                )));
            }
        }
        Ok(Ruleset { fd })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (plan, abi, network);
        Err(io::Error::other("Landlock exists only on Linux"))
    }
}

/// Whether `path` is one of the device rules (a character device met as a sibling elsewhere
/// gets no read or write).
fn is_device_rule(path: &Path) -> bool {
    DEVICES
        .iter()
        .any(|d| Path::new(d) == path || std::fs::canonicalize(d).is_ok_and(|c| c == path))
        || path.starts_with("/dev/pts")
}

/// Applies a ruleset to the calling process: for a child between fork and exec (only system
/// calls, async-signal-safe). Sets `no_new_privs` first unless the process may restrict
/// itself without it (root with `CAP_SYS_ADMIN`).
pub fn restrict_self(fd: i32) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: landlock_restrict_self and prctl take plain integers.
        unsafe {
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) == 0 {
                return Ok(());
            }
            if *libc::__errno_location() != libc::EPERM {
                return Err(io::Error::last_os_error());
            }
            let one: libc::c_ulong = 1;
            let zero: libc::c_ulong = 0;
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = fd;
        Err(io::Error::other("Landlock exists only on Linux"))
    }
}

/// What the configuration says about the boundary, for [`ConfinePolicy::new`].
#[derive(Debug, Clone, Default)]
pub struct ConfineSettings {
    /// Hidden from everything troupe starts: troupe's home, the config files outside the
    /// writable places.
    pub hidden: Vec<PathBuf>,
    /// Granted writable by `terminal.writable`.
    pub writable: Vec<PathBuf>,
    /// TCP allowed (`terminal.network`).
    pub network: bool,
    /// The workspace of hooks and MCP servers (which belong to no one session): the working
    /// directory troupe started in and the allowed roots.
    pub service_workspace: Vec<PathBuf>,
    /// Package caches hooks and MCP servers may write (`npx`, `uvx`): `$HOME/.npm`,
    /// `$HOME/.cache`, `$HOME/.local` by default.
    pub service_caches: Vec<PathBuf>,
}

impl ConfineSettings {
    /// The package caches under `$HOME` that `npx` and `uvx` write.
    pub fn default_caches() -> Vec<PathBuf> {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .map(|home| {
                [".npm", ".cache", ".local"]
                    .iter()
                    .map(|d| home.join(d))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The boundary the runtime keeps (see the module doc): cheap to share.
#[derive(Debug)]
pub struct ConfinePolicy {
    abi: i32,
    settings: ConfineSettings,
    /// The temporary directories (and `$TMPDIR`).
    temp: Vec<PathBuf>,
    /// A private temporary directory given as `TMPDIR` when troupe's home lies in the
    /// system's one (whose own entries then cannot all be granted).
    private_tmp: Option<PathBuf>,
}

impl ConfinePolicy {
    /// The policy for a kernel of ABI `abi`.
    pub fn new(abi: i32, mut settings: ConfineSettings) -> io::Result<ConfinePolicy> {
        let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        settings.hidden = settings.hidden.iter().map(canon).collect();
        let mut temp: Vec<PathBuf> = TEMP_DIRS.iter().map(PathBuf::from).collect();
        if let Some(dir) = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()) {
            temp.push(PathBuf::from(dir));
        }
        temp.retain(|t| t.is_dir());
        temp = temp.iter().map(canon).collect();
        let mut private_tmp = None;
        if let Some(system) = temp.first()
            && settings.hidden.iter().any(|h| h.starts_with(system))
        {
            use std::os::unix::fs::DirBuilderExt as _;
            let dir = system.join(format!(
                "troupe-tmp-{}",
                uuid::Uuid::new_v4()
                    .simple()
                    .to_string()
                    .get(..12)
                    .unwrap_or("x")
            ));
            std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
            private_tmp = Some(dir);
        }
        for cache in &settings.service_caches {
            // npx makes ~/.npm on first use; under the boundary it could not.
            let _ = std::fs::create_dir_all(cache);
        }
        Ok(ConfinePolicy {
            abi,
            settings,
            temp,
            private_tmp,
        })
    }

    /// The kernel's Landlock ABI version.
    pub fn abi(&self) -> i32 {
        self.abi
    }

    /// Whether TCP is allowed.
    pub fn network(&self) -> bool {
        self.settings.network
    }

    /// The hidden paths.
    pub fn hidden(&self) -> &[PathBuf] {
        &self.settings.hidden
    }

    /// The `TMPDIR` commands get, when the system's temporary directory holds troupe's home.
    pub fn private_tmp(&self) -> Option<&Path> {
        self.private_tmp.as_deref()
    }

    /// Whether `path` is hidden, or holds something hidden: it can never be granted.
    pub fn touches_hidden(&self, path: &Path) -> bool {
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        self.settings
            .hidden
            .iter()
            .any(|h| path.starts_with(h) || h.starts_with(&path))
    }

    /// The reach of a command: its session's `workspace`, the temporary directories, the
    /// configured grants and `extra` (what a person approved for this one call).
    pub fn command_reach(&self, workspace: &[PathBuf], extra: &[PathBuf]) -> Reach {
        let mut writable: Vec<PathBuf> = self.temp.clone();
        writable.extend(self.private_tmp.iter().cloned());
        writable.extend(self.settings.writable.iter().cloned());
        writable.extend(workspace.iter().cloned());
        writable.extend(extra.iter().cloned());
        Reach {
            writable,
            hidden: self.settings.hidden.clone(),
            readable: vec![],
            network: self.settings.network,
        }
    }

    /// The reach of a hook or MCP server whose files are in `own_dir` (a plugin's folder):
    /// that folder is its own, re-granted (read and write: a plugin keeps its state there)
    /// even inside troupe's home, unless it is a hidden path or holds one. Hooks and servers
    /// keep the network whatever `terminal.network` says (their APIs are remote).
    pub fn service_reach(&self, own_dir: Option<&Path>) -> Reach {
        let mut reach = self.command_reach(&self.settings.service_workspace, &[]);
        reach.network = true;
        reach
            .writable
            .extend(self.settings.service_caches.iter().cloned());
        if let Some(dir) = own_dir {
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            if !self.settings.hidden.iter().any(|h| h.starts_with(&dir)) {
                reach.writable.push(dir);
            }
        }
        reach
    }

    /// [`ConfinePolicy::command_reach`] compiled.
    pub fn command_ruleset(&self, workspace: &[PathBuf], extra: &[PathBuf]) -> io::Result<Ruleset> {
        self.command_reach(workspace, extra).compile(self.abi)
    }

    /// [`ConfinePolicy::service_reach`] compiled.
    pub fn service_ruleset(&self, own_dir: Option<&Path>) -> io::Result<Ruleset> {
        self.service_reach(own_dir).compile(self.abi)
    }
}

impl Drop for ConfinePolicy {
    fn drop(&mut self) {
        if let Some(dir) = &self.private_tmp {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The policy hooks and MCP servers of this process are confined by (set by the runtime at
/// start; `None`: unconfined). Process-wide because hooks and servers belong to no session.
static SERVICES: RwLock<Option<Arc<ConfinePolicy>>> = RwLock::new(None);

/// Sets (or clears) the policy of hooks and MCP servers.
pub fn set_service_policy(policy: Option<Arc<ConfinePolicy>>) {
    *SERVICES.write().unwrap_or_else(|p| p.into_inner()) = policy;
}

/// The policy of hooks and MCP servers, if any.
pub fn service_policy() -> Option<Arc<ConfinePolicy>> {
    SERVICES.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The ruleset for a hook or MCP server with its files in `own_dir`: `Ok(None)` when no
/// boundary is set; an error (the service must not start unconfined) when it cannot be built.
pub fn service_ruleset(own_dir: Option<&Path>) -> io::Result<Option<Ruleset>> {
    match service_policy() {
        Some(policy) => policy.service_ruleset(own_dir).map(Some),
        None => Ok(None),
    }
}

/// What a failed confined command's output gets when it was refused by the boundary: a short
/// note saying so and how to ask for more. `None` when the output shows no refusal.
pub fn boundary_note(output: &str) -> Option<String> {
    let refused = output.contains("Permission denied")
        || output.contains("EACCES")
        || output.contains("Operation not permitted");
    refused.then(|| {
        "troupe's boundary may have refused this: commands write only the workspace, the temporary directories and what troupe.yaml grants (terminal.writable), and never reach troupe's home. If the command must write elsewhere, call terminal again with writable: [\"/that/dir\"]; a person is asked to approve it.".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::access::*;
    use super::*;

    /// A fake file system: directory -> entries.
    fn lister(
        tree: &'static [(&'static str, &'static [&'static str])],
    ) -> impl Fn(&Path) -> Vec<PathBuf> {
        move |dir: &Path| {
            tree.iter()
                .find(|(d, _)| Path::new(d) == dir)
                .map(|(d, entries)| entries.iter().map(|e| Path::new(d).join(e)).collect())
                .unwrap_or_default()
        }
    }

    const TREE: &[(&str, &[&str])] = &[
        ("/", &["bin", "dev", "etc", "home", "tmp", "usr"]),
        ("/dev", &["null", "sda", "pts", "shm", "tty"]),
        ("/home", &["me", "you"]),
        ("/home/me", &[".troupe", ".cache", "proj", "notes.txt"]),
        (
            "/home/me/.troupe",
            &["serve.token", "sessions.db", "workspaces", "plugins"],
        ),
        ("/home/me/.troupe/workspaces", &["board"]),
        ("/home/me/.troupe/workspaces/board", &["t1", "t2"]),
        ("/home/me/.troupe/plugins", &["a", "b"]),
    ];

    fn grant_of(plan: &[Grant], path: &str) -> Option<u64> {
        plan.iter()
            .find(|(p, _)| p == Path::new(path))
            .map(|(_, a)| *a)
    }

    /// The access `path` ends up with: the union of the grants on it and its ancestors.
    fn effective(plan: &[Grant], path: &str) -> u64 {
        Path::new(path)
            .ancestors()
            .filter_map(|a| grant_of(plan, &a.to_string_lossy()))
            .fold(0, |acc, a| acc | a)
    }

    #[test]
    fn a_hidden_home_is_reached_through_its_siblings_only() {
        let reach = Reach {
            writable: vec!["/home/me/proj".into(), "/tmp".into()],
            hidden: vec!["/home/me/.troupe".into()],
            ..Reach::default()
        };
        let plan = reach.plan_with(&lister(TREE));
        // Nothing on the way down carries a grant that would reach the home.
        for dir in ["/", "/home", "/home/me", "/home/me/.troupe"] {
            assert_eq!(grant_of(&plan, dir), None, "{dir}: {plan:?}");
        }
        assert_eq!(effective(&plan, "/home/me/.troupe/serve.token"), 0);
        assert_eq!(effective(&plan, "/home/me/.troupe"), 0);
        // The siblings along the way are readable, the workspace and temp writable.
        for dir in [
            "/usr/lib/x",
            "/etc/passwd",
            "/home/you/f",
            "/home/me/notes.txt",
            "/home/me/.cache",
        ] {
            assert_eq!(effective(&plan, dir), READ, "{dir}");
        }
        assert_eq!(effective(&plan, "/home/me/proj/src/a.rs"), WRITE);
        assert_eq!(effective(&plan, "/tmp/x"), WRITE);
        // Devices: listed, the listed ones usable, a disk not readable.
        assert_eq!(effective(&plan, "/dev/sda"), READ_DIR);
        assert_eq!(effective(&plan, "/dev"), READ_DIR);
    }

    #[test]
    fn exceptions_beneath_a_hidden_path_are_granted_again() {
        let reach = Reach {
            writable: vec!["/home/me/.troupe/workspaces/board/t1".into()],
            hidden: vec!["/home/me/.troupe".into()],
            readable: vec!["/home/me/.troupe/plugins/a".into()],
            network: true,
        };
        let plan = reach.plan_with(&lister(TREE));
        assert_eq!(
            effective(&plan, "/home/me/.troupe/workspaces/board/t1/out"),
            WRITE
        );
        assert_eq!(
            effective(&plan, "/home/me/.troupe/workspaces/board/t2/out"),
            0
        );
        assert_eq!(effective(&plan, "/home/me/.troupe/plugins/a/hook.sh"), READ);
        assert_eq!(effective(&plan, "/home/me/.troupe/plugins/b/hook.sh"), 0);
        assert_eq!(effective(&plan, "/home/me/.troupe/serve.token"), 0);
    }

    #[test]
    fn a_workspace_holding_the_home_is_writable_around_it() {
        let reach = Reach {
            writable: vec!["/home/me".into()],
            hidden: vec!["/home/me/.troupe".into()],
            ..Reach::default()
        };
        let plan = reach.plan_with(&lister(TREE));
        assert_eq!(effective(&plan, "/home/me/proj/x"), WRITE);
        assert_eq!(effective(&plan, "/home/me/notes.txt"), WRITE);
        assert_eq!(effective(&plan, "/home/me/.troupe/sessions.db"), 0);
        // The workspace's own directory carries no grant (the limit of the trick).
        assert_eq!(grant_of(&plan, "/home/me"), None);
    }

    #[test]
    fn without_hidden_paths_the_grants_stay_few() {
        let reach = Reach {
            writable: vec!["/home/me/proj".into()],
            ..Reach::default()
        };
        let plan = reach.plan_with(&lister(TREE));
        assert_eq!(effective(&plan, "/home/me/proj/a"), WRITE);
        assert_eq!(effective(&plan, "/home/me/notes.txt"), READ);
        // `/` is split only because /dev is narrower.
        assert!(plan.len() < 20, "{plan:?}");
    }

    #[test]
    fn the_test_hook_makes_the_probe_fail_and_modes_parse() {
        assert_eq!(ConfineMode::parse(" Auto "), Some(ConfineMode::Auto));
        assert_eq!(ConfineMode::parse("off"), Some(ConfineMode::Off));
        assert_eq!(ConfineMode::parse("on"), Some(ConfineMode::On));
        assert_eq!(ConfineMode::parse("maybe"), None);
        assert!(boundary_note("rm: cannot remove '/x': Permission denied").is_some());
        assert!(boundary_note("all fine").is_none());
    }
}
