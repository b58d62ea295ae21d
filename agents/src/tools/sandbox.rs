//! The kernel sandbox `run_command` (and the coder's `verify` command) runs in.
//!
//! Before the fork everything that allocates is prepared here ([`Prepared`]): the Landlock ruleset
//! (an fd), the per-call temp dir, the scrubbed environment, the call's cgroup. In the child, between
//! fork and exec, [`Prepared::apply`] only makes raw syscalls — `setsid`, a write to the cgroup's
//! `cgroup.procs`, `unshare(CLONE_NEWNET)`, `prctl(PR_SET_NO_NEW_PRIVS)` and
//! `landlock_restrict_self` — each async-signal-safe, none allocating.
//!
//! What the rules allow (`workspace-write`): reading the system's directories (`/usr`, `/bin`,
//! `/lib*`, `/etc`, `/opt`, `/proc`, `/sys`, `/dev`) and any configured `read` path; reading and
//! writing beneath the workspace and the call's temp dir (`TMPDIR`, removed after the call); writing
//! the harmless devices (`/dev/null`, `/dev/zero`, `/dev/full`). `read-only` leaves the workspace
//! readable only. Nothing else is reachable: not the daemon's home (its config, database and socket —
//! a pathname socket cannot be connected without write access to it), not `/tmp`, not `/root`. A path
//! to protect (the home) that lies beneath a granted path is refused before anything runs, because
//! Landlock only adds access: it cannot carve a hole in a granted tree.
//!
//! With `network = false`: TCP bind and connect are denied by Landlock (ABI ≥ 4), abstract unix
//! sockets and signals outside the sandbox are scoped off (ABI ≥ 6), and, where the daemon may
//! (root, or CAP_SYS_ADMIN), the command gets a new, empty network namespace, which also stops UDP
//! and raw sockets. Without the namespace, UDP is not stopped.

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// What a command may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// Writes beneath the workspace and the temp dir; reads of the system's directories.
    #[default]
    WorkspaceWrite,
    /// As `WorkspaceWrite`, but the workspace is only readable.
    ReadOnly,
    /// No sandbox: the command runs with the daemon's environment and rights.
    Off,
}

impl SandboxMode {
    /// The mode's name in the configuration (`tools.sandbox.mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }
}

/// Which kernel the sandbox assumes: the running one, or (to test the refusal) one without Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kernel {
    /// Ask the running kernel which Landlock ABI it has.
    #[default]
    Detect,
    /// Behave as if the kernel had no Landlock, to test that commands are then refused.
    WithoutLandlock,
}

/// Variables a sandboxed command gets from the daemon's environment, when set (plus `HOME` and
/// `TMPDIR`, which point at the call's temp dir).
pub const ENV_ALLOWLIST: &[&str] = &["PATH", "LANG", "LC_ALL", "TERM", "TZ", "USER"];

/// The system directories a sandboxed command may read (those that exist).
pub const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys", "/dev",
];

/// Devices a sandboxed command may also write.
const WRITABLE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// How `run_command` (and the coder's `verify`) is sandboxed: the `[tools.sandbox]` configuration, plus what
/// the daemon must keep out of reach.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SandboxPolicy {
    /// What the command may write (`tools.sandbox.mode`).
    pub mode: SandboxMode,
    /// Allow TCP (and keep the daemon's network namespace).
    pub network: bool,
    /// Extra variable names passed through from the daemon's environment.
    pub env: Vec<String>,
    /// Extra paths the command may read.
    pub read: Vec<PathBuf>,
    /// Extra paths the program may write beneath. Never set for `run_command` (whose writes stay in
    /// the workspace and its temp dir): an MCP server's launcher cache (`~/.npm`, `~/.cache/uv`).
    pub write: Vec<PathBuf>,
    /// Variables set to a value of agentd's choosing, after the allowlist: an MCP server's launcher
    /// pointed at its cache (`npm_config_cache`, `UV_CACHE_DIR`) while `HOME` is the temp dir.
    pub set_env: Vec<(String, OsString)>,
    /// Paths that must stay out of reach (the daemon's home); a granted path above one is an error.
    pub protected: Vec<PathBuf>,
    /// Which kernel to assume; `Detect` except in tests.
    pub kernel: Kernel,
}

