//! The memory run: the server in a child process (this binary again, `NOETIC_SERVE_BENCH_ROLE=server`,
//! the sessions of every thread created up front), the clients in this one, so each side's RSS
//! growth is its own. Three stages, each left idle before the RSS of both processes is read: idle
//! keep-alive HTTP/1 connections (one `GET /v1/health` served on each: what any connection costs,
//! for comparison), then the subscribers of one thread, then one subscriber on each of the others.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use noetic_core::{Replay, Scope};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{
    DEFAULT_SUBSCRIBERS, HOT, IN_FLIGHT, ROLE_ENV, SETTLE, SUBSCRIBERS_ENV, cold, env_count,
    events_url, harness, post_all, runtime, start, subscribe_all,
};

/// Resident set size in bytes (Linux).
pub(super) fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Memory per subscriber, by side: (server, client) for each scenario, in bytes.
pub(super) struct Memory {
    /// An idle keep-alive connection, server side only (the client's is a bare socket).
    pub(super) connection: f64,
    pub(super) one_thread: (f64, f64),
    pub(super) many_threads: (f64, f64),
}

/// The child of the memory run: serves, with the sessions of `hot` and every `cold-*` thread
/// created, prints `ready <base>`, then answers each `rss` line on stdin with `rss <bytes>` until
/// stdin closes.
pub(super) fn serve_for_memory_run() {
    let subscribers = env_count(SUBSCRIBERS_ENV, DEFAULT_SUBSCRIBERS);
    let runtime = runtime();
    let stop = CancellationToken::new();
    let base = runtime.block_on(async {
        let (server, base) = start(harness(Arc::default()), stop.clone()).await;
        let threads = std::iter::once(HOT.to_owned()).chain((0..subscribers).map(cold));
        for thread in threads {
            drop(
                server
                    .harness()
                    .sequenced_events(Scope::thread(thread), Replay::None),
            );
        }
        base
    });
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {base}").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().trim() == "rss" {
            writeln!(out, "rss {}", rss()).unwrap();
            out.flush().unwrap();
        }
    }
    stop.cancel();
}

/// The memory run: a server in a child process, the subscribers here, both left idle.
pub(super) fn memory(subscribers: usize) -> Memory {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE_ENV, "server")
        .env(SUBSCRIBERS_ENV, subscribers.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the bench runs itself as the server");
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut read_line = move || {
        let mut line = String::new();
        from_child.read_line(&mut line).unwrap();
        line.trim().to_owned()
    };
    let ready = read_line();
    let base = ready
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("the server process said `{ready}`"))
        .to_owned();
    let mut server_rss = move || {
        writeln!(to_child, "rss").unwrap();
        to_child.flush().unwrap();
        let answer = read_line();
        answer
            .strip_prefix("rss ")
            .and_then(|bytes| bytes.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("the server process said `{answer}`"))
    };
    let runtime = runtime();
    let client = reqwest::Client::new();
    runtime.block_on(async {
        // The threads, known to the server; a few subscriptions opened and closed first, so what
        // is measured next is the subscriptions, not what the first ones set up.
        let setup = reqwest::Client::new();
        let creates = std::iter::once(HOT.to_owned())
            .chain((0..subscribers).map(cold))
            .map(|thread| (format!("{base}/v1/threads"), json!({"thread_id": thread})))
            .collect();
        post_all(&setup, creates).await;
        drop(setup);
        drop(subscribe_all(&client, vec![events_url(&base, HOT); IN_FLIGHT]).await);
        tokio::time::sleep(SETTLE).await;
    });
    let mut sample = |runtime: &tokio::runtime::Runtime| {
        runtime.block_on(async { tokio::time::sleep(SETTLE).await });
        (server_rss(), rss() as f64)
    };
    let before_connections = sample(&runtime);
    let address = base.trim_start_matches("http://").to_owned();
    let connections = runtime.block_on(idle_connections(&address, subscribers));
    let with_connections = sample(&runtime);
    let hot = runtime.block_on(subscribe_all(
        &client,
        vec![events_url(&base, HOT); subscribers],
    ));
    let with_hot = sample(&runtime);
    let urls = (0..subscribers)
        .map(|index| events_url(&base, &cold(index)))
        .collect();
    let cold_streams = runtime.block_on(subscribe_all(&client, urls));
    let with_cold = sample(&runtime);
    runtime.block_on(async move {
        drop(connections);
        drop(hot);
        drop(cold_streams);
    });
    drop(server_rss);
    child.wait().expect("the server process ends");
    let per = |after: f64, before: f64| (after - before).max(0.0) / subscribers as f64;
    Memory {
        connection: per(with_connections.0, before_connections.0),
        one_thread: (
            per(with_hot.0, with_connections.0),
            per(with_hot.1, with_connections.1),
        ),
        many_threads: (per(with_cold.0, with_hot.0), per(with_cold.1, with_hot.1)),
    }
}

/// `count` connections to `address`, each having had one `GET /v1/health` answered, left open.
async fn idle_connections(address: &str, count: usize) -> Vec<TcpStream> {
    let request = format!("GET /v1/health HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let mut connections = Vec::with_capacity(count);
    for _ in 0..count {
        let stream = TcpStream::connect(address).await.unwrap();
        let mut sent = 0;
        while sent < request.len() {
            stream.writable().await.unwrap();
            match stream.try_write(&request.as_bytes()[sent..]) {
                Ok(written) => sent += written,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) => panic!("writing a request: {error}"),
            }
        }
        let mut answer = Vec::new();
        let mut buffer = [0_u8; 1024];
        while !answer.ends_with(b"\"ok\"}") {
            stream.readable().await.unwrap();
            match stream.try_read(&mut buffer) {
                Ok(0) => panic!("the server closed an idle connection"),
                Ok(read) => answer.extend_from_slice(&buffer[..read]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) => panic!("reading an answer: {error}"),
            }
        }
        connections.push(stream);
    }
    connections
}
