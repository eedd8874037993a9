//! The conformance suites every [`FsAdapter`] and [`ShellAdapter`] runs, where the in-memory and the
//! local adapters mean the same thing.

use noetic_core::adapter::{EntryKind, FsAdapter, ShellAdapter, ShellCommand, ShellStatus};

/// Asserts the [`FsAdapter`] contract on `fs`, whose root must start empty: write, read (with the
/// limit and `truncated`), list sorted with kinds, `create_dir_all` (idempotent), `stat`, `remove`
/// (file, empty directory; a non-empty one refused), absolute paths under the root, `..` within it,
/// and the stable codes of every failure: `FS_NOT_FOUND`, `FS_NOT_A_DIRECTORY`, `FS_IS_A_DIRECTORY`,
/// `FS_NOT_EMPTY`, and `FS_PATH_REFUSED` for `..` above the root and for NUL bytes. `root` is how an
/// absolute path names the root (`/` for the in-memory fs, the directory for a local one).
///
/// # Panics
/// When the adapter breaks the contract.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the adapter's error
pub async fn fs_conformance(fs: &dyn FsAdapter, root: &str) {
    assert!(
        fs.list("").await.unwrap().is_empty(),
        "the root starts empty"
    );
    fs.write("a.txt", b"hello").await.unwrap();
    assert_eq!(fs.read("a.txt", 1024).await.unwrap().bytes, b"hello");
    let head = fs.read("a.txt", 2).await.unwrap();
    assert_eq!((head.bytes.as_slice(), head.truncated), (&b"he"[..], true));
    assert!(!fs.read("a.txt", 5).await.unwrap().truncated);
    fs.write("a.txt", b"bye").await.unwrap();
    assert_eq!(fs.read("./a.txt", 1024).await.unwrap().bytes, b"bye");

    fs.create_dir_all("dir/sub").await.unwrap();
    fs.create_dir_all("dir/sub").await.unwrap();
    fs.write("dir/sub/b.txt", b"b").await.unwrap();
    fs.write("dir/c.txt", b"cc").await.unwrap();
    let names = |entries: Vec<noetic_core::adapter::DirEntry>| {
        entries
            .into_iter()
            .map(|entry| (entry.name, entry.kind))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(fs.list("dir").await.unwrap()),
        [
            ("c.txt".to_owned(), EntryKind::File),
            ("sub".to_owned(), EntryKind::Dir)
        ]
    );
    assert_eq!(
        names(fs.list(".").await.unwrap()),
        [
            ("a.txt".to_owned(), EntryKind::File),
            ("dir".to_owned(), EntryKind::Dir)
        ]
    );
    let stat = fs.stat("dir/c.txt").await.unwrap();
    assert_eq!((stat.kind, stat.len), (EntryKind::File, 2));
    assert_eq!(fs.stat("dir").await.unwrap().kind, EntryKind::Dir);

    // `..` inside the root, and absolute paths under it
    assert_eq!(fs.read("dir/sub/../c.txt", 10).await.unwrap().bytes, b"cc");
    let absolute = format!("{}/dir/c.txt", root.trim_end_matches('/'));
    assert_eq!(fs.read(&absolute, 10).await.unwrap().bytes, b"cc");

    // failures, each with its code
    let code = |error: noetic_core::adapter::FsError| error.code();
    assert_eq!(
        code(fs.read("missing", 1).await.unwrap_err()),
        "FS_NOT_FOUND"
    );
    assert_eq!(
        code(fs.list("a.txt").await.unwrap_err()),
        "FS_NOT_A_DIRECTORY"
    );
    assert_eq!(
        code(fs.read("dir", 1).await.unwrap_err()),
        "FS_IS_A_DIRECTORY"
    );
    assert_eq!(
        code(fs.write("dir", b"x").await.unwrap_err()),
        "FS_IS_A_DIRECTORY"
    );
    assert_eq!(
        code(fs.write("nodir/x", b"x").await.unwrap_err()),
        "FS_NOT_FOUND"
    );
    assert_eq!(code(fs.stat("missing").await.unwrap_err()), "FS_NOT_FOUND");
    assert_eq!(code(fs.remove("dir").await.unwrap_err()), "FS_NOT_EMPTY");
    assert_eq!(
        code(fs.create_dir_all("a.txt/x").await.unwrap_err()),
        "FS_NOT_A_DIRECTORY"
    );
    for refused in ["..", "../x", "dir/../../x", "a\0b"] {
        assert_eq!(
            code(fs.read(refused, 1).await.unwrap_err()),
            "FS_PATH_REFUSED",
            "{refused:?}"
        );
        assert_eq!(
            code(fs.write(refused, b"x").await.unwrap_err()),
            "FS_PATH_REFUSED",
            "{refused:?}"
        );
        assert_eq!(
            code(fs.list(refused).await.unwrap_err()),
            "FS_PATH_REFUSED",
            "{refused:?}"
        );
    }
    assert_eq!(code(fs.remove("").await.unwrap_err()), "FS_PATH_REFUSED");

    fs.remove("dir/sub/b.txt").await.unwrap();
    fs.remove("dir/sub").await.unwrap();
    assert_eq!(
        code(fs.remove("dir/sub").await.unwrap_err()),
        "FS_NOT_FOUND"
    );
    fs.remove("dir/c.txt").await.unwrap();
    fs.remove("dir").await.unwrap();
    fs.remove("a.txt").await.unwrap();
    assert!(fs.list("").await.unwrap().is_empty());
}

/// Asserts what every [`ShellAdapter`] answers alike: a command that does not exist ends with exit
/// status 127 and says why on stderr, with nothing on stdout.
///
/// # Panics
/// When the adapter breaks the contract.
#[allow(clippy::unwrap_used)] // a test helper
pub async fn shell_conformance(shell: &dyn ShellAdapter) {
    let output = shell
        .run(ShellCommand::new("noetic-no-such-command-here"))
        .await
        .unwrap();
    assert_eq!(output.status, ShellStatus::Exited(127), "{output:?}");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "{output:?}");
    assert!(!output.stderr.is_empty(), "{output:?}");
}
