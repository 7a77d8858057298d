//! A test's scratch directory: fresh, unique to the process and the call, removed on
//! drop. Tests that open pool files, write config files or keep server data each made
//! their own; this is the one to use.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, named `<tag>-<pid>-<n>` (unique within
/// the process too, so tests running in parallel never share one), removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Makes the directory (removing a stale one of the same name first). Panics when it
    /// cannot be made: the test could not go on.
    pub fn new(tag: &str) -> ScratchDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("making the scratch directory {}: {e}", dir.display());
        }
        ScratchDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
