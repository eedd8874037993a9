//! Files: the [`FsAdapter`] trait and its in-memory default, [`InMemoryFs`].
//!
//! Paths are UTF-8 strings with `/` separators, resolved inside the adapter's root: a relative path
//! against the root, an absolute one only when it lies inside it. A path that would leave the root (a
//! `..` above it, an absolute path elsewhere, a symlink leading out) or that holds a NUL byte is refused
//! with [`FsError::PathRefused`] (`FS_PATH_REFUSED`), and nothing outside the root is read or written.
//! A harness built without an fs adapter gets an [`InMemoryFs`]: a sandbox that starts empty and lives
//! as long as the process. `noetic_platform_unix::LocalFs` is the same contract on a real directory.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use futures_util::future::BoxFuture;

/// The default cap on a read: 1 MiB.
pub const DEFAULT_READ_LIMIT: usize = 1024 * 1024;

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed by a listing).
    Symlink,
    /// Anything else (a socket, a device, a fifo).
    Other,
}

/// One entry of [`FsAdapter::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DirEntry {
    /// The entry's name (no path).
    pub name: String,
    /// What it is.
    pub kind: EntryKind,
}

impl DirEntry {
    /// An entry.
    pub fn new(name: impl Into<String>, kind: EntryKind) -> Self {
        DirEntry {
            name: name.into(),
            kind,
        }
    }
}

/// What [`FsAdapter::stat`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileStat {
    /// What the path is (a symlink inside the root is followed).
    pub kind: EntryKind,
    /// Its size in bytes (0 for a directory in the in-memory fs).
    pub len: u64,
}

impl FileStat {
    /// A stat.
    pub fn new(kind: EntryKind, len: u64) -> Self {
        FileStat { kind, len }
    }
}

/// The bytes of [`FsAdapter::read`], at most the limit asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadOutput {
    /// The first bytes of the file, at most the limit.
    pub bytes: Vec<u8>,
    /// Whether the file is longer than `bytes`.
    pub truncated: bool,
}

impl ReadOutput {
    /// A read of `bytes`.
    pub fn new(bytes: Vec<u8>, truncated: bool) -> Self {
        ReadOutput { bytes, truncated }
    }
}

/// Why a file operation failed. Each variant has a stable code ([`FsError::code`]) and names the path
/// as the caller gave it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The path leads outside the root or is not a path at all.
    #[error("path {path:?} is refused: {reason}")]
    PathRefused {
        /// The path as given.
        path: String,
        /// Why (`it leads outside the sandbox root`, `it contains a NUL byte`, …).
        reason: &'static str,
    },
    /// Nothing is at the path.
    #[error("{path:?} not found")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// A directory was expected.
    #[error("{path:?} is not a directory")]
    NotADirectory {
        /// The path as given.
        path: String,
    },
    /// A file was expected.
    #[error("{path:?} is a directory")]
    IsADirectory {
        /// The path as given.
        path: String,
    },
    /// A directory to remove is not empty.
    #[error("directory {path:?} is not empty")]
    NotEmpty {
        /// The path as given.
        path: String,
    },
    /// Any other failure of the operating system.
    #[error("{path:?}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Why a path outside the root is refused (every escape gives the same reason).
pub const OUTSIDE_ROOT: &str = "it leads outside the sandbox root";
/// Why a path with a NUL byte is refused.
pub const HAS_NUL: &str = "it contains a NUL byte";

