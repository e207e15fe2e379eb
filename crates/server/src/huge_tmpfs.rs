//! A file on a tmpfs of huge pages, without root and without a mount that
//! anyone else sees: the block cache's default memory where the kernel
//! allows it.
//!
//! `sendfile` looks a file's pages up one folio at a time (and takes a
//! reference on the folio for every 4 KiB it puts in the pipe): from 4 KiB
//! pages a lookup per page, from 2 MiB pages one per 2 MiB. A memfd gets huge
//! pages only when the machine's shmem setting says so, and it says
//! `never` by default; a tmpfs mounted `huge=always` gets them whatever
//! that setting (unless it is `deny`). Mounting needs privilege, but an
//! unprivileged process may mount a tmpfs in a user and mount namespace of
//! its own. So a short-lived child does that: it enters new namespaces,
//! mounts the tmpfs over a directory it can see (only it sees the mount),
//! opens an unnamed file there, passes the descriptor back over a socket
//! and exits. The open file keeps the tmpfs alive after the namespace is
//! gone, and the server sees nothing but that one file.
//!
//! The child is forked from a process whose other threads may hold locks,
//! so between the fork and its exit it makes system calls only, on memory
//! prepared before the fork (no allocation). Where the kernel forbids user
//! namespaces (a container's seccomp filter, a distribution's policy), the
//! mount fails and the caller falls back to a memfd.

use std::{
    ffi::CString,
    fs::File,
    io,
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::{net::UnixStream, process::CommandExt},
    },
    process::{Command, Stdio},
    time::Duration,
};

/// Directories the child may mount over, in order: any existing one does,
/// as the mount is seen by the child alone.
const MOUNT_POINTS: [&str; 4] = ["/tmp", "/dev/shm", "/var/tmp", "/mnt"];

/// What the cache's backing is called on `/status` when it is such a file.
pub(crate) const BACKING: &str = "private huge tmpfs";

/// An unnamed file of `len` bytes on a fresh tmpfs mounted `huge=always`,
/// or why there is none.
pub(crate) fn file(len: u64) -> io::Result<File> {
    let (ours, theirs) = UnixStream::pair()?;
    let prepared = Prepared::new(len, theirs)?;
    let mut command = Command::new("/proc/self/exe");
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: the hook runs between fork and exec and only makes system
    // calls on memory prepared before the fork (see `Prepared::run`); it
    // never returns, so nothing is executed.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || prepared.run());
    }
    // Its exit closes the pipe `spawn` waits on as an exec would, so
    // `spawn` returns once the child has exited (within CHILD_SECONDS).
    let mut child = command.spawn()?;
    // The hook holds this process's copy of the child's end: closed, the
    // receive below ends at once if the child sent nothing.
    drop(command);
    ours.set_read_timeout(Some(Duration::from_secs(1)))?;
    let received = receive_fd(&ours);
    let exited = child.wait();
    match exited {
        Ok(status) if status.success() => Ok(File::from(received?)),
        Ok(status) => {
            let step = match status.code() {
                Some(FAILED_UNSHARE) => "making a user and mount namespace",
                Some(FAILED_MAP) => "mapping its user and group",
                Some(FAILED_MOUNT) => "mounting the tmpfs",
                Some(FAILED_OPEN) => "opening a file on it",
                Some(FAILED_SEND) => "sending the file back",
                _ => "an unexpected step",
            };
            Err(io::Error::other(format!("the mounting child failed at {step} ({status})")))
        }
        Err(e) => Err(e),
    }
}

/// The child's whole work, with every argument made before the fork.
struct Prepared {
    socket: UnixStream,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    options: CString,
    points: Vec<CString>,
}

/// The longest the child may take before the kernel ends it (SIGALRM).
const CHILD_SECONDS: u32 = 5;

/// Exit codes of the child, one per step that failed (for the error).
const FAILED_UNSHARE: i32 = 10;
const FAILED_MAP: i32 = 11;
const FAILED_MOUNT: i32 = 12;
const FAILED_OPEN: i32 = 13;
const FAILED_SEND: i32 = 14;

impl Prepared {
    fn new(len: u64, socket: UnixStream) -> io::Result<Prepared> {
        // Room for the file and for the last huge page to be whole.
        let size = len + (4 << 20);
        let nul = |e: std::ffi::NulError| io::Error::other(e);
        Ok(Prepared {
            socket,
            uid_map: format!("0 {} 1\n", libc_id(libc::geteuid)).into_bytes(),
            gid_map: format!("0 {} 1\n", libc_id(libc::getegid)).into_bytes(),
            options: CString::new(format!("huge=always,size={size},mode=0700")).map_err(nul)?,
            points: MOUNT_POINTS.iter().map(|p| CString::new(*p)).collect::<Result<_, _>>().map_err(nul)?,
        })
    }

