//! The Restate test server: starts healthy on loopback, comes back after a crash on its base
//! directory, and is gone once dropped.

#![allow(clippy::unwrap_used)]

use noetic_test_support::restate_or_skip;

fn answers(url: &str) -> bool {
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn a_test_server_starts_survives_a_kill_by_restarting_and_stops_when_dropped() {
    let mut server = restate_or_skip!();
    let (ingress, admin) = (server.ingress_url(), server.admin_url());
    assert!(ingress.starts_with("http://127.0.0.1:"), "{ingress}");
    assert!(answers(&ingress) && answers(&admin));
    server.kill();
    assert!(!answers(&admin), "killed, the admin port is closed");
    server.restart().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(server.admin_url(), admin, "the same ports after a restart");
    assert!(answers(&ingress) && answers(&admin));
    drop(server);
    assert!(!answers(&admin), "dropped, the server is gone");
}
