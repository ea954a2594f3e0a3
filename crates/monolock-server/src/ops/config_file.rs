//! Reading the operator's configuration files (the ACL, the admin token,
//! the TLS certificate, key and client CA), bounded in size.
//!
//! Why a bound: these files are named by flags and re-read on every SIGHUP,
//! and a path given by mistake (`/dev/zero`, a log file, a disk image)
//! would otherwise be read whole into memory. No real file of these kinds
//! comes near [`MAX_CONFIG_FILE_BYTES`]: a public CA bundle of about 150
//! certificates is about 220 KiB, an ACL of a thousand rules about 100 KiB.

use std::{
    fs::File,
    io::{self, Read},
    path::Path,
};

/// The most a configuration file may hold: 1 MiB. A larger file is refused
/// at startup (exit 1) and on reload (the previous state stays in force).
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// The whole of `path`, if it holds at most [`MAX_CONFIG_FILE_BYTES`];
/// never reads more than one byte past the bound.
///
/// # Errors
/// The OS error, or [`io::ErrorKind::FileTooLarge`] with a message saying
/// what the bound is; callers put the file's name in front.
pub(crate) fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    read_bounded_to(path, MAX_CONFIG_FILE_BYTES)
}

fn read_bounded_to(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "larger than {}, the most a configuration file may hold \
                 (is this the intended file?)",
                size(limit)
            ),
        ));
    }
    Ok(bytes)
}

/// `1 MiB (1048576 bytes)`, or `100 bytes`.
fn size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB ({bytes} bytes)", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// As [`read_bounded`], as UTF-8 text.
///
/// # Errors
/// As [`read_bounded`], or [`io::ErrorKind::InvalidData`] if the file is
/// not UTF-8.
pub(crate) fn read_bounded_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_bounded(path)?).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                err.utf8_error().valid_up_to()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_up_to_the_bound_and_refuses_one_byte_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = dir.path().join("at");
        let over = dir.path().join("over");
        std::fs::write(&at, vec![b'x'; 100]).expect("write");
        std::fs::write(&over, vec![b'x'; 101]).expect("write");
        assert_eq!(read_bounded_to(&at, 100).expect("at the bound").len(), 100);
        let err = read_bounded_to(&over, 100).expect_err("over the bound");
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(
            err.to_string().starts_with("larger than 100 bytes"),
            "{err}"
        );
    }

    /// An endless file costs the bound, not the machine's memory.
    #[test]
    fn an_endless_file_is_refused_after_the_bound() {
        let err = read_bounded(Path::new("/dev/zero")).expect_err("endless");
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
        assert!(
            err.to_string()
                .starts_with("larger than 1 MiB (1048576 bytes), the most"),
            "{err}"
        );
    }

    #[test]
    fn text_must_be_utf8() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("latin1");
        std::fs::write(&path, b"caf\xe9").expect("write");
        let err = read_bounded_text(&path).expect_err("not UTF-8");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("offset 3"), "{err}");
    }
}