    /// In the child: new namespaces, the mount, the file, sent back; then
    /// exits with 0, or with the code of the step that failed.
    fn run(&self) -> io::Result<()> {
        #[allow(unsafe_code)]
        // SAFETY: system calls on prepared, NUL-terminated buffers and on
        // descriptors this process owns; `_exit` does not return.
        unsafe {
            // `spawn` returns only once this child exits (it never execs):
            // a step that hangs (a mount point on a dead network file
            // system) ends it after CHILD_SECONDS instead of the server's start.
            libc::signal(libc::SIGALRM, libc::SIG_DFL);
            libc::alarm(CHILD_SECONDS);
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                libc::_exit(FAILED_UNSHARE);
            }
            let maps = [
                (c"/proc/self/setgroups", &b"deny"[..]),
                (c"/proc/self/uid_map", &self.uid_map[..]),
                (c"/proc/self/gid_map", &self.gid_map[..]),
            ];
            for (path, text) in maps {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, text.as_ptr().cast(), text.len()) != text.len() as isize {
                    libc::_exit(FAILED_MAP);
                }
                libc::close(fd);
            }
            // Nothing mounted here reaches the parent's namespace (a failure
            // leaves the mounts slaves, which also keep it to themselves).
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            );
            let mounted = self.points.iter().find(|point| {
                libc::mount(
                    c"circus-cache".as_ptr(),
                    point.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    self.options.as_ptr().cast(),
                ) == 0
            });
            let Some(point) = mounted else { libc::_exit(FAILED_MOUNT) };
            let fd = libc::open(point.as_ptr(), libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC, 0o600);
            if fd < 0 {
                libc::_exit(FAILED_OPEN);
            }
            if !send_fd(self.socket.as_raw_fd(), fd) {
                libc::_exit(FAILED_SEND);
            }
            libc::_exit(0)
        }
    }
}

/// This process's user or group id (`geteuid`, `getuid`, ...): the maps
/// name the effective ones, those the namespace is made with.
fn libc_id(get: unsafe extern "C" fn() -> libc::uid_t) -> libc::uid_t {
    // SAFETY: these calls take nothing and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        get()
    }
}

/// Sends `fd` over `socket` with one byte of data; system calls only.
fn send_fd(socket: libc::c_int, fd: libc::c_int) -> bool {
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut byte = [1u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // SAFETY: the header points at buffers that outlive the call, and the
    // control buffer holds one descriptor's message (CMSG_SPACE of an int
    // is far under 64 bytes).
    #[allow(unsafe_code)]
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
        libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// The descriptor the child sent, or why none came (it exited first: its
/// exit code names the step that failed).
fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = recvmsg(socket, &mut [io::IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if got.bytes == 0 {
        return Err(io::Error::other("the mounting child sent no file"));
    }
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = message
            && let Some(fd) = fds.next()
        {
            return Ok(fd);
        }
    }
    Err(io::Error::other("the mounting child's message held no file"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn the_file_is_unnamed_holds_what_is_written_and_the_mount_is_nobody_elses() {
        let mounts_before = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let file = match file(8 << 20) {
            Ok(file) => file,
            Err(e) => {
                let root = libc_id(libc::getuid) == 0;
                assert!(!root, "as root, a private huge tmpfs must be possible: {e}");
                eprintln!("SKIPPED: no private huge tmpfs for this user here ({e})");
                return;
            }
        };
        file.set_len(8 << 20).unwrap();
        let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
        file.write_all_at(&data, 2 << 20).unwrap();
        let mut back = vec![0; data.len()];
        file.read_exact_at(&mut back, 2 << 20).unwrap();
        assert!(back == data);
        // Only the file was passed back: no mount appeared here, and it has
        // no name.
        assert_eq!(std::fs::read_to_string("/proc/self/mounts").unwrap(), mounts_before);
        assert_eq!(std::os::unix::fs::MetadataExt::nlink(&file.metadata().unwrap()), 0);
        // Its pages are huge: mapped and read, they are mapped whole.
        // SAFETY: the file is this test's alone and not written while mapped.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        let sum: u64 = map.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert!(sum > 0);
        let start = format!("{:x}-", map.as_ptr() as usize);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let ours = smaps.split_once(&start).expect("the mapping in smaps").1;
        let huge = ours.lines().find_map(|l| l.strip_prefix("ShmemPmdMapped:")).expect("a ShmemPmdMapped line");
        let kib: u64 = huge.trim().trim_end_matches("kB").trim().parse().unwrap();
        assert!(kib >= 2048, "no huge page mapped: ShmemPmdMapped {kib} kB");
    }
}
