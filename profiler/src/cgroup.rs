//! The cgroup v2 hierarchy: where it is mounted, which directory the user means, ids, walking
//! a subtree, and creating and removing the cgroups that `profiler run` uses.

use std::{
    fs,
    io::{self, Write as _},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

/// The mounted cgroup v2 hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchy {
    pub mount: PathBuf,
}

impl Hierarchy {
    /// Find the cgroup v2 mount in /proc/self/mountinfo (/sys/fs/cgroup on pure v2 hosts,
    /// /sys/fs/cgroup/unified on hybrid ones).
    pub fn find() -> Result<Self> {
        let info = fs::read_to_string("/proc/self/mountinfo")
            .context("cannot read /proc/self/mountinfo")?;
        match v2_mount_from_mountinfo(&info) {
            Some(mount) => Ok(Self { mount }),
            None => bail!(
                "no cgroup v2 hierarchy is mounted; mount one with \
                 `mount -t cgroup2 none /sys/fs/cgroup` (profiler needs cgroup v2)"
            ),
        }
    }

    /// Resolve what the user typed: an absolute directory on the v2 mount, or a path relative
    /// to the v2 root ("/build" and "build" both mean <mount>/build).
    pub fn resolve(&self, arg: &str) -> Result<PathBuf> {
        if arg.trim().is_empty() {
            bail!(
                "the cgroup path is empty; pass a directory of the cgroup v2 hierarchy at {} \
                 (its root itself is `/`)",
                self.mount.display()
            );
        }
        let given = Path::new(arg);
        let candidate = if given.is_absolute() && (given.starts_with(&self.mount) || given.exists())
        {
            given.to_path_buf()
        } else {
            self.mount.join(arg.trim_start_matches('/'))
        };
        if !candidate.exists() {
            bail!(
                "cgroup {arg} does not exist (looked for {}); create it or pass an existing \
                 directory of the cgroup v2 hierarchy at {}",
                candidate.display(),
                self.mount.display()
            );
        }
        if !candidate.is_dir() {
            bail!("{} is not a cgroup directory", candidate.display());
        }
        match fs_magic(&candidate)? {
            CGROUP2_SUPER_MAGIC => {}
            CGROUP_SUPER_MAGIC => bail!(
                "{} is on a cgroup v1 hierarchy; profiler needs a cgroup v2 path: the v2 \
                 hierarchy here is mounted at {}",
                candidate.display(),
                self.mount.display()
            ),
            _ => bail!(
                "{} is not a cgroup directory; pass a directory of the cgroup v2 hierarchy at {}",
                candidate.display(),
                self.mount.display()
            ),
        }
        let canonical = fs::canonicalize(&candidate)
            .with_context(|| format!("cannot resolve {}", candidate.display()))?;
        if !canonical.starts_with(&self.mount) {
            bail!(
                "{} is not below the cgroup v2 mount {}",
                canonical.display(),
                self.mount.display()
            );
        }
        Ok(canonical)
    }

    /// The path as the kernel prints it in tracepoints: relative to the v2 root, with a
    /// leading '/' ("/" for the root itself).
    pub fn kernel_path(&self, dir: &Path) -> String {
        let rel = dir.strip_prefix(&self.mount).unwrap_or(dir);
        format!("/{}", rel.display()).replace("//", "/")
    }

    /// Controllers available in the v2 hierarchy (cgroup.controllers of the root).
    pub fn controllers(&self) -> Vec<String> {
        fs::read_to_string(self.mount.join("cgroup.controllers"))
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default()
    }
}

fn fs_magic(path: &Path) -> Result<i64> {
    let st = nix::sys::statfs::statfs(path)
        .with_context(|| format!("cannot statfs {}", path.display()))?;
    Ok(st.filesystem_type().0 as i64)
}

/// The mount point of the first cgroup2 filesystem in a mountinfo text.
pub fn v2_mount_from_mountinfo(info: &str) -> Option<PathBuf> {
    for line in info.lines() {
        // "<id> <parent> <maj:min> <root> <mount point> <opts> [optional...] - <fstype> <src> <sopts>"
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let Some(mount) = pre.split_whitespace().nth(4) else {
            continue;
        };
        return Some(PathBuf::from(unescape_mountinfo(mount)));
    }
    None
}

fn unescape_mountinfo(s: &str) -> String {
    // Octal escapes for space, tab, newline and backslash.
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v as char);
            i += 4;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// The cgroup id of a v2 cgroup directory: the inode number of its kernfs node.
pub fn cgroup_id(dir: &Path) -> Result<u64> {
    Ok(fs::metadata(dir)
        .with_context(|| format!("cannot stat {}", dir.display()))?
        .ino())
}

/// A cgroup found while walking a subtree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub id: u64,
    /// Depth below the walked root (0 for the root).
    pub depth: u32,
}

/// Walk `root` and its descendant cgroups, parents before children. `visit` runs on each
/// before its children are listed, so that whatever it registers is in place for cgroups
/// created meanwhile. Cgroups that vanish during the walk are skipped.
pub fn walk(root: &Path, visit: &mut dyn FnMut(&Found) -> Result<()>) -> Result<()> {
    let mut stack = vec![(root.to_path_buf(), 0u32)];
    while let Some((dir, depth)) = stack.pop() {
        let id = match cgroup_id(&dir) {
            Ok(id) => id,
            Err(_) if depth > 0 => continue,
            Err(e) => return Err(e),
        };
        visit(&Found {
            path: dir.clone(),
            id,
            depth,
        })?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if depth > 0 && e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot list {}", dir.display())),
        };
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    Ok(())
}

