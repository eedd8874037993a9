//! A throwaway PostgreSQL server for tests, and a fresh database on it for each test (feature
//! `postgres`).
//!
//! [`test_database`] creates a uniquely named database (`noetic_<pid>_<n>`) on:
//!
//! - the server at `NOETIC_TEST_PG_URL` when it is set (a URL of a maintenance database, such as
//!   `postgres://postgres@127.0.0.1:5432/postgres`, which `.ci/run` exports for the server it starts);
//! - otherwise a server this test process starts once, on a free loopback port, with its data in a
//!   temp directory: `initdb` (trust authentication, `--no-sync`) then `postgres` with `fsync=off`. Run
//!   as the `postgres` system user when the process is root (PostgreSQL refuses to run as root).
//!
//! The self-started server outlives no test process: it runs under a small `sh` wrapper whose stdin is
//! a pipe this process holds. Statics are never dropped, but the pipe closes when the process exits
//! however it exits; the wrapper's `read` then returns, and it stops the server (`SIGINT`, a fast
//! shutdown), waits for it and removes the data directory.
//!
//! Without `NOETIC_TEST_PG_URL` and without PostgreSQL binaries ([`pg_binaries`]) there is no server:
//! [`test_database`] returns `None`, and a test skips loudly ([`test_database_or_skip!`](crate::test_database_or_skip)).
//!
//! Every test gets its own database, so the tests of one binary run in parallel on one server. A
//! [`TestDatabase`] drops its database when it is dropped (at the end of the test, and when the test
//! panics: it is dropped while unwinding), so a long-lived server at `NOETIC_TEST_PG_URL` does not
//! collect one database per test run.
//!
//! [`TlsServer`] (module `tls`) starts a server of its own with TLS on and a certificate made at
//! start, for tests of TLS connections.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::{AssertSqlSafe, Connection, Executor, PgConnection};

mod tls;

pub use tls::{TestCa, TlsServer};

/// The environment variable naming a server's maintenance-database URL to use instead of starting one.
pub const URL_VAR: &str = "NOETIC_TEST_PG_URL";

/// The environment variable naming the directory of `initdb` and `postgres`.
pub const BIN_VAR: &str = "NOETIC_PG_BIN";

/// How long a started server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A database of its own for one test, dropped (`DROP DATABASE … WITH (FORCE)`, ending any
/// connection still open on it) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    name: String,
    /// The maintenance-database URL of its server, to drop it from.
    admin: String,
}

impl TestDatabase {
    /// The database's URL (`postgres://postgres@127.0.0.1:PORT/noetic_<pid>_<n>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// How long dropping a test database may take.
const DROP_TIMEOUT: Duration = Duration::from_secs(30);

impl Drop for TestDatabase {
    /// Drops the database, on a thread and runtime of its own (a `Drop` cannot await, and the test's
    /// runtime may be the current thread), waiting at most 30 s. A failure is printed, not
    /// raised: this also runs while a failed test unwinds.
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let (done, finished) = std::sync::mpsc::channel();
        let dropper = std::thread::spawn(move || {
            let outcome = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())
                .and_then(|runtime| runtime.block_on(drop_database(&admin, &name)));
            let _ = done.send(outcome);
        });
        let problem = match finished.recv_timeout(DROP_TIMEOUT) {
            Ok(Ok(())) => {
                let _ = dropper.join();
                return;
            }
            Ok(Err(error)) => error,
            Err(_) => format!("no answer within {DROP_TIMEOUT:?}"),
        };
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "WARNING: the test database {} was not dropped: {problem}",
            self.name
        );
    }
}

/// `DROP DATABASE name WITH (FORCE)` on the server at `admin`.
async fn drop_database(admin: &str, name: &str) -> Result<(), String> {
    let mut conn = PgConnection::connect(admin)
        .await
        .map_err(|error| format!("connecting to the test server: {error}"))?;
    let drop = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
    let dropped = conn.execute(AssertSqlSafe(drop)).await;
    let _ = conn.close().await;
    dropped
        .map(|_| ())
        .map_err(|error| format!("dropping it: {error}"))
}

/// The directory holding `initdb` and `postgres`: `$NOETIC_PG_BIN` when set, else `pg_config --bindir`,
/// else the highest-versioned `/usr/lib/postgresql/*/bin`, else the first directory of `PATH` with
/// both. `None` when there is none.
pub fn pg_binaries() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = std::env::var_os(BIN_VAR) {
        let dir = PathBuf::from(dir);
        return has_both(&dir).then_some(dir);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if has_both(&dir) {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    if let Some((_, dir)) = versions.pop() {
        return Some(dir);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).find(|dir| has_both(dir))
}

/// Prints the loud line a test prints when it skips for want of PostgreSQL. Written to the stderr
/// stream itself, not through `eprintln!`, which the test harness captures (and shows only for a
/// failed test): a skip is seen in every run.
pub fn print_skip(test: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: no PostgreSQL binaries (initdb, postgres) found and {URL_VAR} unset: `{test}` did not run. \
         Install PostgreSQL (e.g. `apt-get install postgresql`), set {BIN_VAR} to its bin directory, or \
         set {URL_VAR} to a server's maintenance-database URL."
    );
}

