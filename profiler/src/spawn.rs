//! Start a command directly inside a cgroup (clone3 with CLONE_INTO_CGROUP), so that the exec
//! sees the command's whole life, its own fork included.

use std::{
    ffi::CString,
    fs::File,
    io::Read as _,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::Path,
};

use anyhow::{Context as _, Result, bail};

/// A child started by [`spawn_in_cgroup`].
pub struct Child {
    pub pid: i32,
    /// Readable when the child exits.
    pub pidfd: OwnedFd,
}

/// Why the command could not start, with the exit code a shell would use.
#[derive(Debug)]
pub struct SpawnError {
    pub code: i32,
    pub message: String,
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SpawnError {}

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

pub fn spawn_in_cgroup(cgroup_dir: &Path, argv: &[String]) -> Result<Child> {
    if argv.is_empty() {
        bail!("no command given: use `profiler run -- COMMAND [ARGS...]`");
    }
    let dir = File::open(cgroup_dir)
        .with_context(|| format!("cannot open cgroup {}", cgroup_dir.display()))?;
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).context("command arguments cannot contain NUL bytes"))
        .collect::<Result<_>>()?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());

    // The child reports a failed execve through this close-on-exec pipe.
    let mut fds = [0i32; 2];
    // SAFETY: valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    // SAFETY: fresh fds from pipe2, owned from here on.
    let (mut rd, wr) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    let mut pidfd: i32 = -1;
    let args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut i32 as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir.as_raw_fd() as u64,
        ..Default::default()
    };
    // SAFETY: clone3 without a new stack behaves like fork. The child only makes
    // async-signal-safe calls (execvp of prepared strings, write, _exit).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "cannot start the command in cgroup {}: clone3: {e} (needs Linux 5.7 or later)",
            cgroup_dir.display()
        );
    }
    if pid == 0 {
        // SAFETY: child side; see above.
        unsafe {
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let errno = *libc::__errno_location();
            let b = errno.to_ne_bytes();
            libc::write(wr.as_raw_fd(), b.as_ptr() as *const libc::c_void, b.len());
            libc::_exit(127);
        }
    }
    drop(wr);
    // SAFETY: the kernel stored a new pidfd for us.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut buf = [0u8; 4];
    let n = rd.read(&mut buf).unwrap_or(0);
    if n == 4 {
        let errno = i32::from_ne_bytes(buf);
        let mut status = 0;
        // SAFETY: reap our own child.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        let err = std::io::Error::from_raw_os_error(errno);
        let code = if errno == libc::ENOENT { 127 } else { 126 };
        return Err(SpawnError {
            code,
            message: format!("cannot run {}: {err}", argv[0]),
        }
        .into());
    }
    Ok(Child {
        pid: pid as i32,
        pidfd,
    })
}

/// Reap the child; its exit code, or 128 + signal number as a shell reports it.
pub fn wait_exit_code(pid: i32) -> Result<(i32, String)> {
    let mut status = 0;
    // SAFETY: reap our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error()).context("waitpid");
    }
    if libc::WIFEXITED(status) {
        let c = libc::WEXITSTATUS(status);
        Ok((c, format!("exited with code {c}")))
    } else if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        Ok((128 + s, format!("was killed by signal {s}")))
    } else {
        Ok((1, format!("ended with status {status:#x}")))
    }
}