/// Pids in a cgroup's cgroup.procs.
pub fn procs(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// True while the cgroup or any descendant holds a live process (cgroup.events "populated").
pub fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map(|s| s.lines().any(|l| l.trim() == "populated 1"))
        .unwrap_or(false)
}

/// Create a cgroup directory (and missing parents).
pub fn create(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create cgroup {}", dir.display()))
}

/// `path` with `.` and `..` taken out by its text alone (nothing is looked up); None when a
/// `..` would climb above the root.
fn lexically_normal(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() || out.as_os_str().is_empty() {
                    return None;
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

impl Hierarchy {
    /// Create the cgroup `dir` (and its missing parents), but only inside this v2 hierarchy:
    /// `dir` is checked before anything is made, so that a path that climbs out (`..`) or
    /// leads onto a v1 hierarchy or another file system leaves nothing behind.
    pub fn create(&self, dir: &Path) -> Result<()> {
        let outside = || {
            anyhow::anyhow!(
                "{} is not inside the cgroup v2 hierarchy at {}; pass a path below it",
                dir.display(),
                self.mount.display()
            )
        };
        let normal = lexically_normal(dir).ok_or_else(outside)?;
        if !normal.starts_with(&self.mount) || normal == self.mount {
            return Err(outside());
        }
        // The deepest part that exists must be a v2 cgroup directory (not a v1 one, not a
        // link out of the hierarchy).
        let mut existing = normal.as_path();
        while !existing.exists() {
            existing = existing.parent().ok_or_else(outside)?;
        }
        let real = fs::canonicalize(existing)
            .with_context(|| format!("cannot resolve {}", existing.display()))?;
        if !real.starts_with(&self.mount) || fs_magic(&real)? != CGROUP2_SUPER_MAGIC {
            return Err(outside());
        }
        create(&normal)
    }
}

/// Kill every process in the cgroup subtree and remove it, children first. Waits up to
/// `timeout` for the processes to die.
pub fn kill_and_remove(dir: &Path, timeout: Duration) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + timeout;
    kill_all(dir, timeout)?;
    remove_tree(dir, deadline)
}

/// Kill every process in the cgroup subtree and wait up to `timeout` until it is empty.
pub fn kill_all(dir: &Path, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    // cgroup.kill (Linux 5.14+) kills the whole subtree at once; else SIGKILL each process.
    loop {
        if !populated(dir) {
            break;
        }
        if fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"))
            .is_err()
        {
            let mut all = Vec::new();
            walk(dir, &mut |f| {
                all.extend(procs(&f.path));
                Ok(())
            })?;
            for pid in all {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "processes in {} did not die within {:?}",
                dir.display(),
                timeout
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn remove_tree(dir: &Path, deadline: Instant) -> Result<()> {
    let mut dirs = Vec::new();
    walk(dir, &mut |f| {
        dirs.push(f.path.clone());
        Ok(())
    })?;
    // Deepest first.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        loop {
            match fs::remove_dir(&d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                // EBUSY while the last tasks finish exiting.
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    thread::sleep(Duration::from_millis(2));
                }
                Err(e) => return Err(e).with_context(|| format!("cannot remove {}", d.display())),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn create_refuses_paths_outside_the_hierarchy_before_making_anything() {
        assert_eq!(
            lexically_normal(Path::new("/a/b/../c/./d")),
            Some(PathBuf::from("/a/c/d"))
        );
        assert_eq!(lexically_normal(Path::new("/a/../..")), None);
        // A directory that is no cgroup stands in for the mount: every path is refused, and
        // none is created.
        let tmp = std::env::temp_dir().join(format!("profiler-create-{}", std::process::id()));
        fs::create_dir_all(&tmp).unwrap();
        let h = Hierarchy { mount: tmp.clone() };
        for p in [
            tmp.join("../../../../tmp/escaped"),
            tmp.join("x/../../y"),
            tmp.clone(),
            PathBuf::from("/tmp/elsewhere"),
            tmp.join("not-a-cgroup/child"),
        ] {
            let e = h.create(&p).unwrap_err().to_string();
            assert!(
                e.contains("is not inside the cgroup v2 hierarchy"),
                "{p:?}: {e}"
            );
        }
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "nothing made");
        assert!(!Path::new("/tmp/escaped").exists());
        let _ = fs::remove_dir_all(&tmp);
    }

    use super::*;

    #[test]
    fn finds_hybrid_v2_mount() {
        let info = "\
25 31 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - tmpfs tmpfs ro,mode=755
33 25 0:29 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            v2_mount_from_mountinfo(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn finds_pure_v2_mount_with_optional_fields() {
        let info = "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";
        assert_eq!(
            v2_mount_from_mountinfo(info),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn no_v2_mount() {
        let info = "33 25 0:29 / /sys/fs/cgroup/blkio rw - cgroup cgroup rw,blkio\n";
        assert_eq!(v2_mount_from_mountinfo(info), None);
        assert_eq!(v2_mount_from_mountinfo("garbage"), None);
    }

    #[test]
    fn unescapes_spaces() {
        assert_eq!(unescape_mountinfo("/mnt/a\\040b"), "/mnt/a b");
    }

    #[test]
    fn kernel_paths() {
        let h = Hierarchy {
            mount: PathBuf::from("/sys/fs/cgroup/unified"),
        };
        assert_eq!(h.kernel_path(Path::new("/sys/fs/cgroup/unified")), "/");
        assert_eq!(
            h.kernel_path(Path::new("/sys/fs/cgroup/unified/a/b")),
            "/a/b"
        );
    }
}