/// Gets a fresh database ([`test_database`]) or, when there is no PostgreSQL, prints the skip line
/// ([`print_skip`]) and returns from the calling test.
#[macro_export]
macro_rules! test_database_or_skip {
    () => {
        match $crate::postgres::test_database().await {
            Some(database) => database,
            None => {
                fn __noetic_here() {}
                $crate::postgres::print_skip(&$crate::__test_name(::std::any::type_name_of_val(
                    &__noetic_here,
                )));
                return;
            }
        }
    };
}

/// A fresh, uniquely named database: on the server at `NOETIC_TEST_PG_URL`, else on this process's
/// throwaway server (started by the first call). `None` only when neither exists (no URL and no
/// PostgreSQL binaries). Dropping the [`TestDatabase`] drops the database.
///
/// # Panics
/// When the server cannot be started or reached, or the database cannot be created (with the
/// server's log tail): a broken set-up fails loudly rather than skipping.
pub async fn test_database() -> Option<TestDatabase> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let admin = admin_url().await?;
    let name = format!(
        "noetic_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let mut conn = PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|error| panic!("connecting to the test server at {admin}: {error}"));
    let create = format!("CREATE DATABASE \"{name}\"");
    if let Err(error) = conn.execute(AssertSqlSafe(create.clone())).await {
        // Left by an earlier process with the same id (a server that outlives test runs).
        let duplicate = error
            .as_database_error()
            .and_then(|error| error.code())
            .is_some_and(|code| code == "42P04");
        assert!(duplicate, "creating database {name}: {error}");
        let drop = format!("DROP DATABASE \"{name}\" WITH (FORCE)");
        conn.execute(AssertSqlSafe(drop))
            .await
            .unwrap_or_else(|error| panic!("dropping the stale database {name}: {error}"));
        conn.execute(AssertSqlSafe(create))
            .await
            .unwrap_or_else(|error| panic!("creating database {name}: {error}"));
    }
    let _ = conn.close().await;
    Some(TestDatabase {
        url: with_database(&admin, &name),
        name,
        admin,
    })
}

/// The maintenance-database URL of the server to use, starting this process's server if needed.
async fn admin_url() -> Option<String> {
    if let Some(url) = std::env::var(URL_VAR).ok().filter(|url| !url.is_empty()) {
        return Some(url);
    }
    static SERVER: tokio::sync::OnceCell<Result<Server, String>> =
        tokio::sync::OnceCell::const_new();
    let bin = pg_binaries()?;
    let server = SERVER
        .get_or_init(|| async move {
            let started = tokio::task::spawn_blocking(move || Server::start(&bin))
                .await
                .map_err(|error| format!("starting PostgreSQL panicked: {error}"))?;
            match started {
                Ok(server) => server.wait_ready().await.map(|()| server),
                Err(error) => Err(error),
            }
        })
        .await;
    match server {
        Ok(server) => Some(server.admin_url.clone()),
        Err(error) => panic!("the throwaway PostgreSQL server did not start: {error}"),
    }
}

/// `url` with its path (the database) replaced by `/database`.
fn with_database(url: &str, database: &str) -> String {
    let authority = url.find("://").map_or(0, |at| at + 3);
    let path = url[authority..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| authority + at);
    let rest = &url[path..];
    let query = rest.find(['?', '#']).map_or("", |at| &rest[at..]);
    format!("{}/{database}{query}", &url[..path])
}

/// A PostgreSQL server this process started, stopped (and its directory removed) when the process
/// exits, or before by [`Server::stop`].
struct Server {
    admin_url: String,
    port: u16,
    /// Its stdin, held open, keeps the server running.
    wrapper: Child,
    /// The server's log (inside the directory the wrapper removes).
    log: PathBuf,
}

/// Stops the server when the pipe on its stdin closes, then removes the directory: `$1` postgres,
/// `$2` data dir, `$3` port, `$4` the directory (socket, log), `$5` the log; the rest are more
/// arguments for `postgres`.
const WRAPPER: &str = r#"
pg="$1" data="$2" port="$3" dir="$4" log="$5"
shift 5
"$pg" -D "$data" -h 127.0.0.1 -p "$port" -k "$dir" -F -c fsync=off -c full_page_writes=off \
    -c synchronous_commit=off -c max_connections=300 "$@" </dev/null >"$log" 2>&1 &
pid=$!
read _ignored
kill -INT "$pid" 2>/dev/null
wait "$pid"
rm -rf "$dir"
"#;