/// Why a command could not be sandboxed as configured; the command is refused, never run unconfined.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel has no Landlock.
    #[error(
        "this kernel does not enforce Landlock, so run_command cannot be sandboxed and is refused; \
         set `tools.sandbox.mode = \"off\"` in agentd.toml to run commands unsandboxed"
    )]
    NoLandlock,
    /// `network = false` cannot be enforced here.
    #[error(
        "`tools.sandbox.network = false` cannot be enforced: this kernel's Landlock (ABI {abi}) has \
         no TCP rules (ABI 4) and a new network namespace could not be made"
    )]
    NoNetworkIsolation {
        /// The kernel's Landlock ABI (TCP rules need 4).
        abi: i32,
    },
    /// A path commands may reach lies above a path they must not.
    #[error("the sandbox would expose {protected}: it lies beneath {granted}, which commands may access")]
    ExposesProtected {
        /// The path commands may reach (the workspace, a `read` path).
        granted: PathBuf,
        /// The path that must stay out of reach (the daemon's home).
        protected: PathBuf,
    },
    /// A path commands may reach lies inside one they must not.
    #[error("{granted} lies inside {protected}, which commands must not reach; use a workspace outside it")]
    InsideProtected {
        /// The path commands may reach (the workspace, a `read` path).
        granted: PathBuf,
        /// The path that must stay out of reach (the daemon's home).
        protected: PathBuf,
    },
    /// The per-call temp dir (the command's `HOME` and `TMPDIR`) could not be made.
    #[error("cannot create the command's temp dir: {0}")]
    TempDir(#[source] std::io::Error),
    /// Landlock refused the ruleset.
    #[error("cannot build the Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A path for a Landlock rule could not be opened.
    #[error("cannot open {path} for a Landlock rule: {source}")]
    Path {
        /// The path.
        path: PathBuf,
        /// Why it could not be opened.
        source: landlock::PathFdError,
    },
}

/// The Landlock ABI the running kernel reports (0: none).
pub fn kernel_abi() -> i32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns a number.
    let v = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    if v < 0 {
        0
    } else {
        v as i32
    }
}

/// Whether this process may give a child a new network namespace; probed once with a child.
pub fn can_unshare_network() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        use std::os::unix::process::CommandExt;
        let mut probe = std::process::Command::new("/bin/sh");
        probe.args(["-c", "exit 0"]).env_clear();
        // SAFETY: unshare is a raw syscall; io::Error::last_os_error does not allocate.
        unsafe {
            probe.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWNET) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        probe.status().is_ok_and(|s| s.success())
    })
}

