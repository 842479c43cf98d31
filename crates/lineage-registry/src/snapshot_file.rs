//! A member's last snapshot, in a file of its own beside the redb store (issue 13, scale).
//!
//! redb runs one write transaction at a time: a snapshot of a million sessions (hundreds of MB)
//! written into the store held the log's writer thread for seconds, so no entry was appended
//! (and no write acknowledged) meanwhile. The snapshot therefore lives in `<data_dir>/snapshot`,
//! written as etcd writes its snap files: to `snapshot.tmp`, fsync, rename over `snapshot`,
//! fsync the directory. A crash leaves the old file or the new one, never half of one.
//!
//! Layout: the magic `LNSNAP1\n`, the meta's length (u64, little endian), the meta (JSON
//! `SnapshotMeta`), the data (JSON `RegistryState`) up to the end of the file.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot";

const MAGIC: &[u8; 8] = b"LNSNAP1\n";
const TMP_SUFFIX: &str = ".tmp";

fn path(dir: &Path) -> PathBuf {
    dir.join(SNAPSHOT_FILE)
}

/// Writes the snapshot durably (tmp, fsync, rename, fsync of the directory).
pub(crate) fn write(dir: &Path, meta: &[u8], data: &[u8]) -> std::io::Result<()> {
    let target = path(dir);
    let tmp = dir.join(format!("{SNAPSHOT_FILE}{TMP_SUFFIX}"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&(meta.len() as u64).to_le_bytes())?;
        f.write_all(meta)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &target)?;
    File::open(dir)?.sync_all()
}

/// A snapshot as read: its meta's bytes and its data's bytes.
pub(crate) type SnapshotBytes = (Vec<u8>, Vec<u8>);

/// The snapshot's meta and data, or `None` when there is no snapshot file. A file that is not a
/// whole snapshot is an error naming what is wrong.
pub(crate) fn read(dir: &Path) -> Result<Option<SnapshotBytes>, String> {
    let target = path(dir);
    let mut f = match File::open(&target) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", target.display())),
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", target.display()))?;
    split(bytes)
        .map(Some)
        .map_err(|why| format!("{}: {why}", target.display()))
}

/// Splits a file's bytes into (meta, data); the data keeps the file's buffer (no copy).
fn split(mut bytes: Vec<u8>) -> Result<SnapshotBytes, &'static str> {
    if bytes.len() < 16 || &bytes[..8] != MAGIC {
        return Err("not a lineage snapshot file (bad magic)");
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[8..16]);
    let meta_len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| "meta too long")?;
    let data_at = 16usize
        .checked_add(meta_len)
        .filter(|end| *end <= bytes.len())
        .ok_or("the snapshot file is cut short")?;
    let meta = bytes[16..data_at].to_vec();
    bytes.drain(..data_at);
    Ok((meta, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_snapshot_reads_back_and_replaces_the_last() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        write(dir.path(), b"{\"m\":1}", b"first").unwrap();
        write(dir.path(), b"{\"m\":2}", b"second data").unwrap();
        let (meta, data) = read(dir.path()).unwrap().unwrap();
        assert_eq!(
            (meta.as_slice(), data.as_slice()),
            (&b"{\"m\":2}"[..], &b"second data"[..])
        );
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![SNAPSHOT_FILE.to_owned()], "no tmp file is left");
    }

    #[test]
    fn a_damaged_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(path(dir.path()), b"garbage").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(
            err.contains("bad magic") && err.contains(SNAPSHOT_FILE),
            "{err}"
        );
        let mut cut = MAGIC.to_vec();
        cut.extend_from_slice(&100u64.to_le_bytes());
        cut.extend_from_slice(b"{}");
        std::fs::write(path(dir.path()), cut).unwrap();
        assert!(read(dir.path()).unwrap_err().contains("cut short"));
    }
}