impl FsError {
    /// The stable code: `FS_PATH_REFUSED`, `FS_NOT_FOUND`, `FS_NOT_A_DIRECTORY`, `FS_IS_A_DIRECTORY`,
    /// `FS_NOT_EMPTY` or `FS_IO`.
    pub fn code(&self) -> &'static str {
        match self {
            FsError::PathRefused { .. } => "FS_PATH_REFUSED",
            FsError::NotFound { .. } => "FS_NOT_FOUND",
            FsError::NotADirectory { .. } => "FS_NOT_A_DIRECTORY",
            FsError::IsADirectory { .. } => "FS_IS_A_DIRECTORY",
            FsError::NotEmpty { .. } => "FS_NOT_EMPTY",
            FsError::Io { .. } => "FS_IO",
        }
    }

    /// A refusal of `path` because it leads outside the root.
    pub fn outside_root(path: &str) -> Self {
        FsError::PathRefused {
            path: path.to_owned(),
            reason: OUTSIDE_ROOT,
        }
    }
}

impl From<FsError> for crate::Error {
    fn from(error: FsError) -> Self {
        crate::Error::Adapter {
            code: error.code(),
            source: Box::new(error),
        }
    }
}

/// A file system confined to a root. Object safe: the runtime holds one as an `Arc<dyn FsAdapter>`,
/// and tools reach it through `ctx.runtime().fs()`.
///
/// # Cancel safety
/// Dropping a future leaves the operation either not started or done (a write may be done).
pub trait FsAdapter: Send + Sync + 'static {
    /// The first `limit` bytes of the file at `path`, and whether there is more.
    ///
    /// # Errors
    /// [`FsError`]: refused path, not found, a directory, or an OS failure.
    fn read<'a>(
        &'a self,
        path: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<ReadOutput, FsError>>;

    /// Writes `contents` to the file at `path`, creating it or replacing what it held. Its directory
    /// must exist.
    ///
    /// # Errors
    /// [`FsError`]: refused path, a missing directory (`FS_NOT_FOUND`), a directory at `path`, or an
    /// OS failure.
    fn write<'a>(&'a self, path: &'a str, contents: &'a [u8])
    -> BoxFuture<'a, Result<(), FsError>>;

    /// The entries of the directory at `path` (`""` or `"."` for the root), sorted by name.
    ///
    /// # Errors
    /// [`FsError`]: refused path, not found, not a directory, or an OS failure.
    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<DirEntry>, FsError>>;

    /// Creates the directory at `path` and any missing parents; an existing directory is fine.
    ///
    /// # Errors
    /// [`FsError`]: refused path, a file in the way (`FS_NOT_A_DIRECTORY`), or an OS failure.
    fn create_dir_all<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>>;

    /// Removes the file, or the empty directory, at `path`.
    ///
    /// # Errors
    /// [`FsError`]: refused path (the root itself included), not found, a directory not empty, or an
    /// OS failure.
    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>>;

    /// What is at `path`.
    ///
    /// # Errors
    /// [`FsError`]: refused path, not found, or an OS failure.
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat, FsError>>;

    /// The directory on the host the root is, for adapters backed by real files (what a program
    /// started outside the adapter, such as an ACP agent, sees as the root); `None` (the default)
    /// for file systems that exist only in the process.
    fn host_root(&self) -> Option<&std::path::Path> {
        None
    }
}

/// A shared adapter is an adapter: share one `Arc<InMemoryFs>` between a harness and the code that
/// prepares or inspects its files.
impl<T: FsAdapter + ?Sized> FsAdapter for std::sync::Arc<T> {
    fn read<'a>(
        &'a self,
        path: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<ReadOutput, FsError>> {
        (**self).read(path, limit)
    }

    fn write<'a>(
        &'a self,
        path: &'a str,
        contents: &'a [u8],
    ) -> BoxFuture<'a, Result<(), FsError>> {
        (**self).write(path, contents)
    }

    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<DirEntry>, FsError>> {
        (**self).list(path)
    }

    fn create_dir_all<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        (**self).create_dir_all(path)
    }

    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        (**self).remove(path)
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat, FsError>> {
        (**self).stat(path)
    }

    fn host_root(&self) -> Option<&std::path::Path> {
        (**self).host_root()
    }
}