/// Whether this process may give a child a mount namespace of its own (to hide the home in).
pub fn can_unshare_mounts() -> bool {
    static PROBE: OnceLock<bool> = OnceLock::new();
    *PROBE.get_or_init(|| {
        use std::os::unix::process::CommandExt;
        let mut probe = std::process::Command::new("/bin/sh");
        probe.args(["-c", "exit 0"]).env_clear();
        // SAFETY: raw syscalls only; io::Error::last_os_error does not allocate.
        unsafe {
            probe.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWNS) < 0
                    || libc::mount(
                        c"none".as_ptr(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) < 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        probe.status().is_ok_and(|s| s.success())
    })
}

/// Makes the daemon undumpable, so a process of the same uid without CAP_SYS_PTRACE (a sandboxed
/// command drops it) cannot read the daemon's `/proc/PID/environ`, `mem` or `fd/`.
pub fn protect_daemon_process() {
    // SAFETY: prctl on this process with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// The pointers the child reads; the strings they point into outlive the fork.
struct SendPtrs(Vec<*const libc::c_char>);
impl SendPtrs {
    fn ptrs(&self) -> &[*const libc::c_char] {
        &self.0
    }
}
// SAFETY: the pointers are only read in the forked child, while the parent keeps the strings alive.
unsafe impl Send for SendPtrs {}
// SAFETY: as above; nothing writes through them.
unsafe impl Sync for SendPtrs {}

/// Drops every capability (bounding, ambient, effective, permitted, inheritable): a command run by a
/// root daemon keeps uid 0 but none of root's powers, so it cannot ptrace, mount, or bypass file modes.
/// Async-signal-safe: raw syscalls on stack values only.
fn drop_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset with valid, stack-allocated arguments; errors (EINVAL past the last
    // capability, EPERM without CAP_SETPCAP) leave the process with fewer powers, never more.
    unsafe {
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let mut header = Header { version: 0x2008_0522, pid: 0 };
        let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
        libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr());
    }
}

fn abi_of(version: i32) -> ABI {
    match version {
        ..=1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Everything a sandboxed call needs, made before the fork.
pub(crate) struct Prepared {
    ruleset: Option<OwnedFd>,
    unshare_network: bool,
    /// Paths to cover with an empty, read-only tmpfs in a mount namespace of the command's own.
    hide: Vec<CString>,
    pub(crate) cgroup: Option<Cgroup>,
    /// Held for the call: removed (with what the command left in it) when dropped.
    _tmp: Option<tempfile::TempDir>,
    env: Option<Vec<(OsString, OsString)>>,
}

impl Prepared {
    pub(crate) fn new(policy: &SandboxPolicy, workspace: &Path) -> Result<Prepared, SandboxError> {
        // The cgroup is made last, after every step that can fail: it has no Drop of its own.
        if policy.mode == SandboxMode::Off {
            return Ok(Prepared {
                ruleset: None,
                unshare_network: false,
                hide: Vec::new(),
                cgroup: Cgroup::create(),
                _tmp: None,
                env: None,
            });
        }
        let abi = match policy.kernel {
            Kernel::Detect => kernel_abi(),
            Kernel::WithoutLandlock => 0,
        };
        if abi < 1 {
            return Err(SandboxError::NoLandlock);
        }
        let unshare_network = !policy.network && can_unshare_network();
        if !policy.network && abi < 4 && !unshare_network {
            return Err(SandboxError::NoNetworkIsolation { abi });
        }
        let tmp = tempfile::Builder::new().prefix("agentd-cmd-").tempdir().map_err(SandboxError::TempDir)?;

        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        read.extend(policy.read.iter().cloned());
        let mut write = vec![tmp.path().to_path_buf()];
        write.extend(policy.write.iter().cloned());
        match policy.mode {
            SandboxMode::WorkspaceWrite => write.push(workspace.to_path_buf()),
            _ => read.push(workspace.to_path_buf()),
        }
        check_protected(policy, read.iter().chain(&write))?;
        let hide = if can_unshare_mounts() {
            policy
                .protected
                .iter()
                .filter_map(|p| p.canonicalize().ok())
                .filter(|p| p.is_dir())
                .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
                .collect()
        } else {
            Vec::new()
        };

        let version = abi_of(abi);
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(version))?;
        if !policy.network && abi >= 4 {
            ruleset = ruleset.handle_access(AccessNet::from_all(version))?;
        }
        if abi >= 6 {
            let scope =
                if policy.network { Scope::Signal.into() } else { Scope::Signal | Scope::AbstractUnixSocket };
            ruleset = ruleset.scope(scope)?;
        }
        let mut created = ruleset.create()?;
        let rule = |path: &Path, access| -> Result<Option<PathBeneath<PathFd>>, SandboxError> {
            match PathFd::new(path) {
                Ok(fd) => Ok(Some(PathBeneath::new(fd, access))),
                Err(_) if !path.exists() => Ok(None),
                Err(source) => Err(SandboxError::Path { path: path.to_path_buf(), source }),
            }
        };
        for path in &read {
            let access = if path.is_dir() {
                AccessFs::from_read(version)
            } else {
                AccessFs::from_read(version) & AccessFs::from_file(version)
            };
            if let Some(r) = rule(path, access)? {
                created = created.add_rule(r)?;
            }
        }
        for path in &write {
            if let Some(r) = rule(path, AccessFs::from_all(version))? {
                created = created.add_rule(r)?;
            }
        }
        for device in WRITABLE_DEVICES {
            let access = (AccessFs::ReadFile | AccessFs::WriteFile) & AccessFs::from_file(version);
            if let Some(r) = rule(Path::new(device), access)? {
                created = created.add_rule(r)?;
            }
        }
        let ruleset: Option<OwnedFd> = created.into();

        let mut env: Vec<(OsString, OsString)> = ENV_ALLOWLIST
            .iter()
            .copied()
            .chain(policy.env.iter().map(String::as_str))
            .filter(|name| !matches!(*name, "HOME" | "TMPDIR"))
            .filter_map(|name| std::env::var_os(name).map(|v| (OsString::from(name), v)))
            .collect();
        env.push(("HOME".into(), tmp.path().into()));
        env.push(("TMPDIR".into(), tmp.path().into()));
        env.extend(policy.set_env.iter().map(|(k, v)| (OsString::from(k), v.clone())));
        let cgroup = Cgroup::create();
        Ok(Prepared { ruleset, unshare_network, hide, cgroup, _tmp: Some(tmp), env: Some(env) })
    }

    /// Sets the environment and installs the child-side steps on `command`.
    pub(crate) fn apply(&self, command: &mut tokio::process::Command) {
        if let Some(env) = &self.env {
            command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        let ruleset: RawFd = self.ruleset.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let cgroup: RawFd = self.cgroup.as_ref().map_or(-1, |c| c.procs.as_raw_fd());
        let unshare_network = self.unshare_network;
        let hide: Vec<*const libc::c_char> = self.hide.iter().map(|c| c.as_ptr()).collect();
        let hide = SendPtrs(hide);
        let sandboxed = ruleset >= 0;
        // SAFETY: runs in the forked child before exec. It reads only what was made above — integers,
        // and pointers into `self.hide`'s strings, which the parent keeps alive until `spawn`
        // returns — and makes raw syscalls; nothing allocates, locks or unwinds.
        // `io::Error::last_os_error` is a plain errno.
        unsafe {
            command.pre_exec(move || {
                let fail = || Err(std::io::Error::last_os_error());
                if libc::setsid() < 0 {
                    return fail();
                }
                if cgroup >= 0 {
                    // "0" moves the writer. A failure is found by the parent (`Cgroup::holds`).
                    let _ = libc::write(cgroup, b"0".as_ptr().cast(), 1);
                }
                if !sandboxed {
                    return Ok(());
                }
                if unshare_network && libc::unshare(libc::CLONE_NEWNET) < 0 {
                    return fail();
                }
                if !hide.ptrs().is_empty() {
                    if libc::unshare(libc::CLONE_NEWNS) < 0 {
                        return fail();
                    }
                    let none = c"none".as_ptr();
                    if libc::mount(
                        none,
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) < 0
                    {
                        return fail();
                    }
                    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                    for path in hide.ptrs() {
                        let data = c"size=4k,mode=000".as_ptr().cast();
                        if libc::mount(none, *path, c"tmpfs".as_ptr(), flags, data) < 0 {
                            return fail();
                        }
                    }
                }
                drop_capabilities();
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                    return fail();
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) < 0 {
                    return fail();
                }
                Ok(())
            });
        }
    }

    /// Drops the ruleset fd once the child has it (after `spawn`).
    pub(crate) fn spawned(&mut self) {
        self.ruleset = None;
    }
}

fn check_protected<'a>(
    policy: &SandboxPolicy,
    granted: impl Iterator<Item = &'a PathBuf>,
) -> Result<(), SandboxError> {
    let protected: Vec<PathBuf> =
        policy.protected.iter().map(|p| p.canonicalize().unwrap_or_else(|_| p.clone())).collect();
    for g in granted {
        let Ok(real) = g.canonicalize() else { continue };
        if let Some(p) = protected.iter().find(|p| p.starts_with(&real)) {
            return Err(SandboxError::ExposesProtected { granted: g.clone(), protected: p.clone() });
        }
        if let Some(p) = protected.iter().find(|p| real.starts_with(p)) {
            return Err(SandboxError::InsideProtected { granted: g.clone(), protected: p.clone() });
        }
    }
    Ok(())
}

/// A cgroup (v2) of one call, so that processes that left the session (`setsid`, double forks) are
/// killed with it. Made beneath the daemon's own cgroup when the daemon may; else `None`.
pub(crate) struct Cgroup {
    dir: PathBuf,
    procs: File,
}

impl Cgroup {
    fn create() -> Option<Cgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let base = cgroup2_dir()?;
        let name = format!("agentd-cmd-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = base.join(name);
        std::fs::create_dir(&dir).ok()?;
        match File::options().write(true).open(dir.join("cgroup.procs")) {
            Ok(procs) => Some(Cgroup { dir, procs }),
            Err(_) => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Whether `pid` joined the cgroup.
    pub(crate) fn holds(&self, pid: u32) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .is_ok_and(|s| s.lines().any(|l| l.trim() == pid.to_string()))
    }

    /// Kills every process in the cgroup, then removes it once it is empty (on a thread of its own).
    pub(crate) fn kill(self) {
        let killed = File::options()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"))
            .is_ok();
        if !killed {
            // Kernels before 5.14 have no cgroup.kill: signal each member.
            if let Ok(list) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in list.lines().filter_map(|l| l.trim().parse::<libc::pid_t>().ok()) {
                    // SAFETY: kill on a pid; a stale pid gets ESRCH.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let dir = self.dir;
        std::thread::spawn(move || {
            for _ in 0..200 {
                if std::fs::remove_dir(&dir).is_ok() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
    }

    /// Removes the cgroup without killing (it was not joined).
    pub(crate) fn discard(self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Whether calls get a cgroup of their own here (so processes that leave the session die too).
pub fn cgroup_available() -> bool {
    match Cgroup::create() {
        Some(c) => {
            c.discard();
            true
        }
        None => false,
    }
}

/// Kills and removes the cgroups of calls whose daemon is gone (killed before it could end them), so
/// what a crashed daemon's commands started is stopped when the next daemon starts. Returns how many.
pub fn reap_stale_cgroups() -> usize {
    let Some(base) = cgroup2_dir() else { return 0 };
    let Ok(entries) = std::fs::read_dir(&base) else { return 0 };
    let mut reaped = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("agentd-cmd-")) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        // SAFETY: signal 0 only asks whether the pid exists.
        let gone = unsafe { libc::kill(pid, 0) } < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            if let Ok(procs) = File::options().write(true).open(entry.path().join("cgroup.procs")) {
                Cgroup { dir: entry.path(), procs }.kill();
                reaped += 1;
            }
        }
    }
    reaped
}

/// The daemon's own cgroup directory on the cgroup2 hierarchy, if it is mounted writable.
fn cgroup2_dir() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if !right.starts_with("cgroup2 ") {
            return None;
        }
        left.split(' ').nth(4).map(PathBuf::from)
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = mount.join(path.trim().trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}
