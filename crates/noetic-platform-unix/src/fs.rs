//! [`LocalFs`]: a real directory as an [`FsAdapter`], every path resolved inside it by the kernel.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat as RawStat, Mode, SFlag};
use noetic_core::adapter::fs::{DEFAULT_READ_LIMIT, HAS_NUL};
use noetic_core::adapter::{DirEntry, EntryKind, FileStat, FsAdapter, FsError, ReadOutput};

/// How a [`LocalFs`] resolves paths beneath its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Resolution {
    /// `openat2(RESOLVE_BENEATH)` (Linux 5.6+): the kernel resolves the whole path, symlinks
    /// included, and refuses any step outside the root; an absolute symlink is refused even when it
    /// points inside. Falls back to [`Resolution::Walk`] where the call does not exist.
    #[default]
    Beneath,
    /// Component by component from the root with `O_NOFOLLOW`: `..` is resolved against the
    /// directories already opened (never above the root) and every symlink is refused.
    Walk,
}

/// A directory on disk as an [`FsAdapter`]: every path is resolved inside the root.
///
/// A relative path resolves against the root; an absolute path is accepted only when it lies under
/// the root (it is taken relative to it); `..` may move within the root but never above it. Symlinks
/// are followed only while they stay inside (see [`Resolution`]). Everything is resolved by the
/// kernel from a descriptor of the root held open since [`LocalFs::rooted`], in the same call that
/// opens the file, so there is no check-then-open race: a symlink swapped in between is refused like
/// any other. A refusal is [`FsError::PathRefused`] (`FS_PATH_REFUSED`); nothing outside the root is
/// read or written. Reads are capped ([`LocalFs::max_read_bytes`], 1 MiB by default).
#[derive(Clone)]
pub struct LocalFs {
    root: Arc<OwnedFd>,
    root_path: PathBuf,
    max_read: usize,
    resolution: Resolution,
}

impl std::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFs")
            .field("root", &self.root_path)
            .field("max_read", &self.max_read)
            .field("resolution", &self.resolution)
            .finish()
    }
}

/// An error of the resolution, before it is named with the caller's path.
enum Fault {
    Refused(&'static str),
    Os(Errno),
}

impl From<Errno> for Fault {
    fn from(errno: Errno) -> Self {
        Fault::Os(errno)
    }
}

impl LocalFs {
    /// The directory `dir` (which must exist) as the root.
    ///
    /// # Errors
    /// When `dir` does not exist, is not a directory, or cannot be opened.
    pub fn rooted(dir: impl AsRef<Path>) -> std::io::Result<Self> {
        let root_path = std::fs::canonicalize(dir.as_ref())?;
        let root = nix::fcntl::open(
            &root_path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)?;
        Ok(LocalFs {
            root: Arc::new(root),
            root_path,
            max_read: DEFAULT_READ_LIMIT,
            resolution: Resolution::default(),
        })
    }

    /// Caps every read at `bytes`, whatever limit the caller asks for (default 1 MiB).
    pub fn max_read_bytes(mut self, bytes: usize) -> Self {
        self.max_read = bytes;
        self
    }

    /// How paths are resolved (default [`Resolution::Beneath`]).
    pub fn resolution(mut self, resolution: Resolution) -> Self {
        self.resolution = resolution;
        self
    }

    /// The root, canonical.
    pub fn root(&self) -> &Path {
        &self.root_path
    }

    /// Opens the directory at `path` (for a shell's cwd), resolved inside the root.
    pub(crate) fn open_dir(&self, path: &str) -> Result<OwnedFd, FsError> {
        let relative = self.relative(path)?;
        open_beneath(
            self.root.as_fd(),
            &relative,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
            self.resolution,
        )
        .map_err(|fault| name_fault(fault, path))
    }

    /// `path` relative to the root: an absolute path must lie under it.
    fn relative(&self, path: &str) -> Result<String, FsError> {
        if path.contains('\0') {
            return Err(FsError::PathRefused {
                path: path.to_owned(),
                reason: HAS_NUL,
            });
        }
        // A `..` above the root is refused as written, whatever exists on the way (the kernel would
        // stop at the first missing directory with "not found" instead).
        noetic_core::adapter::fs::components(path)?;
        if !path.starts_with('/') {
            return Ok(if path.is_empty() {
                ".".to_owned()
            } else {
                path.to_owned()
            });
        }
        let root = self.root_path.to_string_lossy();
        match path.strip_prefix(root.as_ref()) {
            Some("") => Ok(".".to_owned()),
            Some(rest) if rest.starts_with('/') => {
                let rest = rest.trim_start_matches('/');
                Ok(if rest.is_empty() {
                    ".".to_owned()
                } else {
                    rest.to_owned()
                })
            }
            _ => Err(FsError::outside_root(path)),
        }
    }