/// Splits `path` into its components inside a root, lexically: `.` and empty components dropped, `..`
/// popping the one before; an absolute path is taken from the root. A `..` above the root or a NUL
/// byte is refused. This is how [`InMemoryFs`] resolves paths (it has no symlinks); an adapter on a
/// real directory must let the OS resolve them (symlinks), and only use this for early refusals.
///
/// # Errors
/// [`FsError::PathRefused`].
pub fn components(path: &str) -> Result<Vec<&str>, FsError> {
    if path.contains('\0') {
        return Err(FsError::PathRefused {
            path: path.to_owned(),
            reason: HAS_NUL,
        });
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(FsError::outside_root(path));
                }
            }
            name => parts.push(name),
        }
    }
    Ok(parts)
}

#[derive(Debug)]
enum Node {
    File(Vec<u8>),
    Dir,
}

/// An in-memory [`FsAdapter`]: a tree of files and directories under a virtual root `/`, empty at
/// first. It has no symlinks, so `..` resolves lexically; a `..` above the root is refused as on disk.
#[derive(Debug, Default)]
pub struct InMemoryFs {
    /// Keyed by the joined components; the root (`""`) is implicit.
    nodes: Mutex<BTreeMap<String, Node>>,
}

impl InMemoryFs {
    /// An empty fs.
    pub fn new() -> Self {
        Self::default()
    }

    fn nodes(&self) -> MutexGuard<'_, BTreeMap<String, Node>> {
        crate::sync::lock(&self.nodes)
    }
}

/// The key of `path` and of its parent directory.
fn key_of(path: &str) -> Result<(String, Option<String>), FsError> {
    let parts = components(path)?;
    let parent = match parts.len() {
        0 => None,
        n => Some(parts[..n - 1].join("/")),
    };
    Ok((parts.join("/"), parent))
}

/// Checks that every ancestor of `key` is a directory.
fn check_parent(
    nodes: &BTreeMap<String, Node>,
    parent: Option<&str>,
    path: &str,
) -> Result<(), FsError> {
    let Some(parent) = parent else {
        return Ok(());
    };
    if parent.is_empty() {
        return Ok(());
    }
    let mut prefix = String::new();
    for part in parent.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        match nodes.get(&prefix) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => {
                return Err(FsError::NotADirectory {
                    path: path.to_owned(),
                });
            }
            None => {
                return Err(FsError::NotFound {
                    path: path.to_owned(),
                });
            }
        }
    }
    Ok(())
}

impl FsAdapter for InMemoryFs {
    fn read<'a>(
        &'a self,
        path: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<ReadOutput, FsError>> {
        Box::pin(async move {
            let (key, parent) = key_of(path)?;
            let nodes = self.nodes();
            check_parent(&nodes, parent.as_deref(), path)?;
            match nodes.get(&key) {
                _ if key.is_empty() => Err(FsError::IsADirectory {
                    path: path.to_owned(),
                }),
                Some(Node::File(bytes)) => {
                    let end = bytes.len().min(limit);
                    Ok(ReadOutput::new(bytes[..end].to_vec(), bytes.len() > end))
                }
                Some(Node::Dir) => Err(FsError::IsADirectory {
                    path: path.to_owned(),
                }),
                None => Err(FsError::NotFound {
                    path: path.to_owned(),
                }),
            }
        })
    }