/// What a server started for one purpose adds to the plain one.
#[derive(Default)]
struct ServerSetup<'a> {
    /// Files to write into the data directory after `initdb` (mode 0600, owned by the server's
    /// user): `(name, contents)`.
    files: Vec<(&'a str, &'a [u8])>,
    /// More arguments for `postgres` (`-c ssl=on`).
    args: Vec<&'a str>,
}

impl Server {
    /// Runs `initdb` and starts `postgres` under the wrapper (blocking).
    fn start(bin: &Path) -> Result<Server, String> {
        Server::start_with(bin, &ServerSetup::default())
    }

    /// As [`Server::start`], with `setup`'s files in the data directory and its arguments.
    fn start_with(bin: &Path, setup: &ServerSetup<'_>) -> Result<Server, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("noetic-pg-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let user = server_user()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|error| format!("chown {}: {error}", dir.display()))?;
        }
        let as_user = |command: &mut Command| {
            command.current_dir(&dir);
            if let Some((uid, gid)) = user {
                command.uid(uid).gid(gid);
            }
        };
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .arg("--locale=C");
        as_user(&mut initdb);
        let output = initdb
            .output()
            .map_err(|error| format!("running {}: {error}", bin.join("initdb").display()))?;
        if !output.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "initdb failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        for (name, contents) in &setup.files {
            let path = data.join(name);
            write_private(&path, contents, user)
                .map_err(|error| format!("writing {}: {error}", path.display()))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|error| format!("finding a free port: {error}"))?
            .port();
        let log = dir.join("server.log");
        let mut wrapper = Command::new("sh");
        wrapper
            .args(["-c", WRAPPER, "noetic-test-postgres"])
            .arg(bin.join("postgres"))
            .arg(&data)
            .arg(port.to_string())
            .arg(&dir)
            .arg(&log)
            .args(&setup.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C on the test run reaches only the test process, whose
            // exit then closes the pipe and stops the server in order.
            .process_group(0);
        as_user(&mut wrapper);
        let wrapper = wrapper
            .spawn()
            .map_err(|error| format!("starting the PostgreSQL wrapper: {error}"))?;
        Ok(Server {
            admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            port,
            wrapper,
            log,
        })
    }

    /// Stops the server (closing the wrapper's stdin) and waits at most `timeout` for the wrapper to
    /// have stopped it and removed its directory; kills the wrapper past that.
    fn stop(mut self, timeout: Duration) -> Result<(), String> {
        drop(self.wrapper.stdin.take());
        let pid = self.wrapper.id();
        let mut wrapper = self.wrapper;
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(wrapper.wait());
        });
        match stopped.recv_timeout(timeout) {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(format!("waiting for the server's wrapper: {error}")),
            Err(_) => {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
                Err(format!(
                    "the server on port {} did not stop within {timeout:?}",
                    self.port
                ))
            }
        }
    }

    /// Connects until the server accepts connections, for at most [`READY_TIMEOUT`].
    async fn wait_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            let error = match PgConnection::connect(&self.admin_url).await {
                Ok(conn) => {
                    let _ = conn.close().await;
                    return Ok(());
                }
                Err(error) => error,
            };
            if started.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "not accepting connections at {} after {READY_TIMEOUT:?} ({error}); server log:\n{}",
                    self.admin_url,
                    self.log_tail()
                ));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(250));
        }
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.log) {
            let _ = file.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// Writes `contents` to a new file at `path` with mode 0600, owned by `user` when given.
fn write_private(path: &Path, contents: &[u8], user: Option<(u32, u32)>) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// `(uid, gid)` of the `postgres` system user when this process is root (initdb and postgres refuse
/// to run as root), `None` otherwise.
fn server_user() -> Result<Option<(u32, u32)>, String> {
    // The effective uid without libc: /proc/self is owned by it.
    let euid = std::fs::metadata("/proc/self")
        .map(|meta| meta.uid())
        .map_err(|error| format!("reading /proc/self: {error}"))?;
    if euid != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|error| format!("reading /etc/passwd: {error}"))?;
    passwd
        .lines()
        .find_map(|line| {
            let mut fields = line.split(':');
            if fields.next()? != "postgres" {
                return None;
            }
            let uid = fields.nth(1)?.parse().ok()?;
            let gid = fields.next()?.parse().ok()?;
            Some(Some((uid, gid)))
        })
        .ok_or_else(|| {
            "running as root, and there is no `postgres` user in /etc/passwd to run PostgreSQL as"
                .to_owned()
        })
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn a_database_url_replaces_the_path_and_keeps_the_query() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "t1"),
            "postgres://postgres@127.0.0.1:5432/t1"
        );
        assert_eq!(
            with_database("postgres://u:p@h/postgres?sslmode=disable", "t2"),
            "postgres://u:p@h/t2?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h:1", "t3"), "postgres://h:1/t3");
    }
}