    /// Runs `op` on a blocking thread with the root and `path` relative to it.
    fn blocking<'a, T: Send + 'static>(
        &'a self,
        path: &'a str,
        op: impl FnOnce(BorrowedFd<'_>, &str, Resolution) -> Result<T, Fault> + Send + 'static,
    ) -> BoxFuture<'a, Result<T, FsError>> {
        Box::pin(async move {
            let relative = self.relative(path)?;
            let root = self.root.clone();
            let resolution = self.resolution;
            let joined =
                tokio::task::spawn_blocking(move || op(root.as_fd(), &relative, resolution)).await;
            match joined {
                Ok(result) => result.map_err(|fault| name_fault(fault, path)),
                Err(join) => Err(FsError::Io {
                    path: path.to_owned(),
                    source: std::io::Error::other(join.to_string()),
                }),
            }
        })
    }
}

/// Names a fault with the caller's path, as a stable-coded [`FsError`].
fn name_fault(fault: Fault, path: &str) -> FsError {
    let path = path.to_owned();
    match fault {
        Fault::Refused(reason) => FsError::PathRefused { path, reason },
        // EXDEV: a step of the resolution left the root; ELOOP: a symlink refused by `O_NOFOLLOW`.
        Fault::Os(Errno::EXDEV | Errno::ELOOP) => FsError::PathRefused {
            path,
            reason: noetic_core::adapter::fs::OUTSIDE_ROOT,
        },
        Fault::Os(Errno::ENOENT) => FsError::NotFound { path },
        Fault::Os(Errno::ENOTDIR) => FsError::NotADirectory { path },
        Fault::Os(Errno::EISDIR) => FsError::IsADirectory { path },
        Fault::Os(Errno::ENOTEMPTY) => FsError::NotEmpty { path },
        Fault::Os(errno) => FsError::Io {
            path,
            source: std::io::Error::from(errno),
        },
    }
}

/// Opens `relative` beneath `root` with `flags`.
fn open_beneath(
    root: BorrowedFd<'_>,
    relative: &str,
    flags: OFlag,
    mode: Mode,
    resolution: Resolution,
) -> Result<OwnedFd, Fault> {
    if resolution == Resolution::Beneath {
        let how = nix::fcntl::OpenHow::new()
            .flags(flags)
            .mode(mode)
            .resolve(nix::fcntl::ResolveFlag::RESOLVE_BENEATH);
        match nix::fcntl::openat2(root, relative, how) {
            Err(Errno::ENOSYS | Errno::EPERM) => {} // no openat2 here (or a seccomp filter): walk
            result => return result.map_err(Fault::Os),
        }
    }
    walk(root, relative, flags, mode)
}

/// [`Resolution::Walk`]: one `openat(O_NOFOLLOW)` per component.
fn walk(root: BorrowedFd<'_>, relative: &str, flags: OFlag, mode: Mode) -> Result<OwnedFd, Fault> {
    let parts: Vec<&str> = relative
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    // The directories opened so far below the root; `..` pops one.
    let mut stack: Vec<OwnedFd> = Vec::new();
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Some((last, ancestors)) = parts.split_last() else {
        return Ok(nix::fcntl::openat(root, ".", flags, mode)?);
    };
    for part in ancestors {
        if *part == ".." {
            if stack.pop().is_none() {
                return Err(Fault::Refused(noetic_core::adapter::fs::OUTSIDE_ROOT));
            }
            continue;
        }
        let parent = stack.last().map_or(root, AsFd::as_fd);
        let next = nix::fcntl::openat(parent, *part, dir_flags, Mode::empty())
            .map_err(|errno| refine_symlink(parent, part, errno))?;
        stack.push(next);
    }
    if *last == ".." {
        if stack.pop().is_none() {
            return Err(Fault::Refused(noetic_core::adapter::fs::OUTSIDE_ROOT));
        }
        let dir = stack.last().map_or(root, AsFd::as_fd);
        return Ok(nix::fcntl::openat(dir, ".", flags, mode)?);
    }
    let parent = stack.last().map_or(root, AsFd::as_fd);
    nix::fcntl::openat(parent, *last, flags | OFlag::O_NOFOLLOW, mode)
        .map_err(|errno| refine_symlink(parent, last, errno))
}

/// `ENOTDIR` from `O_DIRECTORY | O_NOFOLLOW` on a symlink means a refused symlink, not a file.
fn refine_symlink(parent: BorrowedFd<'_>, name: &str, errno: Errno) -> Fault {
    if errno == Errno::ENOTDIR
        && nix::sys::stat::fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .is_ok_and(|stat| kind_of(&stat) == EntryKind::Symlink)
    {
        return Fault::Refused(noetic_core::adapter::fs::OUTSIDE_ROOT);
    }
    Fault::Os(errno)
}

fn kind_of(stat: &RawStat) -> EntryKind {
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if format == SFlag::S_IFREG {
        EntryKind::File
    } else if format == SFlag::S_IFDIR {
        EntryKind::Dir
    } else if format == SFlag::S_IFLNK {
        EntryKind::Symlink
    } else {
        EntryKind::Other
    }
}

/// Splits `relative` into its parent and a final name that is a real entry (not `.`, `..`, empty).
fn parent_and_name(relative: &str) -> Result<(&str, &str), Fault> {
    let trimmed = relative.trim_end_matches('/');
    let (parent, name) = match trimmed.rsplit_once('/') {
        Some((parent, name)) => (if parent.is_empty() { "." } else { parent }, name),
        None => (".", trimmed),
    };
    if name.is_empty() || name == "." || name == ".." {
        return Err(Fault::Refused(
            "it names the sandbox root or a parent, not an entry",
        ));
    }
    Ok((parent, name))
}

impl FsAdapter for LocalFs {
    fn host_root(&self) -> Option<&Path> {
        Some(self.root())
    }

