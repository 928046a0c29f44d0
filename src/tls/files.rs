//! Filesystem helpers of the local CA: existence checks, reads, the 0700 directory, the key
//! file permission check and atomic writes with an explicit mode. Errors name the path.

use super::TlsError;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Maps an I/O error on `path` to [`TlsError::Io`] with `action`.
fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> TlsError {
    let path = path.to_path_buf();
    move |source| TlsError::Io {
        action,
        path,
        source,
    }
}

/// Whether `path` exists (an error if that cannot be determined).
pub(super) fn exists(path: &Path) -> Result<bool, TlsError> {
    path.try_exists().map_err(io_error("check", path))
}

/// The UTF-8 text of `path`.
pub(super) fn read(path: &Path) -> Result<String, TlsError> {
    fs::read_to_string(path).map_err(io_error("read", path))
}

/// Creates `dir` (and parents) with mode 0700 unless it exists.
pub(super) fn ensure_dir(dir: &Path) -> Result<(), TlsError> {
    if exists(dir)? {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_error("create directory", dir))
}

/// Refuses a key file that group or others can access.
pub(super) fn check_key_mode(path: &Path) -> Result<(), TlsError> {
    let mode = fs::metadata(path)
        .map_err(io_error("read", path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(TlsError::KeyPermissions {
            path: path.to_path_buf(),
            mode: mode & 0o777,
        });
    }
    Ok(())
}

/// Writes `bytes` to `path` with `mode` through a fresh temporary file and a rename, so the key
/// is never readable by others, not even briefly, and readers never see half a file.
pub(super) fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io_error("remove", &tmp)(e))
        }
        _ => {}
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(io_error("create", &tmp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io_error("write", &tmp))?;
    fs::rename(&tmp, path).map_err(io_error("write", path))
}
