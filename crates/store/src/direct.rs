//! Block reads that bypass the page cache, each checked to belong to the
//! file version the reader was opened for.

use crate::{FileVersion, StoreError};
use bytes::Bytes;
use std::{
    fs::File,
    io,
    os::unix::fs::FileExt,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

/// Alignment O_DIRECT needs for buffer address, offset and length on the
/// file systems we run on (4 KiB covers 512-byte and 4 KiB sector devices).
const ALIGN: usize = 4096;

#[derive(Debug)]
pub struct BlockReader {
    path: PathBuf,
    /// The version every block read must still belong to.
    version: FileVersion,
    /// Opened with O_DIRECT, when the file system allows it.
    direct: Option<File>,
    /// For reads that cannot be aligned (block sizes not a multiple of 4 KiB).
    buffered: File,
}

impl BlockReader {
    /// Opens `path` for direct reads, keeping an ordinary handle for reads
    /// that cannot be aligned or file systems that refuse `O_DIRECT` (tmpfs,
    /// some FUSE mounts). The file opened must be `version`, else
    /// [`StoreError::Changed`].
    pub fn open(path: &Path, version: FileVersion) -> Result<Self, StoreError> {
        let read_err = |source| StoreError::Read { path: path.to_owned(), source };
        let buffered = File::open(path).map_err(read_err)?;
        let direct = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(file) => Some(file),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(read_err(e)),
        };
        let reader = Self { path: path.to_owned(), version, direct, buffered };
        reader.still_same()?;
        // The direct handle was opened by path too: the same inode, or the
        // path was replaced in between.
        if let Some(d) = &reader.direct {
            let meta = d.metadata().map_err(read_err)?;
            if FileVersion::of(&meta) != version {
                return Err(StoreError::Changed { path: path.to_owned() });
            }
        }
        Ok(reader)
    }

    /// The version this reader serves.
    pub fn version(&self) -> FileVersion {
        self.version
    }

    /// `Changed` unless the open file is still the version it was opened
    /// for (an `fstat`: about a microsecond).
    fn still_same(&self) -> Result<(), StoreError> {
        let meta = self.buffered.metadata().map_err(|source| StoreError::Read { path: self.path.clone(), source })?;
        if FileVersion::of(&meta) == self.version {
            Ok(())
        } else {
            Err(StoreError::Changed { path: self.path.clone() })
        }
    }

    /// Whether aligned reads bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Reads `len` bytes at `offset` (a block of the file). Blocking: call it
    /// from an I/O thread. The file is checked after the read: a version
    /// changed before or during it (a rewrite in place, a truncation) is
    /// [`StoreError::Changed`], never bytes passed off as the version's.
    pub fn read_block(&self, offset: u64, len: u32) -> Result<Bytes, StoreError> {
        let bytes = self.read_raw(offset, len).map_err(|source| match source.kind() {
            io::ErrorKind::UnexpectedEof => StoreError::Changed { path: self.path.clone() },
            _ => StoreError::Read { path: self.path.clone(), source },
        })?;
        self.still_same()?;
        Ok(bytes)
    }

    /// A short read (the file shrank) is an error, never a short block
    /// passed off as whole.
    fn read_raw(&self, offset: u64, len: u32) -> io::Result<Bytes> {
        let len = len as usize;
        let direct = self.direct.as_ref().filter(|_| offset.is_multiple_of(ALIGN as u64));
        let aligned = direct.is_some();
        let want = if aligned { len.div_ceil(ALIGN) * ALIGN } else { len };
        // Over-allocate and start at an aligned address inside the buffer:
        // direct I/O without unsafe code or a custom allocator.
        let mut buf = vec![0u8; want + if aligned { ALIGN } else { 0 }];
        let start = if aligned { buf.as_ptr().align_offset(ALIGN) } else { 0 };
        let window = &mut buf[start..start + want];
        let got = read_full(direct.unwrap_or(&self.buffered), window, offset)?;
        if got < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read {got} of {len} bytes at offset {offset}: file shrank"),
            ));
        }
        Ok(Bytes::from(buf).slice(start..start + len))
    }
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_blocks_and_short_last_block_and_refuses_shrunk_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(3 * 65536 + 100)).map(|i| (i % 251) as u8).collect();
        std::fs::File::create(&path).unwrap().write_all(&data).unwrap();
        let r = BlockReader::open(&path, version(&path)).unwrap();
        assert_eq!(&r.read_block(65536, 65536).unwrap()[..], &data[65536..131072]);
        assert_eq!(&r.read_block(3 * 65536, 100).unwrap()[..], &data[3 * 65536..]);
        // Unaligned offsets fall back to buffered reads.
        assert_eq!(&r.read_block(10, 20).unwrap()[..], &data[10..30]);
        let err = r.read_raw(3 * 65536, 65536).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    fn version(path: &Path) -> FileVersion {
        FileVersion::of(&std::fs::metadata(path).unwrap())
    }

    #[test]
    fn a_rewrite_in_place_fails_the_reads_that_follow_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 8192]).unwrap();
        let v = version(&path);
        let r = BlockReader::open(&path, v).unwrap();
        assert_eq!(&r.read_block(0, 4096).unwrap()[..], &[1u8; 4096][..]);
        std::thread::sleep(crate::version::SETTLE);
        // Same size, and the mtime put back: `dd conv=notrunc` then `touch -r`.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().write_all(&[2u8; 4096]).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(v.modified()).unwrap();
        assert!(matches!(r.read_block(4096, 4096), Err(StoreError::Changed { .. })));
        // A reader opened for the old version refuses the new file.
        assert!(matches!(BlockReader::open(&path, v), Err(StoreError::Changed { .. })));
        // Truncated under the reader: changed, not a short block.
        let r = BlockReader::open(&path, version(&path)).unwrap();
        std::fs::File::options().write(true).open(&path).unwrap().set_len(100).unwrap();
        assert!(matches!(r.read_block(4096, 4096), Err(StoreError::Changed { .. })));
    }
}
