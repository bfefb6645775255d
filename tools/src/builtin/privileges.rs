//! Keeping troupe's own memory and environment out of reach of the programs it runs.
//!
//! [`make_non_dumpable`] marks troupe's process non-dumpable once at start: the kernel then
//! refuses other processes of the same user `/proc/<pid>/environ`, `/proc/<pid>/mem` and
//! ptrace, which is where a script would look for the API keys troupe holds. A process with
//! `CAP_SYS_PTRACE` (any root process, as in many containers) is still let in, so every child
//! troupe starts runs [`drop_inspection_capabilities`] just before `exec`: it loses the
//! capabilities that read another process's memory or the kernel's, from its bounding set too,
//! so nothing it executes (setuid binaries included) can get them back.

/// The zero of prctl's unsigned-long arguments (a plain `0` would be passed as a 32-bit int).
#[cfg(target_os = "linux")]
const ZERO: libc::c_ulong = 0;

/// Capabilities that let a process read another process's memory or environment, or the
/// kernel's: `CAP_SYS_MODULE`, `CAP_SYS_RAWIO`, `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN`,
/// `CAP_PERFMON`, `CAP_BPF`, `CAP_CHECKPOINT_RESTORE`.
pub const INSPECTION_CAPABILITIES: &[u32] = &[16, 17, 19, 21, 38, 39, 40];

/// Marks this process non-dumpable (Linux `PR_SET_DUMPABLE` 0): processes of the same user can
/// no longer read its environment or memory, and it writes no core dump.
pub fn make_non_dumpable() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_SET_DUMPABLE takes plain integers and touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, ZERO, ZERO, ZERO, ZERO) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this process is dumpable (Linux; elsewhere always true).
pub fn is_dumpable() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with PR_GET_DUMPABLE takes plain integers and touches no memory.
        unsafe { libc::prctl(libc::PR_GET_DUMPABLE, ZERO, ZERO, ZERO, ZERO) == 1 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

#[cfg(target_os = "linux")]
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Removes [`INSPECTION_CAPABILITIES`] from this process's bounding, ambient, inheritable,
/// permitted and effective sets. Meant for a child between `fork` and `exec` (it only makes
/// system calls, so it is async-signal-safe); a process without the capabilities (not root)
/// has nothing to drop and gets `Ok`.
pub fn drop_inspection_capabilities() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        const VERSION_3: u32 = 0x2008_0522;
        const PR_CAP_AMBIENT: libc::c_int = 47;
        const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
        for &cap in INSPECTION_CAPABILITIES {
            // SAFETY: prctl with these options takes plain integers and touches no memory.
            let held = unsafe {
                libc::prctl(
                    libc::PR_CAPBSET_READ,
                    libc::c_ulong::from(cap),
                    ZERO,
                    ZERO,
                    ZERO,
                )
            };
            if held == 1 {
                // SAFETY: as above.
                let dropped = unsafe {
                    libc::prctl(
                        libc::PR_CAPBSET_DROP,
                        libc::c_ulong::from(cap),
                        ZERO,
                        ZERO,
                        ZERO,
                    )
                };
                if dropped != 0 {
                    let err = std::io::Error::last_os_error();
                    // Without CAP_SETPCAP the bounding set cannot shrink; such a process is
                    // not root and has no capability to drop from its own sets either.
                    if err.raw_os_error() != Some(libc::EPERM) {
                        return Err(err);
                    }
                }
            }
        }
        // SAFETY: as above. Fails only on kernels without ambient capabilities (< 4.3).
        unsafe { libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, ZERO, ZERO, ZERO) };
        let mut header = CapHeader {
            version: VERSION_3,
            pid: 0,
        };
        let mut data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        // SAFETY: capget writes two CapData records for version 3, which `data` holds.
        if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut changed = false;
        for &cap in INSPECTION_CAPABILITIES {
            let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
            let d = &mut data[word];
            if (d.effective | d.permitted | d.inheritable) & bit != 0 {
                d.effective &= !bit;
                d.permitted &= !bit;
                d.inheritable &= !bit;
                changed = true;
            }
        }
        // SAFETY: capset reads the header and two CapData records, both valid.
        if changed && unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The child set-up every program troupe runs gets between `fork` and `exec`: a session (and
/// process group) of its own, and no inspection capabilities.
pub(crate) fn child_setup() -> std::io::Result<()> {
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    if unsafe { libc::setsid() } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    drop_inspection_capabilities()
}
