//! A memory cgroup for one server's process tree. It bounds what the
//! processes hold in memory, page cache included. A server that reads
//! through the page cache (nginx) then has the same memory for file data as
//! one that brings its own budget (circus's `--cache`), and the kernel's own
//! page cache policy decides what stays.
//!
//! Both cgroup versions work. In v1 (a `memory` hierarchy) the limit covers
//! user memory and page cache; socket buffers are not charged unless a TCP
//! limit is set, which this module never does. v2 charges socket buffers as
//! well, so there the bound is tighter than the budget by what the sockets
//! hold. Needs root.

use crate::{BenchError, io_err};
use std::path::{Path, PathBuf};

/// A cgroup made for one run; removed when dropped (after its processes
/// have exited).
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
}

impl MemoryCgroup {
    /// A new cgroup under this process's own memory cgroup, without a limit
    /// yet.
    pub fn create(name: &str) -> Result<Self, BenchError> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(io_err("reading mountinfo"))?;
        let membership = std::fs::read_to_string("/proc/self/cgroup").map_err(io_err("reading /proc/self/cgroup"))?;
        let (parent, v2) = locate(&mountinfo, &membership).ok_or_else(|| {
            BenchError::Setup("no memory cgroup hierarchy is mounted: cannot bound a server's page cache".into())
        })?;
        if v2 {
            // The controller must be enabled for the parent's children.
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory");
        }
        let dir = parent.join(format!("circus-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            BenchError::Setup(format!("cannot create the memory cgroup {}: {e} (needs root)", dir.display()))
        })?;
        let cg = MemoryCgroup { dir, v2 };
        if !cg.file(cg.names().limit).exists() {
            return Err(BenchError::Setup(format!(
                "{} has no memory controller: enable it in the parent's cgroup.subtree_control",
                cg.dir.display()
            )));
        }
        Ok(cg)
    }

    /// A command prefix that moves the process into this cgroup and then
    /// runs the program it is given (for `ServerProc::*_at`'s `wrap`), so
    /// every process the server starts is in it.
    pub fn wrap(&self) -> Vec<String> {
        let procs = self.dir.join("cgroup.procs");
        vec!["sh".into(), "-c".into(), format!("echo $$ > '{}' && exec \"$@\"", procs.display()), "sh".into()]
    }

    /// Bytes charged now: memory of its processes and page cache they read in.
    pub fn usage(&self) -> Result<u64, BenchError> {
        self.read_number(self.names().usage)
    }

    /// The most ever charged.
    pub fn peak(&self) -> Result<u64, BenchError> {
        self.read_number(self.names().peak)
    }

    /// Page cache charged now.
    pub fn page_cache(&self) -> Result<u64, BenchError> {
        let stat = std::fs::read_to_string(self.file("memory.stat")).map_err(io_err("reading memory.stat"))?;
        let key = if self.v2 { "file " } else { "cache " };
        stat.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| BenchError::Setup(format!("memory.stat has no {key}line")))
    }

    /// Caps what the processes may hold; the kernel reclaims page cache to
    /// stay under it.
    pub fn limit(&self, bytes: u64) -> Result<(), BenchError> {
        std::fs::write(self.file(self.names().limit), bytes.to_string()).map_err(io_err("setting the memory limit"))
    }

    fn names(&self) -> Names {
        if self.v2 {
            Names { limit: "memory.max", usage: "memory.current", peak: "memory.peak" }
        } else {
            Names { limit: "memory.limit_in_bytes", usage: "memory.usage_in_bytes", peak: "memory.max_usage_in_bytes" }
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read_number(&self, name: &str) -> Result<u64, BenchError> {
        let text = std::fs::read_to_string(self.file(name)).map_err(io_err("reading a cgroup file"))?;
        text.trim().parse().map_err(|_| BenchError::Setup(format!("{name}: not a number: {text:?}")))
    }
}

impl Drop for MemoryCgroup {
    /// Removes the cgroup once its processes are gone (the server is
    /// dropped first); retries briefly while the kernel reaps them.
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        eprintln!("warning: could not remove the cgroup {}", self.dir.display());
    }
}

struct Names {
    limit: &'static str,
    usage: &'static str,
    peak: &'static str,
}

/// This process's memory cgroup directory, and whether it is cgroup v2,
/// from /proc/self/mountinfo and /proc/self/cgroup. A v1 memory hierarchy
/// is preferred when both are mounted (hybrid systems).
fn locate(mountinfo: &str, membership: &str) -> Option<(PathBuf, bool)> {
    let mut v1_mount = None;
    let mut v2_mount = None;
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS
    let fields = |line: &str| {
        let (left, right) = line.split_once(" - ")?;
        let mountpoint = left.split_whitespace().nth(4)?;
        let mut right = right.split_whitespace();
        Some((mountpoint.to_owned(), right.next()?.to_owned(), right.nth(1).unwrap_or("").to_owned()))
    };
    for (mountpoint, fstype, superoptions) in mountinfo.lines().filter_map(fields) {
        let fstype = fstype.as_str();
        if fstype == "cgroup" && superoptions.split(',').any(|o| o == "memory") {
            v1_mount = Some(PathBuf::from(&mountpoint));
        } else if fstype == "cgroup2" {
            v2_mount = Some(PathBuf::from(&mountpoint));
        }
    }
    let path_for = |pred: &dyn Fn(&str) -> bool| {
        membership.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            pred(controllers).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    if let (Some(mount), Some(path)) = (&v1_mount, path_for(&|c| c.split(',').any(|c| c == "memory"))) {
        return Some((join(mount, &path), false));
    }
    let (mount, path) = (v2_mount?, path_for(&|c| c.is_empty())?);
    Some((join(&mount, &path), true))
}

fn join(mount: &Path, path: &str) -> PathBuf {
    if path.is_empty() { mount.to_path_buf() } else { mount.join(path) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/cpu rw,nosuid - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw";

    #[test]
    fn v1_memory_hierarchy_is_found_and_preferred() {
        let membership = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/\n";
        assert_eq!(locate(V1, membership), Some((PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"), false)));
    }

    #[test]
    fn v2_alone_is_used() {
        let mountinfo = "28 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate";
        assert_eq!(
            locate(mountinfo, "0::/user.slice/session-1.scope\n"),
            Some((PathBuf::from("/sys/fs/cgroup/user.slice/session-1.scope"), true))
        );
        assert_eq!(locate(mountinfo, "0::/\n"), Some((PathBuf::from("/sys/fs/cgroup"), true)));
    }

    #[test]
    fn no_hierarchy_is_none() {
        assert_eq!(locate("22 1 8:1 / / rw - ext4 /dev/vda rw", "0::/\n"), None);
    }
}
