//! `LocalFs`: the fs conformance suite, and the sandbox: every way out of the root is refused with
//! the same error, and nothing outside is read or written.

use std::os::unix::fs::symlink;
use std::path::Path;

use noetic_core::adapter::FsAdapter;
use noetic_platform_unix::{LocalFs, Resolution};
use noetic_test_support::fs_conformance;

/// A temp dir holding `root/` (the sandbox) and `outside/secret.txt` beside it.
fn sandbox() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    std::fs::create_dir(dir.path().join("outside")).expect("outside");
    std::fs::write(dir.path().join("outside/secret.txt"), "secret").expect("secret");
    (dir, root)
}

fn both(root: &Path) -> [LocalFs; 2] {
    [
        LocalFs::rooted(root).expect("rooted"),
        LocalFs::rooted(root)
            .expect("rooted")
            .resolution(Resolution::Walk),
    ]
}

#[tokio::test]
async fn a_local_fs_passes_the_fs_conformance_suite_in_both_resolutions() {
    for resolution in [Resolution::Beneath, Resolution::Walk] {
        let dir = tempfile::tempdir().expect("temp dir");
        let fs = LocalFs::rooted(dir.path())
            .expect("rooted")
            .resolution(resolution);
        let root = fs.root().to_string_lossy().into_owned();
        fs_conformance(&fs, &root).await;
    }
}

async fn assert_refused(fs: &LocalFs, path: &str) {
    let read = fs.read(path, 100).await.expect_err(path);
    assert_eq!(read.code(), "FS_PATH_REFUSED", "{path:?}: {read}");
    let write = fs.write(path, b"written").await.expect_err(path);
    assert_eq!(write.code(), "FS_PATH_REFUSED", "{path:?}: {write}");
    let list = fs.list(path).await.expect_err(path);
    assert_eq!(list.code(), "FS_PATH_REFUSED", "{path:?}: {list}");
    let stat = fs.stat(path).await.expect_err(path);
    assert_eq!(stat.code(), "FS_PATH_REFUSED", "{path:?}: {stat}");
}

#[tokio::test]
async fn dot_dot_absolute_paths_outward_symlinks_and_nul_bytes_are_refused_alike() {
    let (dir, root) = sandbox();
    let outside = dir.path().join("outside");
    symlink(&outside, root.join("link-out")).expect("dir symlink");
    symlink("../outside/secret.txt", root.join("file-out")).expect("file symlink");
    symlink(outside.join("new.txt"), root.join("dangling-out")).expect("dangling symlink");
    for fs in both(&root) {
        for path in [
            "../outside/secret.txt",
            "..",
            "a/../../outside/secret.txt",
            &outside.join("secret.txt").to_string_lossy(),
            "/etc/passwd",
            "link-out/secret.txt",
            "file-out",
            "dangling-out",
            "secret\0.txt",
        ] {
            assert_refused(&fs, path).await;
        }
        let error = fs
            .read("../outside/secret.txt", 10)
            .await
            .expect_err("refused");
        assert!(
            error.to_string().contains("outside the sandbox root"),
            "{error}"
        );
        let error = fs
            .create_dir_all("link-out/made")
            .await
            .expect_err("refused");
        assert_eq!(error.code(), "FS_PATH_REFUSED");
        let error = fs
            .remove("../outside/secret.txt")
            .await
            .expect_err("refused");
        assert_eq!(error.code(), "FS_PATH_REFUSED");
    }
    // Nothing outside was written or removed.
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).expect("still there"),
        "secret"
    );
    assert!(!outside.join("new.txt").exists());
    assert!(!outside.join("made").exists());
    let names: Vec<_> = std::fs::read_dir(&outside)
        .expect("outside")
        .map(|entry| entry.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["secret.txt"]);
}

#[tokio::test]
async fn symlinks_that_stay_inside_are_followed_under_openat2() {
    let (_dir, root) = sandbox();
    std::fs::create_dir(root.join("real")).expect("real");
    std::fs::write(root.join("real/in.txt"), "inside").expect("in");
    symlink("real", root.join("alias")).expect("alias");
    let fs = LocalFs::rooted(&root).expect("rooted");
    assert_eq!(
        fs.read("alias/in.txt", 100).await.expect("followed").bytes,
        b"inside"
    );
    // The walk refuses every symlink, inside or not.
    let walk = fs.clone().resolution(Resolution::Walk);
    let error = walk.read("alias/in.txt", 100).await.expect_err("refused");
    assert_eq!(error.code(), "FS_PATH_REFUSED");
}

#[tokio::test]
async fn reads_are_capped_by_the_adapter_whatever_the_caller_asks() {
    let (_dir, root) = sandbox();
    std::fs::write(root.join("big.txt"), vec![b'x'; 10_000]).expect("big");
    let fs = LocalFs::rooted(&root).expect("rooted").max_read_bytes(1000);
    let read = fs.read("big.txt", usize::MAX).await.expect("read");
    assert_eq!(read.bytes.len(), 1000);
    assert!(read.truncated);
}

/// A symlink swapped in and out between every check and open: whatever the timing, a read through
/// the path gives the inside file or a refusal, never the outside one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_swapped_in_between_check_and_open_is_refused_never_followed_out() {
    let (dir, root) = sandbox();
    let outside = dir.path().join("outside");
    std::fs::create_dir(root.join("target")).expect("target");
    std::fs::write(root.join("target/secret.txt"), "inside").expect("inside file");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The attacker: flips `root/target` between a directory and a symlink to `outside`.
    let swapper = {
        let root = root.clone();
        let stop = stop.clone();
        let outside = outside.clone();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::rename(root.join("target"), root.join("target.real"));
                let _ = symlink(&outside, root.join("target"));
                let _ = std::fs::remove_file(root.join("target"));
                let _ = std::fs::rename(root.join("target.real"), root.join("target"));
                flips += 1;
            }
            flips
        })
    };
    for fs in both(&root) {
        let mut inside = 0;
        for _ in 0..2000 {
            match fs.read("target/secret.txt", 100).await {
                Ok(read) => {
                    assert_eq!(read.bytes, b"inside", "read the outside file");
                    inside += 1;
                }
                Err(error) => assert!(
                    // Mid-swap the path may be missing or briefly not a directory; never outside.
                    matches!(
                        error.code(),
                        "FS_PATH_REFUSED" | "FS_NOT_FOUND" | "FS_NOT_A_DIRECTORY"
                    ),
                    "{error}"
                ),
            }
            // Writing through the path never lands outside either.
            let _ = fs.write("target/planted.txt", b"x").await;
        }
        assert!(inside > 0, "the race never let the inside file through");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = swapper.join().expect("swapper");
    assert!(flips > 0);
    assert!(
        !outside.join("planted.txt").exists(),
        "a write escaped the root"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).expect("secret"),
        "secret"
    );
}