    fn read<'a>(
        &'a self,
        path: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, Result<ReadOutput, FsError>> {
        let limit = limit.min(self.max_read);
        self.blocking(path, move |root, relative, resolution| {
            let fd = open_beneath(
                root,
                relative,
                OFlag::O_RDONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
                resolution,
            )?;
            if kind_of(&nix::sys::stat::fstat(&fd)?) == EntryKind::Dir {
                return Err(Fault::Os(Errno::EISDIR));
            }
            let mut bytes = Vec::new();
            std::fs::File::from(fd)
                .take(limit as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(io_fault)?;
            let truncated = bytes.len() > limit;
            bytes.truncate(limit);
            Ok(ReadOutput::new(bytes, truncated))
        })
    }

    fn write<'a>(
        &'a self,
        path: &'a str,
        contents: &'a [u8],
    ) -> BoxFuture<'a, Result<(), FsError>> {
        let contents = contents.to_vec();
        self.blocking(path, move |root, relative, resolution| {
            parent_and_name(relative)?;
            let fd = open_beneath(
                root,
                relative,
                OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
                resolution,
            )?;
            let mut file = std::fs::File::from(fd);
            file.write_all(&contents).map_err(io_fault)?;
            file.flush().map_err(io_fault)
        })
    }

    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Vec<DirEntry>, FsError>> {
        self.blocking(path, move |root, relative, resolution| {
            let fd = open_beneath(
                root,
                relative,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
                resolution,
            )?;
            let mut dir = nix::dir::Dir::from_fd(fd)?;
            let mut entries = Vec::new();
            for entry in dir.iter() {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if name == "." || name == ".." {
                    continue;
                }
                let kind = match entry.file_type() {
                    Some(nix::dir::Type::File) => EntryKind::File,
                    Some(nix::dir::Type::Directory) => EntryKind::Dir,
                    Some(nix::dir::Type::Symlink) => EntryKind::Symlink,
                    _ => EntryKind::Other,
                };
                entries.push(DirEntry::new(name, kind));
            }
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(entries)
        })
    }

    fn create_dir_all<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        self.blocking(path, move |root, relative, resolution| {
            // Each level is created relative to its parent, itself resolved beneath the root.
            let mut prefix = String::new();
            for part in relative.split('/').filter(|part| !part.is_empty()) {
                let parent = if prefix.is_empty() { "." } else { &prefix };
                if part != "." && part != ".." {
                    let dir = open_beneath(
                        root,
                        parent,
                        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                        Mode::empty(),
                        resolution,
                    )?;
                    match nix::sys::stat::mkdirat(&dir, part, Mode::from_bits_truncate(0o755)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(errno) => return Err(Fault::Os(errno)),
                    }
                }
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(part);
            }
            // What is there now must be a directory inside the root.
            open_beneath(
                root,
                relative,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
                resolution,
            )?;
            Ok(())
        })
    }

    fn remove<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), FsError>> {
        self.blocking(path, move |root, relative, resolution| {
            let (parent, name) = parent_and_name(relative)?;
            let dir = open_beneath(
                root,
                parent,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
                resolution,
            )?;
            // The entry itself, not what a symlink points at.
            let stat =
                nix::sys::stat::fstatat(&dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
            let flag = if kind_of(&stat) == EntryKind::Dir {
                nix::unistd::UnlinkatFlags::RemoveDir
            } else {
                nix::unistd::UnlinkatFlags::NoRemoveDir
            };
            nix::unistd::unlinkat(&dir, name, flag)?;
            Ok(())
        })
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<FileStat, FsError>> {
        self.blocking(path, move |root, relative, resolution| {
            let fd = open_beneath(
                root,
                relative,
                OFlag::O_PATH | OFlag::O_CLOEXEC,
                Mode::empty(),
                resolution,
            )?;
            let stat = nix::sys::stat::fstat(&fd)?;
            let kind = kind_of(&stat);
            if kind == EntryKind::Symlink {
                // Only the walk stops on a symlink (`O_PATH | O_NOFOLLOW`): it follows none.
                return Err(Fault::Refused(noetic_core::adapter::fs::OUTSIDE_ROOT));
            }
            Ok(FileStat::new(kind, stat.st_size as u64))
        })
    }
}

fn io_fault(error: std::io::Error) -> Fault {
    Fault::Os(error.raw_os_error().map_or(Errno::EIO, Errno::from_raw))
}