    fn write<'a>(
        &'a self,
        path: &'a str,
        contents: &'a [u8],
    ) -> BoxFuture<'a, Result<(), FsError>> {
        Box::pin(async move {
            let (key, parent) = key_of(path)?;
            let mut nodes = self.nodes();
            check_parent(&nodes, parent.as_deref(), path)?;
            if key.is_empty() || matches!(nodes.get(&key), Some(Node::Dir)) {
                return Err(FsError::IsADirectory {
                    path: path.to_owned(),
                });
            }
            nodes.insert(key, Node::File(contents.to_vec()));
            Ok(())
        })
    }

    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<DirEntry>, FsError>> {
        Box::pin(async move {
            let (key, parent) = key_of(path)?;
            let nodes = self.nodes();
            check_parent(&nodes, parent.as_deref(), path)?;
            match nodes.get(&key) {
                _ if key.is_empty() => {}
                Some(Node::Dir) => {}
                Some(Node::File(_)) => {
                    return Err(FsError::NotADirectory {
                        path: path.to_owned(),
                    });
                }
                None => {
                    return Err(FsError::NotFound {
                        path: path.to_owned(),
                    });
                }
            }
            let prefix = if key.is_empty() {
                String::new()
            } else {
                format!("{key}/")
            };
            Ok(nodes
                .range(prefix.clone()..)
                .take_while(|(name, _)| name.starts_with(&prefix))
                .filter_map(|(name, node)| {
                    let rest = &name[prefix.len()..];
                    (!rest.contains('/')).then(|| {
                        let kind = match node {
                            Node::File(_) => EntryKind::File,
                            Node::Dir => EntryKind::Dir,
                        };
                        DirEntry::new(rest, kind)
                    })
                })
                .collect())
        })
    }

    fn create_dir_all<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        Box::pin(async move {
            let parts = components(path)?;
            let mut nodes = self.nodes();
            let mut key = String::new();
            for part in parts {
                if !key.is_empty() {
                    key.push('/');
                }
                key.push_str(part);
                match nodes.get(&key) {
                    Some(Node::Dir) => {}
                    Some(Node::File(_)) => {
                        return Err(FsError::NotADirectory {
                            path: path.to_owned(),
                        });
                    }
                    None => {
                        nodes.insert(key.clone(), Node::Dir);
                    }
                }
            }
            Ok(())
        })
    }

    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        Box::pin(async move {
            let (key, parent) = key_of(path)?;
            if key.is_empty() {
                return Err(FsError::PathRefused {
                    path: path.to_owned(),
                    reason: "it is the sandbox root",
                });
            }
            let mut nodes = self.nodes();
            check_parent(&nodes, parent.as_deref(), path)?;
            match nodes.get(&key) {
                None => {
                    return Err(FsError::NotFound {
                        path: path.to_owned(),
                    });
                }
                Some(Node::Dir) => {
                    let prefix = format!("{key}/");
                    if nodes
                        .range(prefix.clone()..)
                        .next()
                        .is_some_and(|(name, _)| name.starts_with(&prefix))
                    {
                        return Err(FsError::NotEmpty {
                            path: path.to_owned(),
                        });
                    }
                }
                Some(Node::File(_)) => {}
            }
            nodes.remove(&key);
            Ok(())
        })
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat, FsError>> {
        Box::pin(async move {
            let (key, parent) = key_of(path)?;
            let nodes = self.nodes();
            check_parent(&nodes, parent.as_deref(), path)?;
            match nodes.get(&key) {
                _ if key.is_empty() => Ok(FileStat::new(EntryKind::Dir, 0)),
                Some(Node::Dir) => Ok(FileStat::new(EntryKind::Dir, 0)),
                Some(Node::File(bytes)) => Ok(FileStat::new(EntryKind::File, bytes.len() as u64)),
                None => Err(FsError::NotFound {
                    path: path.to_owned(),
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_resolve_lexically_and_refuse_escapes() {
        assert_eq!(components("a/./b//c").unwrap(), ["a", "b", "c"]);
        assert_eq!(components("/a/b/../c").unwrap(), ["a", "c"]);
        assert!(components("").unwrap().is_empty());
        for bad in ["..", "../x", "a/../../x", "/.."] {
            let error = components(bad).unwrap_err();
            assert_eq!(error.code(), "FS_PATH_REFUSED", "{bad}");
        }
        assert!(matches!(
            components("a\0b"),
            Err(FsError::PathRefused {
                reason: HAS_NUL,
                ..
            })
        ));
    }
}
