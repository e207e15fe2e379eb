//! What identifies one version of a local file, and how to know that the
//! bytes just read still belong to it.
//!
//! Size and modification time alone do not: `rsync --inplace -t`, `cp -p`,
//! `touch -r` and reproducible builds write new bytes under the old size and
//! mtime. The change time cannot be set from user space, and an atomic `mv`
//! over the file gives a new inode, so a version is the file's device,
//! inode, size, and nanosecond mtime and ctime together.
//!
//! Linux updates mtime and ctime *before* a `write(2)` or truncate changes
//! the data. So when a read is followed by an `fstat` that still shows the
//! version, the bytes read belong to that version: a writer that got in
//! first would have moved the times already. The one gap is timestamp
//! granularity: on kernels without fine-grained timestamps, a write in the
//! same clock tick as the previous one may leave the times as they were.
//! A version changed less than [`SETTLE`] ago is therefore not trusted yet
//! (git's "racily clean" rule): callers wait for it to settle first.

use std::{
    fs::Metadata,
    os::unix::fs::MetadataExt,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// Longer than a timestamp tick of any kernel we run on (HZ=100: 10 ms).
pub const SETTLE: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileVersion {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: Stamp,
    pub ctime: Stamp,
}

/// Seconds and nanoseconds since the Unix epoch (seconds may be negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Stamp {
    pub fn to_system_time(self) -> SystemTime {
        let nanos = Duration::from_nanos(u64::from(self.nanos));
        if self.secs >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.secs as u64) + nanos
        } else {
            UNIX_EPOCH - Duration::from_secs(self.secs.unsigned_abs()) + nanos
        }
    }

    fn of(secs: i64, nanos: i64) -> Self {
        Stamp { secs, nanos: nanos.clamp(0, 999_999_999) as u32 }
    }
}

impl FileVersion {
    pub fn of(meta: &Metadata) -> Self {
        FileVersion {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime: Stamp::of(meta.mtime(), meta.mtime_nsec()),
            ctime: Stamp::of(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The modification time (`Last-Modified`).
    pub fn modified(&self) -> SystemTime {
        self.mtime.to_system_time()
    }

    /// How long to wait before this version can be trusted at `now`: zero
    /// once its last change (the ctime, which only the kernel sets: an
    /// mtime may be anything, the future included) is more than [`SETTLE`]
    /// in the past.
    pub fn unsettled_for(&self, now: SystemTime) -> Duration {
        let changed = self.ctime.to_system_time();
        match now.duration_since(changed) {
            Ok(age) => SETTLE.saturating_sub(age),
            Err(_) => SETTLE,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_rewrite_with_the_same_size_and_mtime_is_a_new_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"version one").unwrap();
        let before = std::fs::metadata(&path).unwrap();
        let one = FileVersion::of(&before);
        std::thread::sleep(SETTLE);
        // `rsync --inplace -t`: new bytes in place, then the old mtime back.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(b"version two").unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(before.modified().unwrap()).unwrap();
        let two = FileVersion::of(&std::fs::metadata(&path).unwrap());
        assert_eq!((one.size, one.mtime), (two.size, two.mtime));
        assert_ne!(one, two, "ctime tells the versions apart");
        // An atomic replacement is a new inode.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"version one").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_ne!(FileVersion::of(&std::fs::metadata(&path).unwrap()).ino, one.ino);
    }

    #[test]
    fn a_version_changed_just_now_is_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let v = FileVersion::of(&std::fs::metadata(&path).unwrap());
        let changed = v.ctime.to_system_time();
        assert_eq!(v.unsettled_for(changed), SETTLE);
        assert_eq!(v.unsettled_for(changed + SETTLE), Duration::ZERO);
        assert_eq!(v.unsettled_for(changed - Duration::from_secs(1)), SETTLE);
        assert_eq!(v.modified(), std::fs::metadata(&path).unwrap().modified().unwrap());
        // An mtime in the future (clock skew, an extracted archive) is no
        // reason to wait: only the kernel's ctime counts.
        let future = SystemTime::now() + Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(future).unwrap();
        let v = FileVersion::of(&std::fs::metadata(&path).unwrap());
        assert_eq!(v.unsettled_for(v.ctime.to_system_time() + SETTLE), Duration::ZERO);
    }
}
